"""Multi-task pre-training (MUSE §3.2.1): collect -> replay -> jitted train step -> log/checkpoint, as
callbacks on the loop adaptation shares (`run_loop.RunLoop`; clocks: `TrainRatio`, `Every` log/save).

The world model, competence head and actor-critic all learn from the same replay. Acting uses the
actor ("dreamer" mode) after a random-policy prefill; self-regulation is a deployment-time mechanism
and is not used while pre-training. Gradient steps follow DreamerV3's ratio rule
(`train_driver.TrainRatio`): training starts once replay holds one batch (B * T env steps collected,
and one finished episode long enough to sample; the prefill only decides that the acting is random
until `train.prefill` env steps) and
then runs train_ratio / (B * T) gradient steps per env step from there, never a burst of the steps
"owed" for the env steps before it (counting from step 0 paid ~4000 steps at once on the first 16
episodes in the paper setting).

Resuming: when `logdir/checkpoints` holds a checkpoint, the learner state (parameters, optimiser
and normaliser state), the replay and the counters are restored and the run continues from there.
A kill loses at most the env steps taken since the last checkpoint: each checkpoint also stores every
env's unfinished episode (generically, whatever keys its steps have), and a resume adds those to the
replay as episodes cut at the checkpoint, like a time-limit truncation (not terminal). Their
time-to-success labels come from the steps they have, so a cut episode that had not succeeded yet is
labelled as a failure; at most `env.num_envs` episodes per resume are affected. The simulator state
itself is not saved, so the envs start fresh episodes after a resume.
`metrics.jsonl`'s `step` is the env step (DreamerV3's x-axis; `train_steps` has its own column), and
rows logged after the checkpoint a run resumes from are dropped, so `step` strictly increases across
any number of kills. `from_step` resumes from an earlier intact checkpoint (after a damaged newest
one); the later steps are moved aside to `logdir/checkpoints_set_aside/`, not deleted.
Train metrics stay on the device between log points (`train_driver.DeviceMetrics`): no per-step
host sync. A NaN/inf loss stops the run at the next log point or checkpoint, naming the loss and the
train step it first appeared at; no checkpoint is written after it, so the last good one stays.
With `train.overlap_collect` the next env step's policy is dispatched before each tick's train steps
(`RunLoop` overlap), so the envs step while training runs and the policy acts with the learner state
one train call staler (the setting's docstring states exactly which).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from muse_jax import agent as A
from muse_jax import evaluate, parallel
from muse_jax.checkpoint import Checkpointer, verify_integrity
from muse_jax.competence import agent_steps_per_episode
from muse_jax.config import Config, ConfigError, explain_conflicts, resume_conflicts
from muse_jax.envs.suite import SUITES_WITH_SUCCESS, check_tasks, make_vector_env
from muse_jax.errors import CheckpointNotFoundError
from muse_jax.loops.collect import Collector, Episode, episode_record
from muse_jax.loops.jit_cache import memo_jit
from muse_jax.loops.restore import obs_spec, spec_to_meta
from muse_jax.loops.run_loop import Every, RunLoop, Tick
from muse_jax.loops.train_driver import NonFiniteLossError, TrainDriver, TrainRatio
from muse_jax.replay import Replay, pack_episodes, step_bytes, unpack_episodes
from muse_jax.run_log import RunLogger, drop_metrics_after

__all__ = ["NonFiniteLossError", "partial_state", "pretrain", "recent_stats", "replay_megabytes", "rewind_to",
           "set_aside"]


def replay_megabytes(cfg: Config) -> float:
    """Memory the full replay will take, from the config alone."""
    spec = obs_spec(cfg)
    latents = (cfg.model.deter, cfg.model.stoch) if cfg.replay.context else (0, 0)
    return cfg.replay.capacity * step_bytes(spec.image_shape, spec.proprio_dim, spec.act_dim, *latents) / 2**20


def partial_state(episodes: list[Episode | None], reading: str = "steps_left") -> dict[str, np.ndarray] | None:
    """Unfinished episodes in the replay's flat layout (`pack_episodes`), with their labels so far (under
    `reading`, `model.competence_reading`), for the checkpoint; None when there are none."""
    eps = [ep.replay_data(reading) for ep in episodes if ep is not None and ep.length]
    return pack_episodes(eps) if eps else None


def rewind_to(logdir: Path, step: int, echo: Callable[[str], None]) -> None:
    """Make `step` the newest checkpoint: it must exist and be intact; later steps move to
    `logdir/checkpoints_set_aside/` (kept for the user to inspect or delete)."""
    ckdir = logdir / "checkpoints"
    steps = sorted(int(p.name) for p in ckdir.iterdir() if p.name.isdigit()) if ckdir.is_dir() else []
    if step not in steps:
        raise CheckpointNotFoundError(f"--from-step {step}: {ckdir} has no checkpoint step {step}; "
                                      f"available: {steps or 'none'}.")
    verify_integrity(ckdir / str(step))
    set_aside(logdir, [s for s in steps if s > step], echo, f"--from-step {step}")


def set_aside(logdir: Path, steps: list[int], echo: Callable[[str], None], why: str) -> None:
    """Move these checkpoint steps of `logdir` to `logdir/checkpoints_set_aside/` (never deleted; a name
    already there gets a `.1`, `.2`... suffix), saying so in one line that starts with `why`."""
    if not steps:
        return
    ckdir, aside = logdir / "checkpoints", logdir / "checkpoints_set_aside"
    aside.mkdir(exist_ok=True)
    for s in steps:
        dst = aside / str(s)
        n = 1
        while dst.exists():
            dst, n = aside / f"{s}.{n}", n + 1
        (ckdir / str(s)).rename(dst)
    echo(f"{why}: moved later checkpoint(s) {steps} to {aside}")


def recent_stats(episodes: list[Episode], tasks: list[str], has_success: bool = True) -> dict[str, float]:
    """Success rate per task and overall, mean score and mean steps to the first success of the solved
    episodes (logged as `time_to_success`), over finished episodes. A suite without success
    (`has_success` False: DMC, gym) logs score, length and count only: no success rate of 0 is made up."""
    if not episodes:
        return {}
    out: dict[str, float] = {
        "episode_score": float(np.mean([e.score for e in episodes])),
        "episode_length": float(np.mean([e.length for e in episodes])),
        "episodes_finished": float(len(episodes)),
    }
    if not has_success:
        return out
    out["success_rate"] = float(np.mean([e.success for e in episodes]))
    first_success = [e.first_success_step for e in episodes if e.success]
    out["time_to_success"] = float(np.mean(first_success)) if first_success else float("nan")
    for t in tasks:
        mine = [e.success for e in episodes if e.task == t]
        if mine:
            out[f"success/{t}"] = float(np.mean(mine))
    return out


def pretrain(cfg: Config, logdir: str | Path, *, from_step: int | None = None,
             echo: Callable[[str], None] = print, act_mode: str = "dreamer") -> dict[str, Any]:
    """Run (or resume) pre-training into `logdir`; returns the final counters and last metrics (see `_pretrain`)."""
    return _pretrain(cfg, logdir, from_step=from_step, echo=echo, act_mode=act_mode)


def _pretrain(cfg: Config, logdir: str | Path, *, stop_at: int | None = None, from_step: int | None = None,
              echo: Callable[[str], None] = print, act_mode: str = "dreamer") -> dict[str, Any]:
    """`pretrain`, with the fault tests' hook: `stop_at` ends the run early after that many env steps (with a
    checkpoint), as a kill would.
    `from_step` resumes from that checkpoint step instead of the newest (see `rewind_to`).
    `act_mode` is the policy mode after the prefill: "dreamer" (the actor, MUSE §3.2.1 pre-training)
    or "muse" (self-regulated acting, for learning curves of the regulated agent).
    """
    logdir = Path(logdir)
    check_tasks(cfg.env.suite, cfg.env.tasks)  # a misspelt task fails here, before any work
    if from_step is not None:
        rewind_to(logdir, from_step, echo)
    ckpt = open_checkpoints(cfg, logdir)
    echo(f"replay needs {replay_megabytes(cfg):.1f} MB for {cfg.replay.capacity} steps")
    total = cfg.train.env_steps if stop_at is None else min(cfg.train.env_steps, stop_at)
    run = PretrainingRun(cfg, logdir, ckpt, total, echo)
    try:
        loop = run.loop(act_mode)
        loop.run(done=lambda env_step: env_step >= total)
        if run.should_save.last != loop.env_step or ckpt.latest_step() is None:
            run.save(loop.env_step)
    finally:
        run.logger.close()
        run.collector.close()
        ckpt.close()
    return run.result(loop.env_step)


def open_checkpoints(cfg: Config, logdir: Path) -> Checkpointer:
    """The run's checkpoints; a resume's config is checked before anything is built, so a wrong --logdir
    fails in a second."""
    ckpt = Checkpointer(logdir / "checkpoints", cfg.train.keep_checkpoints)
    if ckpt.latest_step() is not None:
        saved = ckpt.read_meta().get("config", {})
        diff = resume_conflicts(saved, cfg)
        if diff:
            ckpt.close()
            what, sets = explain_conflicts(saved, cfg, diff)
            raise ConfigError(f"{logdir} holds a run with another config ({what}); to resume it, give the run's "
                              f"values ({sets}); to start afresh, use a new --logdir.")
    return ckpt


class PretrainingRun:
    """One pre-training run's parts (learner, replay, envs, train driver, clocks) and the callbacks the
    shared `RunLoop` calls after each env step (see the module docstring)."""

    def __init__(self, cfg: Config, logdir: Path, ckpt: Checkpointer, total: int, echo: Callable[[str], None],
                 make_driver: Callable[[Any, Any, int], Any] | None = None, desc: str = "pretrain",
                 position: int | None = None) -> None:
        """`make_driver(graphdef, state, train_steps)` builds the train driver (default: this run's own
        `TrainDriver.data_parallel`; loops/seeds.py passes one seed's view of a driver shared by several
        runs); `desc` and `position` are the progress bar's label and line."""
        self.cfg, self.logdir, self.ckpt = cfg, logdir, ckpt
        self.spec, self.seed = obs_spec(cfg), cfg.train.seed
        learner = A.create_learner(cfg, self.spec, self.seed)
        self.replay = Replay(cfg.replay.capacity, cfg.replay.seq_len, parallel.process_seed(self.seed),
                             context=cfg.replay.context, online=cfg.replay.online)
        self.counters: dict[str, Any] = {"env_steps": 0, "train_steps": 0, "episodes": 0}
        self._unfinished_at: int | None = None  # the env step whose unfinished episodes replay holds
        state = self._restore(learner.state, echo) if ckpt.latest_step() is not None else learner.state
        self.collector = self._collector(learner.graphdef, state)
        if make_driver is None:
            make_driver = lambda g, st, n: TrainDriver.data_parallel(cfg, g, st, n, self.seed)
        self.driver = make_driver(learner.graphdef, state, self.counters["train_steps"])
        env_steps = self.counters["env_steps"]
        drop_metrics_after(logdir / "metrics.jsonl", env_steps)  # rows logged after the checkpoint
        self.logger = RunLogger(logdir, total=cfg.train.env_steps, initial=env_steps, desc=desc, position=position)
        r = cfg.replay
        # checkpoints from before the rule have no clock: it restarts at the resume step
        self.should_train = TrainRatio(cfg.train.train_ratio, r.batch_size, r.seq_len,
                                       self.counters.get("train_ratio_prev"))
        self.should_log = Every(cfg.train.log_every, env_steps, until=total)
        self.should_save = Every(cfg.train.save_every, env_steps)
        self.window: list[Episode] = []  # episodes finished since the last log line
        self.recent: deque[dict[str, Any]] = deque(maxlen=cfg.train.sa_window)  # their records, for sa/*
        self.last_metrics: dict[str, float] = {}  # mean train metrics of the latest log window
        self._rate_from = (time.time(), env_steps, self.driver.train_steps)

    def _restore(self, state: Any, echo: Callable[[str], None]) -> Any:
        """Learner state, replay and counters from the newest checkpoint, plus the envs' unfinished
        episodes there, added cut (see the module docstring)."""
        state, replay_state, meta = self.ckpt.restore(state_template=state)
        if replay_state is not None:
            self.replay.load_state_dict(replay_state)
        self.counters.update(meta["counters"])
        partial = self.ckpt.restore_partial()
        cut = unpack_episodes(partial) if partial is not None else []
        for ep in cut:
            self.replay.add_episode(ep)
        self.counters["episodes_cut"] = self.counters.get("episodes_cut", 0) + len(cut)
        echo(f"resuming {self.logdir} at env step {self.counters['env_steps']} (train step "
             f"{self.counters['train_steps']}, {len(self.replay)} replay steps, "
             f"{sum(len(ep['reward']) for ep in cut)} of them from {len(cut)} unfinished episode(s) cut at the "
             "checkpoint)")
        return state

    def _collector(self, graphdef: Any, state: Any) -> Collector:
        cfg = self.cfg
        task_ids = list(range(1, len(cfg.env.tasks) + 1))
        make_venv = lambda s: make_vector_env(cfg.env.tasks, task_ids, cfg.env, s, round_robin=True)
        policy = memo_jit("policy", graphdef, None, lambda: A.make_policy_step(graphdef))
        carry = A.initial_carry(graphdef, state, cfg.env.num_envs)
        env_seed = parallel.process_seed(self.seed + self.counters["env_steps"])
        return Collector(make_venv, policy, carry, list(cfg.env.tasks), env_seed,
                         task_names=dict(zip(task_ids, cfg.env.tasks, strict=True)))

    def loop(self, act_mode: str) -> RunLoop:
        """The shared loop with pre-training's callbacks: store episodes, train by the ratio, log, save."""
        cfg, driver = self.cfg, self.driver
        act = lambda env_step: (parallel.host_local(driver.state),
                                "random" if env_step < cfg.train.prefill else act_mode)
        loop = RunLoop(self.collector, act, self.counters["env_steps"], self.collector.num_envs,
                       overlap=cfg.train.overlap_collect)
        loop.on_step(self.store_episodes)
        loop.on_step(self.train, clock=self.ready_to_train)
        loop.mark("trained")  # several seeds in lockstep (loops/seeds.py) train together here
        loop.on_step(lambda tick: self.logger.advance(self.collector.num_envs, train=driver.train_steps))
        loop.on_step(self.log, clock=self.should_log)
        loop.on_step(lambda tick: self.save(tick.env_step), clock=self.should_save)
        return loop

    def store_episodes(self, tick: Tick) -> None:
        for ep in tick.episodes:
            self.replay.add_episode(ep.data, ep.success_T, reading=self.cfg.model.competence_reading)
            self.window.append(ep)
            if self.cfg.env.suite in SUITES_WITH_SUCCESS:
                self.recent.append(episode_record(self.cfg.agent, ep.task, self.counters["episodes"], ep))
            self.counters["episodes"] += 1
        if tick.faults:  # an env crash may be NaN actions from a NaN loss: name the loss
            self.driver.metrics.check()

    def ready_to_train(self, tick: Tick) -> bool:
        """dreamerv3 starts once replay holds B * T items (chunk starts); its replay counts every step as it
        arrives. With `replay.unfinished` so does this one: B * T chunk starts, unfinished episodes included.
        Otherwise it stores finished episodes only, so: B * T env steps collected and one chunk to sample
        (the same step whether or not the run was killed and resumed in between)."""
        r = self.cfg.replay
        if self.should_train.started:
            return True
        if r.unfinished:
            self._share_unfinished(tick.env_step)
            return self.replay.num_starts() >= r.batch_size * r.seq_len
        return tick.env_step >= r.batch_size * r.seq_len and self.replay.can_sample()

    def train(self, tick: Tick) -> None:
        owed = self.should_train(tick.env_step)
        if owed and self.cfg.replay.unfinished:
            self._share_unfinished(tick.env_step)
        self.driver.train(self.replay, self.driver.train_steps + owed)

    def _share_unfinished(self, env_step: int) -> None:
        """Hand the envs' episodes so far to replay (`replay.unfinished`; copies, rebuilt once per tick: the
        start check and the first training call share the tick's copy)."""
        if self._unfinished_at == env_step:
            return
        self._unfinished_at = env_step
        self.replay.set_unfinished([ep.data for ep in self.collector.partial_episodes() if ep is not None])

    def log(self, tick: Tick) -> None:
        """One metrics.jsonl line: counters, the window's mean train metrics and episode stats, throughput."""
        driver, env_steps = self.driver, tick.env_step
        t0, steps0, train0 = self._rate_from
        dt = max(time.time() - t0, 1e-9)
        self.last_metrics = driver.metrics.read() or self.last_metrics  # the one device read per log point
        has_success = self.cfg.env.suite in SUITES_WITH_SUCCESS
        record = {"step": env_steps, "env_steps": env_steps, "train_steps": driver.train_steps,
                  "episodes": self.counters["episodes"],
                  "replay_steps": len(self.replay), "env_restarts": len(self.collector.faults),
                  **self.last_metrics, **recent_stats(self.window, list(self.cfg.env.tasks), has_success),
                  **self.self_awareness(),
                  "env_steps_per_s": (env_steps - steps0) / dt,
                  "train_steps_per_s": (driver.train_steps - train0) / dt}
        self.logger.write(record)
        self.window = []
        self._rate_from = (time.time(), env_steps, driver.train_steps)

    def self_awareness(self) -> dict[str, float | None]:
        """`sa/*`: how well the agent's own signal (MUSE competence, Dreamer value) predicted the outcome of
        its `train.sa_window` most recent finished episodes (`evaluate.self_awareness`; the window survives
        no resume, it refills from the next episodes)."""
        cfg = self.cfg
        return evaluate.self_awareness(cfg.agent, list(self.recent), cfg.model.competence_quantiles,
                                       agent_steps_per_episode(cfg.env), reading=cfg.model.competence_reading)

    def save(self, env_steps: int) -> None:
        driver = self.driver
        driver.metrics.check()  # a NaN/inf since the last read stops the run here: never saved
        driver.flush_context()  # the saved replay holds the latest training posteriors
        self.counters.update(env_steps=env_steps, train_steps=driver.train_steps,
                             train_ratio_prev=self.should_train.prev)
        cfg, replay = self.cfg, self.replay
        # orbax cannot store zero-size arrays: before the first finished episode there is no replay to save
        self.ckpt.save(env_steps, driver.state, replay=replay.state_dict() if replay.num_episodes else None,
                       meta={"config": cfg.to_dict(), "spec": spec_to_meta(self.spec), "seed": self.seed,
                             "counters": dict(self.counters), "agent": cfg.agent},
                       partial=partial_state(self.collector.partial_episodes(),
                                             self.cfg.model.competence_reading))

    def result(self, env_steps: int) -> dict[str, Any]:
        """The final counters and the last train metrics (`pretrain`'s return value)."""
        self.last_metrics = self.driver.metrics.read() or self.last_metrics
        self.counters.update(env_steps=env_steps, train_steps=self.driver.train_steps,
                             train_ratio_prev=self.should_train.prev)
        return {"counters": self.counters, "metrics": self.last_metrics}
