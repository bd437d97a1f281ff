"""The statistics and arms of benchmarks/regulation_effect.py (the run itself is a benchmark, not a test)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.regulation_effect import arms, clopper_pearson, mcnemar_exact


def test_arms_sweep_beta_and_both_readings_against_the_plain_actor():
    table = arms(0.5)
    assert table["plain"] == {"regulation.strategy": "none"}
    for rollout in ("forward", "in_place"):
        for beta in (0.0, 0.02, 0.1, 0.5):
            assert table[f"{rollout}/beta={beta}"]["regulation.beta"] == beta
        assert table[f"{rollout}/normalized=0.5"]["regulation.step"] == "normalized"
    # the controls (sample and noise-free mean) and the other two strategies
    assert table["mean"] == {"regulation.strategy": "mean"}
    assert table["rollouts"] == {"regulation.strategy": "rollouts"} and table["mcts"] == {"regulation.strategy": "mcts"}
    assert len(table) == 14


def test_exact_intervals_and_paired_test():
    low, high = clopper_pearson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.3085, abs=1e-4)
    low, high = clopper_pearson(24, 48)
    assert low < 0.5 < high
    a = np.array([1, 1, 1, 1, 1, 0, 0, 1], bool)
    b = np.array([0, 0, 0, 0, 0, 0, 0, 1], bool)
    res = mcnemar_exact(a, b)
    assert (res["only_this"], res["only_other"]) == (5, 0)
    assert res["p"] == pytest.approx(2 / 32)  # two-sided exact binomial on 5 discordant pairs
    assert mcnemar_exact(a, a)["p"] == 1.0
