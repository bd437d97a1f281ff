"""Multi-task pre-training (MUSE §3.2.1): collect -> replay -> jitted train step -> log/checkpoint.

The world model, competence head and actor-critic all learn from the same replay. Acting uses the
actor ("dreamer" mode) after a random-policy prefill; self-regulation is a deployment-time mechanism
and is not used while pre-training. Gradient steps follow the train ratio:
grad steps = env_steps * train_ratio / (B * T), counted from the start of the run.

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
A NaN/inf loss stops the run with the loss name and step; no checkpoint is written after it, so the
last good one stays.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from muse_jax import parallel
from muse_jax.config import Config, ConfigError, resume_conflicts
from muse_jax.envs.metaworld import ACT_DIM, PROPRIO_DIM, make_vector_env
from muse_jax.logging import RunLogger, drop_metrics_after, to_float_dict
from muse_jax.loops.collect import Collector, Episode, make_policy
from muse_jax.replay import Replay, episode_labels, step_bytes


class NonFiniteLossError(FloatingPointError):
    """A loss became NaN/inf; the message names it and the train step."""


def obs_spec(cfg: Config) -> Any:
    from muse_jax.agent import ObsSpec

    return ObsSpec.from_config(cfg, proprio_dim=PROPRIO_DIM, act_dim=ACT_DIM)


def replay_megabytes(cfg: Config) -> float:
    """Memory the full replay will take, from the config alone."""
    e = cfg.env
    image = (e.image_size, e.image_size, 3) if e.image else None
    latents = (cfg.model.deter, cfg.model.stoch) if cfg.replay.context else (0, 0)
    return cfg.replay.capacity * step_bytes(image, PROPRIO_DIM if e.proprio else None, ACT_DIM, *latents) / 2**20


def train_steps_due(env_steps: int, train_ratio: float, batch_size: int, seq_len: int) -> int:
    """Gradient steps owed after `env_steps` environment steps at the given train ratio."""
    return int(env_steps * train_ratio / (batch_size * seq_len))


def check_finite(metrics: Mapping[str, float], step: int) -> None:
    """Raise NonFiniteLossError naming the first non-finite loss (then any other metric)."""
    keys = sorted(metrics, key=lambda k: (not k.startswith("loss/"), k))
    for k in keys:
        if not math.isfinite(metrics[k]):
            raise NonFiniteLossError(
                f"{k} is {metrics[k]} at train step {step}; stopped without saving, the last good checkpoint is "
                "kept. Lower optim.lr or check the inputs, then resume.")


_JITTED: dict[Any, Callable] = {}


def memo_jit(kind: str, graphdef: Any, extra: Any, build: Callable[[], Callable]) -> Callable:
    """One compiled function per (kind, graph, extra) per process: adapting task after task (or
    resuming in-process) reuses the compiled train and policy steps instead of recompiling."""
    key = (kind, graphdef, extra)
    try:
        hash(key)
    except TypeError:
        return build()
    if key not in _JITTED:
        _JITTED[key] = build()
    return _JITTED[key]


class Trainer:
    """Owns the learner state and does the owed gradient steps on replay batches."""

    def __init__(self, cfg: Config, graphdef: Any, state: Any, train_steps: int, seed: int) -> None:
        from muse_jax import agent as A

        self.cfg, self.train_steps = cfg, int(train_steps)
        self.mesh = parallel.make_mesh()
        parallel.check_batch_size(cfg.replay.batch_size, self.mesh)
        # several hosts: this host's copy becomes the global replicated state (one host: jit places it)
        multi = parallel.is_multi_process()
        self.state = parallel.shard_state(state, self.mesh, cfg.parallel.param_sharding) if multi else state
        self.rows = parallel.local_batch_size(cfg.replay.batch_size, self.mesh)  # this process's rows of the batch
        self._shard = lambda b: parallel.shard_batch(b, self.mesh)
        self._fn = memo_jit("train", graphdef, self.mesh, lambda: A.make_train_step(cfg, graphdef, self.mesh, state))
        self._key = jax.random.key(seed + 1)
        self._compiled = False
        self.last: dict[str, float] = {}

    def train(self, replay: Replay, due: int) -> int:
        """Gradient steps until `due` is reached; returns how many ran."""
        n = 0
        sums: dict[str, float] = defaultdict(float)
        while self.train_steps < due and replay.can_sample():
            batch = self._shard(replay.sample(self.rows))
            key = jax.random.fold_in(self._key, self.train_steps)
            if not self._compiled:  # several hosts: all start the first step together (parallel.meet)
                self._fn, self._compiled = parallel.compile_then_meet(self._fn, self.state, batch, key), True
            self.state, metrics = self._fn(self.state, batch, key)
            m = to_float_dict(parallel.host_local(metrics))
            check_finite(m, self.train_steps)
            self.train_steps += 1
            n += 1
            for k, v in m.items():
                sums[k] += v
        if n:
            self.last = {k: v / n for k, v in sums.items()}
        return n


def partial_state(episodes: list[Episode]) -> dict[str, np.ndarray] | None:
    """Unfinished episodes as flat arrays (Replay.state_dict's layout: `episode_lengths` + each key
    concatenated, with time-to-success labels), for the checkpoint; None when there are none."""
    eps = [dict(e.data, time_to_success=episode_labels(e.success_T)) for e in episodes if e is not None and e.length]
    if not eps:
        return None
    out = {"episode_lengths": np.array([len(ep["time_to_success"]) for ep in eps], np.int64)}
    out.update({k: np.concatenate([np.asarray(ep[k]) for ep in eps]) for k in eps[0]})
    return out


def split_episodes(state: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Inverse of `partial_state`: one dict of [T, ...] arrays per episode."""
    lengths = np.asarray(state["episode_lengths"], np.int64)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    keys = [k for k in state if k not in ("episode_lengths", "meta")]
    return [{k: np.asarray(state[k])[a:b] for k in keys} for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def rewind_to(logdir: Path, step: int, echo: Callable[[str], None]) -> None:
    """Make `step` the newest checkpoint: it must exist and be intact; later steps move to
    `logdir/checkpoints_set_aside/` (kept for the user to inspect or delete)."""
    from muse_jax.checkpoint import CheckpointNotFoundError, verify_integrity

    ckdir = logdir / "checkpoints"
    steps = sorted(int(p.name) for p in ckdir.iterdir() if p.name.isdigit()) if ckdir.is_dir() else []
    if step not in steps:
        raise CheckpointNotFoundError(f"--from-step {step}: {ckdir} has no checkpoint step {step}; "
                                      f"available: {steps or 'none'}.")
    verify_integrity(ckdir / str(step))
    later = [s for s in steps if s > step]
    if later:
        aside = logdir / "checkpoints_set_aside"
        aside.mkdir(exist_ok=True)
        for s in later:
            dst = aside / str(s)
            n = 1
            while dst.exists():
                dst, n = aside / f"{s}.{n}", n + 1
            (ckdir / str(s)).rename(dst)
        echo(f"--from-step {step}: moved later checkpoint(s) {later} to {aside}")


def recent_stats(episodes: list[Episode], tasks: list[str]) -> dict[str, float]:
    """Success rate per task and overall, mean score and time to success, over finished episodes."""
    if not episodes:
        return {}
    out: dict[str, float] = {
        "success_rate": float(np.mean([e.success for e in episodes])),
        "episode_score": float(np.mean([e.score for e in episodes])),
        "episodes_finished": float(len(episodes)),
    }
    tts = [e.time_to_success for e in episodes if e.success]
    out["time_to_success"] = float(np.mean(tts)) if tts else float("nan")
    for t in tasks:
        mine = [e.success for e in episodes if e.task == t]
        if mine:
            out[f"success/{t}"] = float(np.mean(mine))
    return out


def pretrain(cfg: Config, logdir: str | Path, *, stop_at: int | None = None, from_step: int | None = None,
             echo: Callable[[str], None] = print, act_mode: str = "dreamer") -> dict[str, Any]:
    """Run (or resume) pre-training into `logdir`; returns the final counters and last metrics.

    `stop_at` ends the run early after that many env steps (with a checkpoint), as a kill would.
    `from_step` resumes from that checkpoint step instead of the newest (see `rewind_to`).
    `act_mode` is the policy mode after the prefill: "dreamer" (the actor, MUSE §3.2.1 pre-training)
    or "muse" (self-regulated acting, for learning curves of the regulated agent).
    """
    from muse_jax import agent as A
    from muse_jax.checkpoint import Checkpointer, spec_meta

    logdir = Path(logdir)
    spec = obs_spec(cfg)
    seed = cfg.train.seed
    if from_step is not None:
        rewind_to(logdir, from_step, echo)
    ckpt = Checkpointer(logdir / "checkpoints", cfg.train.keep_checkpoints)
    resuming = ckpt.latest_step() is not None
    if resuming:  # checked before building anything, so a wrong --logdir fails in a second
        meta = ckpt.read_meta()
        diff = resume_conflicts(meta.get("config", {}), cfg)
        if diff:
            ckpt.close()
            raise ConfigError(f"{logdir} holds a run with another config (differs in {diff[:5]}); "
                              "use a new --logdir or the same config to resume.")
    echo(f"replay needs {replay_megabytes(cfg):.1f} MB for {cfg.replay.capacity} steps")
    learner = A.create_learner(cfg, spec, seed)
    graphdef, state = learner.graphdef, learner.state
    replay = Replay(cfg.replay.capacity, cfg.replay.seq_len, parallel.process_seed(seed), context=cfg.replay.context)
    counters = {"env_steps": 0, "train_steps": 0, "episodes": 0}
    if resuming:
        state, replay_state, meta = ckpt.restore(state_template=state)
        if replay_state is not None:
            replay.load_state_dict(replay_state)
        counters.update(meta["counters"])
        partial = ckpt.restore_partial()
        cut = split_episodes(partial) if partial is not None else []
        for ep in cut:  # the envs' unfinished episodes at the checkpoint, cut there (see module doc)
            replay.add_episode(ep)
        counters["episodes_cut"] = counters.get("episodes_cut", 0) + len(cut)
        echo(f"resuming {logdir} at env step {counters['env_steps']} (train step {counters['train_steps']}, "
             f"{len(replay)} replay steps, {sum(len(ep['reward']) for ep in cut)} of them from {len(cut)} "
             "unfinished episode(s) cut at the checkpoint)")

    task_ids = list(range(1, len(cfg.env.tasks) + 1))
    make_venv = lambda s: make_vector_env(cfg.env.tasks, task_ids, cfg.env, s, round_robin=True)
    policy = memo_jit("policy", graphdef, None, lambda: make_policy(A.policy_step, graphdef))
    carry = A.initial_carry(graphdef, state, cfg.env.num_envs)
    env_seed = parallel.process_seed(seed + counters["env_steps"])
    collector = Collector(make_venv, policy, carry, list(cfg.env.tasks), env_seed,
                          task_names=dict(zip(task_ids, cfg.env.tasks, strict=True)))
    trainer = Trainer(cfg, graphdef, state, counters["train_steps"], seed)
    drop_metrics_after(Path(logdir) / "metrics.jsonl", counters["env_steps"])  # rows logged after the checkpoint
    logger = RunLogger(logdir, total=cfg.train.env_steps, initial=counters["env_steps"], desc="pretrain")
    total = cfg.train.env_steps if stop_at is None else min(cfg.train.env_steps, stop_at)
    window: list[Episode] = []
    env_steps = counters["env_steps"]
    last_log, last_save = env_steps, env_steps
    t_log, steps_log, train_log = time.time(), env_steps, trainer.train_steps
    r = cfg.replay

    def save() -> None:
        counters.update(env_steps=env_steps, train_steps=trainer.train_steps)
        # orbax cannot store zero-size arrays: before the first finished episode there is no replay to save
        ckpt.save(env_steps, trainer.state, replay=replay.state_dict() if replay.num_episodes else None,
                  meta={"config": cfg.to_dict(), "spec": spec_meta(spec), "seed": seed, "counters": dict(counters),
                        "agent": cfg.agent},
                  partial=partial_state(collector.partial_episodes()))

    try:
        while env_steps < total:
            mode = "random" if env_steps < cfg.train.prefill else act_mode
            for ep in collector.step(parallel.host_local(trainer.state), mode):
                replay.add_episode(ep.data, ep.success_T)
                window.append(ep)
                counters["episodes"] += 1
            env_steps += collector.num_envs
            if env_steps >= cfg.train.prefill:
                trainer.train(replay, train_steps_due(env_steps, cfg.train.train_ratio, r.batch_size, r.seq_len))
            logger.advance(collector.num_envs, train=trainer.train_steps)
            if env_steps - last_log >= cfg.train.log_every or env_steps >= total:
                dt = max(time.time() - t_log, 1e-9)
                record = {"step": env_steps, "env_steps": env_steps, "train_steps": trainer.train_steps,
                          "episodes": counters["episodes"],
                          "replay_steps": len(replay), "env_restarts": len(collector.faults),
                          **trainer.last, **recent_stats(window, list(cfg.env.tasks)),
                          "env_steps_per_s": (env_steps - steps_log) / dt,
                          "train_steps_per_s": (trainer.train_steps - train_log) / dt}
                logger.write(record)
                window, last_log = [], env_steps
                t_log, steps_log, train_log = time.time(), env_steps, trainer.train_steps
            if env_steps - last_save >= cfg.train.save_every:
                save()
                last_save = env_steps
        if last_save != env_steps or ckpt.latest_step() is None:
            save()
    finally:
        logger.close()
        collector.close()
        ckpt.close()
    counters.update(env_steps=env_steps, train_steps=trainer.train_steps)
    return {"counters": counters, "metrics": trainer.last}
