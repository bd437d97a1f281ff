"""Adaptation batch mix (`adapt.novel_fraction`) and replay context in adaptation (`replay.context`)."""

from __future__ import annotations

import numpy as np
import pytest

from muse_jax.config import ConfigError, load_config
from muse_jax.loops.adapt import sample_batch, task_replay, write_back_rows
from muse_jax.replay import Replay, pack_episodes


def _episode(task_id: int, T: int = 20) -> dict[str, np.ndarray]:
    return {"action": np.zeros((T, 2), np.float32), "reward": np.zeros(T, np.float32),
            "is_first": np.arange(T) == 0, "is_terminal": np.zeros(T, bool),
            "task_id": np.full(T, task_id, np.int32), "time_to_success": np.full(T, -1.0, np.float32),
            "deter": np.ones((T, 3), np.float16), "stoch": np.ones((T, 2), np.uint8)}


def _replays(context: bool = True) -> tuple[Replay, Replay]:
    pre = pack_episodes([_episode(1) for _ in range(50)])  # 1000 pre-training steps
    replay = task_replay(10_000, 8, 0, pre, context)
    novel = Replay(10_000, 8, 1, context=context)
    novel.add_episode(_episode(0))
    return replay, novel


def test_default_is_uniform_over_the_retained_buffer():
    replay, _ = _replays()
    replay.add_episode(_episode(0))  # the novel episode joins the retained buffer: 13 of 663 starts
    batch, _ = sample_batch(replay, None, 4000, None)
    share = float((batch["task_id"][:, 0] == 0).mean())
    assert 0.01 < share < 0.035  # ~13/663 = 2%: its share of stored steps, nothing more


@pytest.mark.parametrize("fraction,expected", [(0.25, 2), (0.5, 4), (1.0, 8), (0.0, 0)])
def test_novel_fraction_fixes_the_share_of_novel_chunks(fraction, expected):
    replay, novel = _replays()
    batch, rows = sample_batch(replay, novel, 8, fraction)
    assert batch["task_id"].shape == (8, 8)
    assert int((batch["task_id"][:, 0] == 0).sum()) == expected
    assert "start_deter" in batch  # both parts carry the replay context
    assert [rp is novel for rp, _ in rows] == [False] * (8 - expected) + [True] * expected


def test_without_a_long_enough_novel_episode_the_batch_comes_from_the_buffer():
    replay, _ = _replays()
    empty = Replay(10_000, 8, 1)
    batch, _ = sample_batch(replay, empty, 8, 0.5)
    assert int((batch["task_id"][:, 0] == 0).sum()) == 0


def test_adaptation_replay_honours_replay_context():
    on, _ = _replays(context=True)
    off, _ = _replays(context=False)
    assert "start_deter" in on.sample(4) and "start_deter" not in off.sample(4)
    assert off.sample(16)["is_first"][:, 0].all()


def test_novel_fraction_range_is_checked():
    assert load_config("smoke").adapt.novel_fraction is None
    assert load_config("smoke", {"adapt.novel_fraction": 0.25}).adapt.novel_fraction == 0.25
    with pytest.raises(ConfigError, match="novel_fraction"):
        load_config("smoke", {"adapt.novel_fraction": 1.5})


def test_write_back_reaches_own_episodes_only_never_the_shared_pre_training_ones():
    """dreamerv3 writes training posteriors back; adaptation's shared pre-training views stay untouched."""
    pre = pack_episodes([_episode(1) for _ in range(3)])
    replay = task_replay(10_000, 8, 0, pre)
    replay.add_episode(_episode(0))  # the task's own episode
    for _ in range(20):
        batch, rows = sample_batch(replay, None, 8, None)
        deter = np.full((8, 8, 3), 7.0, np.float32)
        stoch = np.full((8, 8, 2), 5, np.int64)
        write_back_rows(rows, deter, stoch)
    np.testing.assert_array_equal(pre["deter"], 1.0)  # the shared arrays: unchanged
    own = [ep for ep in replay._episodes if ep["task_id"][0] == 0][0]
    assert (own["deter"] == 7.0).any() and (own["stoch"] == 5).any()
    shared = [ep for ep in replay._episodes if ep["task_id"][0] == 1]
    assert all((ep["deter"] == 1.0).all() for ep in shared)
