"""`train.overlap_collect`: acting while the train steps run (loops/run_loop.py, Collector.prefetch).

The refresh rule is checked on a real Collector over a scripted vector env with a recording policy: the
step acting at tick k has the learner state after the train calls of ticks 0..k-2 (without overlap:
0..k-1), and its mode follows the env-step counter as without overlap. The smoke runs check that an
overlapped pre-training run trains, is the same twice for a seed, and resumes after a stop the same way
twice.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import jax
import numpy as np
import pytest

from muse_common.files import read_jsonl
from muse_jax.checkpoint import Checkpointer
from muse_jax.config import load_config, resume_conflicts
from muse_jax.loops.collect import Collector
from muse_jax.loops.run_loop import RunLoop


class _Space:
    shape = (2,)


class ScriptedVecEnv:
    """`num_envs` envs with 3-dim observations whose episodes end every `length` steps."""

    def __init__(self, num_envs: int = 2, length: int = 3) -> None:
        self.num_envs, self.length, self.single_action_space, self._t = num_envs, length, _Space(), 0

    def _obs(self, first: bool) -> dict[str, np.ndarray]:
        n = self.num_envs
        return {"proprio": np.full((n, 3), self._t, np.float32), "task_id": np.ones(n, np.int32),
                "is_first": np.full(n, first), "success": np.zeros(n, bool)}

    def reset(self, seed=None):
        self._t = 0
        return self._obs(True), {}

    def step(self, action):
        self._t += 1
        end = self._t % self.length == 0
        return (self._obs(False), np.zeros(self.num_envs, np.float32), np.zeros(self.num_envs, bool),
                np.full(self.num_envs, end), {})

    def close(self):
        pass


def _acting_log(overlap: bool, ticks: int) -> list[tuple[int, str, float]]:
    """(learner version, mode, observation step) each tick's policy call was given; the train callback of
    every tick makes a new version, the first two env steps act at random."""
    calls: list[tuple[int, str, float]] = []

    def policy(state, carry, obs, key, mode):
        calls.append((state, mode, float(obs["proprio"][0, 0])))
        n = obs["proprio"].shape[0]
        return np.zeros((n, 2), np.float32), carry, {"competence": np.zeros(n), "value": np.zeros(n)}

    version = [0]
    col = Collector(lambda s: ScriptedVecEnv(), policy, {}, ["t"], seed=0)
    loop = RunLoop(col, lambda env_step: (version[0], "random" if env_step < 4 else "dreamer"), 0, 2,
                   overlap=overlap)
    loop.on_step(lambda tick: version.__setitem__(0, version[0] + 1))
    loop.run(done=lambda env_step: env_step >= 2 * ticks)
    return calls


def test_overlapped_policy_acts_with_the_state_one_train_call_before():
    serial, overlapped = _acting_log(False, 6), _acting_log(True, 6)
    assert [v for v, _, _ in serial] == [0, 1, 2, 3, 4, 5]
    # tick k: the train calls of ticks 0..k-2; tick 0 acts with the state at hand; the last prefetch
    # (for the tick after the run's end) is dispatched and never used
    assert [v for v, _, _ in overlapped] == [0, 0, 1, 2, 3, 4, 5]
    modes = ["random", "random", "dreamer", "dreamer", "dreamer", "dreamer"]
    assert [m for _, m, _ in serial] == modes and [m for _, m, _ in overlapped][:6] == modes
    # each call saw the observation of the step it acts at (the prefetch is dispatched after the env step)
    assert [t for _, _, t in overlapped][:6] == [t for _, _, t in serial] == [0, 1, 2, 3, 4, 5]


def test_collector_step_without_state_needs_a_prefetch():
    col = Collector(lambda s: ScriptedVecEnv(), lambda *a: None, {}, ["t"], seed=0)
    with pytest.raises(ValueError, match="nothing was prefetched"):
        col.step()


def test_collector_counts_the_seconds_spent_in_the_envs_step():
    """`Collector.env_s`: the public counter benchmarks/collect_overhead.py --loop reads (no private wrapping);
    only the vector env's step counts, not the policy."""
    import time

    class SlowVecEnv(ScriptedVecEnv):
        def step(self, action):
            time.sleep(0.02)
            return super().step(action)

    def slow_policy(state, carry, obs, key, mode):
        time.sleep(0.1)
        n = obs["proprio"].shape[0]
        return np.zeros((n, 2), np.float32), carry, {"competence": np.zeros(n), "value": np.zeros(n)}

    col = Collector(lambda s: SlowVecEnv(), slow_policy, {}, ["t"], seed=0)
    assert col.env_s == 0.0
    for _ in range(3):
        col.step(0, "dreamer")
    assert 3 * 0.02 <= col.env_s < 3 * 0.1, col.env_s  # the policy's 0.3 s are not in it
    col.close()


def test_overlap_collect_setting_defaults_off_and_older_runs_resume_without_it():
    cfg = load_config("smoke")
    assert cfg.train.overlap_collect is False
    on = load_config("smoke", ["train.overlap_collect=true"])
    assert on.train.overlap_collect is True
    saved = cfg.to_dict()
    del saved["train"]["overlap_collect"]  # a run saved before the setting existed acted without overlap
    assert resume_conflicts(saved, cfg) == []
    assert resume_conflicts(saved, on) == ["train.overlap_collect"]
    assert cfg.adapt.overlap_collect is False  # adaptation's own switch, also off for runs saved before it
    del saved["adapt"]["overlap_collect"]
    assert resume_conflicts(saved, cfg) == []


# ----------------------------------------------------------------------------- smoke pre-training

TIMING = ("env_steps_per_s", "train_steps_per_s")


def _outcome(logdir):
    """Final learner state (host arrays), counters, and metrics lines without their timing columns."""
    ck = Checkpointer(logdir / "checkpoints", read_only=True)
    state, _, meta = ck.restore()
    ck.close()
    lines = [{k: v for k, v in x.items() if k not in TIMING} for x in read_jsonl(logdir / "metrics.jsonl")]
    return [np.asarray(x) for x in jax.tree.leaves(state)], meta["counters"], lines


def _same(a, b) -> None:
    (sa, ca, la), (sb, cb, lb) = a, b
    assert ca == cb
    assert la == lb
    assert len(sa) == len(sb) and all(np.array_equal(x, y) for x, y in zip(sa, sb, strict=True))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from muse_jax.loops import pretrain as pre

    cfg = load_config("smoke", ["train.overlap_collect=true", "train.env_steps=300"])
    root = tmp_path_factory.mktemp("overlap")
    quiet = lambda s: None  # noqa: E731
    for name in ("a", "b"):
        pre._pretrain(cfg, root / name, echo=quiet)
    for name in ("c", "d"):  # stopped at 200 (a checkpoint, as a kill after it), resumed to the end
        pre._pretrain(cfg, root / name, stop_at=200, echo=quiet)
        pre._pretrain(cfg, root / name, echo=quiet)
    return cfg, {name: _outcome(root / name) for name in "abcd"}


@pytest.mark.slow
@pytest.mark.long  # four 300-step pre-trainings; the tests above pin the overlapped policy's one-step lag
def test_overlapped_pretraining_trains_and_is_the_same_twice(runs):
    cfg, out = runs
    state, counters, lines = out["a"]
    assert counters["env_steps"] == 300 and counters["train_steps"] > 50
    trained = [x for x in lines if "loss/total" in x]
    assert trained and all(np.isfinite(x["loss/total"]) for x in trained)
    _same(out["a"], out["b"])


@pytest.mark.slow
@pytest.mark.long  # the same four pre-trainings
def test_overlapped_pretraining_resumes_after_a_stop_the_same_way_twice(runs):
    cfg, out = runs
    _same(out["c"], out["d"])
    state, counters, lines = out["c"]
    assert counters["env_steps"] == 300 and counters["episodes_cut"] == cfg.env.num_envs
    assert [x["step"] for x in lines] == sorted({x["step"] for x in lines})
    # the resumed run acted afresh after the stop (new episodes, a fresh policy carry): not the unbroken run
    assert not all(np.array_equal(x, y) for x, y in zip(state, out["a"][0], strict=True))


@pytest.mark.slow
def test_pretraining_builds_its_loop_with_the_setting(tmp_path, loop_overlaps):
    from muse_jax.loops import pretrain as pre

    seen = loop_overlaps(pre)
    for on in ("false", "true"):
        pre._pretrain(load_config("smoke", [f"train.overlap_collect={on}"]), tmp_path / on, stop_at=4,
                      echo=lambda s: None)
    assert seen == [False, True]
