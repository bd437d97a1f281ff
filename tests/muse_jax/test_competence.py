"""Self-awareness labels: with k steps left, component i is 1 iff k <= (N+1-i)·L/N."""

import jax
import numpy as np
import pytest

from muse_jax.competence import competence, competence_labels, steps_to_success


@pytest.mark.parametrize("jit", [False, True])
def test_labels_boundaries_failure_and_first_quantile(jit):
    f = (lambda k: competence_labels(k, 500, 5))
    f = jax.jit(f) if jit else f
    k = np.array([0, 100, 101, 200, 201, 300, 400, 401, 500, 501, -1], np.float32)
    expected = np.array([
        [1, 1, 1, 1, 1],  # success now: first quantile
        [1, 1, 1, 1, 1],  # k = L/N exactly is still the first quantile
        [1, 1, 1, 1, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 0, 0, 0, 0],
        [1, 0, 0, 0, 0],  # k = L: last quantile
        [0, 0, 0, 0, 0],  # beyond the episode
        [0, 0, 0, 0, 0],  # failure
    ], np.float32)
    np.testing.assert_array_equal(f(k), expected)


def test_labels_shape_and_competence_sum():
    labels = competence_labels(np.full((2, 3), 7.0), 50, 4)
    assert labels.shape == (2, 3, 4) and labels.dtype == np.float32
    np.testing.assert_array_equal(competence(labels), 4.0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="max_steps"):
        competence_labels(np.zeros(3), 0, 5)
    with pytest.raises(ValueError, match="competence_quantiles"):
        competence_labels(np.zeros(3), 10, 0)


def test_steps_to_success_labels():
    np.testing.assert_array_equal(steps_to_success([0, 0, 1, 0, 1]), [2, 1, 0, 0, 0])
    np.testing.assert_array_equal(steps_to_success(np.array([0, 0, 0, 1, 1, 0], bool)), [3, 2, 1, 0, 0, 0])
    np.testing.assert_array_equal(steps_to_success([0, 0, 0]), [-1, -1, -1])
