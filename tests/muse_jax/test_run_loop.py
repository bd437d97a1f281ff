"""The shared acting-and-training loop (loops/run_loop.py) and the train driver both runs use.

The loop is driven by a scripted collector (no envs, no model): callbacks keep their registration
order, clocks fire as embodied's LocalClock does, and DreamerV3's train-ratio clock behind
pre-training's start rule owes the number of steps the rule gives, computed here from the rule.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from muse_jax.loops.run_loop import Every, RunLoop, Tick
from muse_jax.loops.train_driver import TrainRatio, train_steps_due


class ScriptedCollector:
    """`num_envs` envs whose episodes all end every `length` steps; a fault at the steps in `fault_at`."""

    def __init__(self, num_envs: int, length: int, fault_at: tuple[int, ...] = ()) -> None:
        self.num_envs, self.length, self.fault_at = num_envs, length, fault_at
        self.faults: list[dict] = []
        self.calls: list[tuple] = []
        self._t = 0

    def step(self, state, mode):
        self.calls.append((state, mode))
        self._t += 1
        if self._t in self.fault_at:
            self.faults.append({"reason": "scripted"})
        if self._t % self.length:
            return []
        return [types.SimpleNamespace(task="t", length=self.length) for _ in range(self.num_envs)]


def test_callbacks_run_in_registration_order_behind_their_clocks():
    col = ScriptedCollector(num_envs=2, length=3)
    seen = []
    loop = RunLoop(col, lambda step: ("w", "random" if step < 4 else "dreamer"), env_step=0, steps_per_tick=2)
    loop.on_step(lambda tick: seen.append(("a", tick.env_step, len(tick.episodes))))
    loop.on_step(lambda tick: seen.append(("b", tick.env_step)), clock=lambda tick: tick.env_step % 4 == 0)
    loop.on_step(lambda tick: seen.append(("c", tick.env_step)))
    assert loop.run(done=lambda step: step >= 8) is True
    assert seen == [("a", 2, 0), ("c", 2), ("a", 4, 0), ("b", 4), ("c", 4), ("a", 6, 2), ("c", 6),
                    ("a", 8, 0), ("b", 8), ("c", 8)]
    # the policy's mode is chosen from the counter before the step
    assert [m for _, m in col.calls] == ["random", "random", "dreamer", "dreamer"]
    assert loop.env_step == 8


def test_a_resumed_loop_counts_on_from_its_step_and_stops_when_asked():
    col = ScriptedCollector(num_envs=1, length=2)
    loop = RunLoop(col, lambda step: (None, "x"), env_step=100, steps_per_tick=1)
    ticks: list[Tick] = []
    loop.on_step(ticks.append)
    loop.on_step(lambda tick: loop.stop(), clock=lambda tick: bool(tick.episodes))
    assert loop.run(done=lambda step: False) is False
    assert [t.env_step for t in ticks] == [101, 102]  # stopped after the step that finished an episode


def test_faults_reach_the_callbacks_of_the_step_they_happened_in():
    col = ScriptedCollector(num_envs=1, length=50, fault_at=(3,))
    loop = RunLoop(col, lambda step: (None, "x"), env_step=0, steps_per_tick=1)
    faults = []
    loop.on_step(lambda tick: faults.append((tick.env_step, len(tick.faults))))
    loop.run(done=lambda step: step >= 5)
    assert faults == [(1, 0), (2, 0), (3, 1), (4, 0), (5, 0)]


@pytest.mark.parametrize("every,start,until,steps_per_tick", [(100, 0, 250, 2), (7, 3, None, 1), (10, 20, 45, 4)])
def test_every_fires_like_a_local_clock_and_at_the_last_step(every, start, until, steps_per_tick):
    clock = Every(every, start, until=until)
    fired, last = [], start
    for step in range(start + steps_per_tick, 300, steps_per_tick):
        expect = step - last >= every or (until is not None and step >= until)
        assert clock(Tick(step, [], [])) == expect, step
        if expect:
            fired.append(step)
            last = step
    assert fired and all(b - a >= every or b >= (until or 10**9) for a, b in zip(fired, fired[1:], strict=False))


@pytest.mark.parametrize("num_envs,length,B,T,ratio,total", [(2, 51, 4, 16, 32, 400), (4, 10, 2, 8, 64, 300),
                                                               (1, 100, 4, 16, 512, 250)])
def test_pretraining_start_rule_through_the_loop_owes_what_dreamerv3_rule_gives(num_envs, length, B, T, ratio,
                                                                                total):
    """Pre-training's train callback (`PretrainingRun.ready_to_train` + TrainRatio) on the loop: the first
    step comes once B * T env steps are collected and an episode can be sampled, then int(ratio / (B * T))
    per env step; the count is computed from the rule, not observed."""
    from muse_jax.loops.pretrain import PretrainingRun

    col = ScriptedCollector(num_envs=num_envs, length=length)
    stored = {"episodes": 0}
    fake = types.SimpleNamespace(cfg=types.SimpleNamespace(replay=types.SimpleNamespace(batch_size=B, seq_len=T,
                                                                                    unfinished=False)),
                                 should_train=TrainRatio(ratio, B, T),
                                 replay=types.SimpleNamespace(can_sample=lambda: stored["episodes"] > 0))
    trained = {"n": 0}
    loop = RunLoop(col, lambda step: (None, "x"), env_step=0, steps_per_tick=num_envs)
    loop.on_step(lambda tick: stored.__setitem__("episodes", stored["episodes"] + len(tick.episodes)))
    loop.on_step(lambda tick: trained.__setitem__("n", trained["n"] + fake.should_train(tick.env_step)),
                 clock=lambda tick: PretrainingRun.ready_to_train(fake, tick))
    loop.run(done=lambda step: step >= total)
    first_episode_end = length * num_envs  # the env step at which the first episodes finish
    start = max(first_episode_end, -(-B * T // num_envs) * num_envs)  # both, on the loop's step grid
    per_step = ratio / (B * T)
    expect = 1 + int((loop.env_step - start) * per_step) if start <= loop.env_step else 0
    assert trained["n"] == expect  # ratios chosen so that ratio / (B * T) is exact in floating point
    assert trained["n"] < train_steps_due(loop.env_step, ratio, B, T)  # no burst for the steps before the start


def test_adaptation_train_count_follows_the_ratio_from_the_first_step():
    """Adaptation's clock counts from the group's step 0 (MUSE §3.2.1, sequential per task): after each
    task step the driver owes `train_steps_due` in total."""
    assert [train_steps_due(s, 32, 4, 16) for s in (0, 1, 2, 3, 4, 51, 102)] == [0, 0, 1, 1, 2, 25, 51]


def _tiny_learner(make_config, context=True):
    from muse_jax import agent as ag

    cfg = make_config(**{"replay.batch_size": 4, "replay.seq_len": 8, "replay.context": context})
    spec = ag.ObsSpec(image_shape=None, proprio_dim=4, act_dim=2, num_tasks=1)
    return cfg, ag.create_learner(cfg, spec, seed=0)


class RecordingBatches:
    """A Batches source that logs sample/write-back order; the batch is always the same synthetic one."""

    def __init__(self, batch, log, name="src"):
        self.batch, self.log, self.name, self.n = batch, log, name, 0

    def can_sample(self):
        return True

    def sample(self):
        self.n += 1
        self.log.append(("sample", self.n))
        return self.batch, self.n

    def write_back(self, where, context):
        deter, _ = context
        self.log.append(("write", where, tuple(np.shape(deter))))


@pytest.mark.parametrize("kind", ["data_parallel", "task_stacked"])
def test_driver_writes_posteriors_back_late_for_pretraining_and_at_once_for_adaptation(make_config, make_batch, kind):
    """Pre-training queues each step's posteriors until the next train call that draws a batch (no
    dispatch stall, and a call with nothing owed does not wait for the device); the task-stacked
    adaptation driver writes them before drawing the next batch, as its loop always did."""
    import jax

    from muse_jax.loops.adapt import stack_states
    from muse_jax.loops.train_driver import TrainDriver

    cfg, learner = _tiny_learner(make_config)
    batch = make_batch(5, B=4, T=8)
    batch["deter"] = np.zeros((4, 8, cfg.model.deter), np.float16)
    batch["stoch"] = np.zeros((4, 8, cfg.model.stoch), np.uint8)
    log: list = []
    if kind == "data_parallel":
        driver = TrainDriver.data_parallel(cfg, learner.graphdef, learner.state, 0, seed=0)
        src = RecordingBatches(batch, log)
    else:
        K = 2
        driver = TrainDriver.task_stacked(learner.graphdef, stack_states(learner.state, K), 0, jax.random.key(1), K)
        src = RecordingBatches({k: np.stack([v] * K) for k, v in batch.items()}, log)
    assert driver.train(src, 2) == 2 and driver.train_steps == 2
    assert driver.train(src, 2) == 0  # nothing owed
    kinds = [e[0] for e in log]
    if kind == "data_parallel":
        assert kinds == ["sample", "sample"]  # still queued: nothing was drawn since
        assert driver.train(src, 3) == 1
        kinds = [e[0] for e in log]
        assert kinds == ["sample", "sample", "write", "write", "sample"]  # written before the next batch
    else:
        assert kinds == ["sample", "write", "sample", "write"]
        assert log[1][2][0] == 2  # [K, B, T, D]: one row of posteriors per task
    metrics = driver.metrics.read()
    assert metrics and all(np.isfinite(v) for v in metrics.values())


def test_a_mark_splits_the_callbacks_for_a_lockstep_runner_and_run_ignores_it():
    seen = []
    loops = []
    for name in ("x", "y"):
        loop = RunLoop(ScriptedCollector(num_envs=1, length=5), lambda step: ("w", "dreamer"), 0, 1)
        loop.on_step(lambda tick, name=name: seen.append((name, "before", tick.env_step)))
        loop.mark("trained")
        loop.on_step(lambda tick, name=name: seen.append((name, "after", tick.env_step)),
                     clock=lambda tick: tick.env_step % 2 == 0)
        loops.append(loop)
    ticks = [loop.collect() for loop in loops]
    for loop, tick in zip(loops, ticks, strict=True):
        loop.dispatch(tick, until="trained")
    seen.append(("shared",))
    for loop, tick in zip(loops, ticks, strict=True):
        loop.dispatch(tick, after="trained")
    assert seen == [("x", "before", 1), ("y", "before", 1), ("shared",)]  # the clock after the mark did not fire
    seen.clear()
    assert loops[0].run(done=lambda step: step >= 2) and not loops[0].stopped
    assert seen == [("x", "before", 2), ("x", "after", 2)]
