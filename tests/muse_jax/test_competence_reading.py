"""The two readings of the time to success (`model.competence_reading`, `muse_jax/competence.py`):
`steps_left` (steps from the current step to the first success) and `from_start` (the success's step index
from the episode start, one label per episode). psi_1 is the same under both; psi_2..psi_N are not."""

from __future__ import annotations

import types
from collections import deque

import numpy as np
import pytest
from episode_helpers import make_episode
from hypothesis import given, settings
from hypothesis import strategies as st

from muse_jax import evaluate
from muse_jax.competence import READINGS, competence_labels, steps_to_success
from muse_jax.config import ConfigError, from_dict, load_config
from muse_jax.config.load import KEYS_ADDED_WITH_OLD_BEHAVIOUR, resume_conflicts
from muse_jax.loops import pretrain as pre
from muse_jax.loops.collect import Episode
from muse_jax.replay import Replay


def labels(success, reading, max_steps, n):
    return np.asarray(competence_labels(steps_to_success(success, reading), max_steps, n))


def test_from_start_labels_every_step_with_the_success_step_and_failures_stay_minus_one():
    np.testing.assert_array_equal(steps_to_success([0, 0, 1, 0, 1], "from_start"), [2, 2, 2, 2, 2])
    np.testing.assert_array_equal(steps_to_success([1, 0, 0], "from_start"), [0, 0, 0])
    np.testing.assert_array_equal(steps_to_success([0, 0, 0], "from_start"), [-1, -1, -1])
    np.testing.assert_array_equal(steps_to_success([0, 0, 1, 0, 1]), [2, 1, 0, 0, 0])  # the default: steps left
    with pytest.raises(ValueError, match="competence_reading"):
        steps_to_success([0, 1], "from_the_end")
    assert READINGS == evaluate.READINGS  # evaluate repeats them to stay free of JAX


def test_readings_agree_on_psi1_and_differ_on_the_later_quantiles():
    """L = 20, N = 5 (thresholds 20, 16, 12, 8, 4), success at step 10 of a 13-step episode: steps left
    go 10, 9, ..., 1, 0, 0, 0 (all five components once <= 4); from the start it is 10 at every step
    (components 1-3: 10 <= 12 but not <= 8)."""
    success = np.zeros(13, bool)
    success[10:] = True
    left, start = labels(success, "steps_left", 20, 5), labels(success, "from_start", 20, 5)
    np.testing.assert_array_equal(left[:, 0], start[:, 0])
    np.testing.assert_array_equal(start, np.tile([1, 1, 1, 0, 0], (13, 1)))
    np.testing.assert_array_equal(left.sum(-1), [3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5])
    np.testing.assert_array_equal(left[0], start[0])  # at the start both count the same steps
    assert (left[:, 1:] != start[:, 1:]).any(0).tolist() == [False, False, True, True]  # psi_4, psi_5 differ
    # the true quantile classes evaluate scores against say the same
    np.testing.assert_array_equal(evaluate.true_quantiles(10, 13, 20, 5, "from_start"), start.sum(-1))
    np.testing.assert_array_equal(evaluate.true_quantiles(10, 13, 20, 5), left.sum(-1))
    with pytest.raises(ValueError, match="reading"):
        evaluate.true_quantiles(10, 13, 20, 5, "other")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=60), st.integers(0, 40), st.integers(1, 8))
def test_property_psi1_identical_and_steps_left_labels_dominate(success, extra, n):
    """For any episode (L >= its length, any N): psi_1 is identical at every step; the two readings
    agree everywhere at step 0 and on a failed episode; `from_start` is one label per episode; and since
    the steps left never exceed the success time, the `steps_left` labels are >= the `from_start` ones."""
    success = np.asarray(success, bool)
    max_steps = len(success) + extra
    left, start = labels(success, "steps_left", max_steps, n), labels(success, "from_start", max_steps, n)
    np.testing.assert_array_equal(left[:, 0], start[:, 0])
    np.testing.assert_array_equal(left[:, 0], np.full(len(success), float(success.any())))
    np.testing.assert_array_equal(left[0], start[0])
    assert (start == start[:1]).all()
    assert (left >= start).all()
    if not success.any():
        np.testing.assert_array_equal(left, start)
        return
    first = int(np.flatnonzero(success)[0])
    # they differ exactly where some step t has first - t within a component's threshold but first is not
    thresholds = (n + 1 - np.arange(1, n + 1)) * max_steps / n
    k_left = np.maximum(first - np.arange(len(success)), 0)
    expected = (k_left[:, None] <= thresholds) & ~(first <= thresholds)
    np.testing.assert_array_equal(left != start, expected)
    t_true = evaluate.true_quantiles(first, len(success), max_steps, n, "from_start")
    np.testing.assert_array_equal(t_true, start.sum(-1))


def test_replay_and_collector_episodes_store_the_labels_of_the_reading():
    ep, success = make_episode(6, success_at=3)
    for reading, want in (("steps_left", [3, 2, 1, 0, 0, 0]), ("from_start", [3] * 6)):
        r = Replay(100, 4, seed=0)
        r.add_episode(ep, success, reading=reading)
        np.testing.assert_array_equal(r._episodes[0]["time_to_success"], want)
        collected = Episode("t", ep, success, np.zeros(6), np.zeros(6))
        np.testing.assert_array_equal(collected.replay_data(reading)["time_to_success"], want)
        packed = pre.partial_state([collected, None], reading)  # a checkpoint's unfinished episodes
        np.testing.assert_array_equal(packed["time_to_success"], want)
        batch = r.sample(2)  # what the world model's competence loss reads
        assert set(np.unique(batch["time_to_success"])) <= set(want)
    np.testing.assert_array_equal(Episode("t", ep, success, np.zeros(6), np.zeros(6)).replay_data()["time_to_success"],
                                  [3, 2, 1, 0, 0, 0])  # the default is unchanged


def test_pretraining_stores_episodes_with_the_configured_reading():
    """`PretrainingRun.store_episodes` (the pre-training loop's callback) labels by `model.competence_reading`."""
    cfg = load_config("smoke", {"model.competence_reading": "from_start"})
    ep, success = make_episode(6, success_at=2)
    host = types.SimpleNamespace(cfg=cfg, replay=Replay(100, 4, seed=0), window=[], recent=deque(maxlen=4),
                                 counters={"episodes": 0}, driver=None)
    tick = types.SimpleNamespace(episodes=[Episode("reach-v3", ep, success, np.zeros(6), np.zeros(6))], faults=[])
    pre.PretrainingRun.store_episodes(host, tick)
    np.testing.assert_array_equal(host.replay._episodes[0]["time_to_success"], [2] * 6)
    assert host.recent[0]["time_to_success"] == 2  # the record keeps the success step, whatever the reading


def test_evaluation_scores_quantiles_by_the_reading_and_says_which():
    """A step-wise prediction that tightens as success nears is right under `steps_left`, the constant one
    under `from_start` (L = 20, N = 5, success at step 10 of 13)."""
    tightening = [3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5]
    eps = [{"task": "a", "episode": 0, "success": True, "time_to_success": 10, "signal": [4.0] * 13,
            "quantile": tightening}]
    left = evaluate.summarize("muse", eps, n_quantiles=5, max_steps=20)
    start = evaluate.summarize("muse", eps, n_quantiles=5, max_steps=20, reading="from_start")
    assert left["sa_quantile_accuracy"] == 1.0 and start["sa_quantile_accuracy"] == pytest.approx(2 / 13)
    assert left["competence_reading"] == "steps_left" and start["competence_reading"] == "from_start"
    assert left["sa_accuracy"] == start["sa_accuracy"] and left["sa_auroc"] == start["sa_auroc"]
    sa = evaluate.self_awareness("muse", eps, 5, 20, reading="from_start")
    assert sa["sa/quantile_accuracy"] == pytest.approx(2 / 13)


def test_config_default_old_runs_and_resume():
    cfg = load_config("smoke")
    assert cfg.model.competence_reading == "steps_left"
    assert load_config("smoke", {"model.competence_reading": "from_start"}).model.competence_reading == "from_start"
    with pytest.raises(ConfigError, match="competence_reading"):
        load_config("smoke", {"model.competence_reading": "from_end"})
    saved = cfg.to_dict()
    del saved["model"]["competence_reading"]  # a run saved before the setting existed
    assert from_dict(saved).model.competence_reading == "steps_left"  # adapt restores it with the old labels
    assert KEYS_ADDED_WITH_OLD_BEHAVIOUR["model.competence_reading"] == "steps_left"
    assert resume_conflicts(saved, cfg) == []
    # the replay's stored labels follow the reading: a resume may not switch it
    assert resume_conflicts(saved, cfg.replace({"model.competence_reading": "from_start"})) == [
        "model.competence_reading"]
