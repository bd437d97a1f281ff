"""Several seeds of one config in one process, all trained by one vmapped train step (`muse-wm pretrain
--seeds 0 1 2`).

Why: papers report 3-10 seeds per task, and a small model's train step is latency-bound on a GPU (a few
percent of its peak): N seeds' steps stacked on a leading axis cost about one step's latency, where N
processes would queue N steps on the device.

Per seed, exactly as a 1-seed run of that seed (`pretrain.pretrain` with `train.seed` = the seed) has
them: its run folder (a complete one: `muse-wm adapt --checkpoint DIR/seed<K>` and a resume read it as
any run folder), the learner's initialisation (`create_learner(seed)`), its envs and their seeds, its
replay and the replay's sampling RNG, its train-step keys (`fold_in(key(seed + 1), train_step)`, as
`TrainDriver.data_parallel`), clocks, counters, metrics, checkpoints, progress bar. Shared: the learner
states stacked on a seed axis [N, ...] (`SeedStack`) and one `jit(vmap(agent.train_step))` call per
gradient step, the same step adaptation vmaps over tasks (`train_driver.make_task_train_step`). A seed
that owes no step when another does (its replay cannot sample yet: only with episodes of varying
length) rides along masked: its state stays as it was and its metrics are not counted.

Lockstep: every seed takes the same env steps per tick (one config), so the seeds' `RunLoop`s are stepped
together: each collects one env step, then runs its callbacks up to the loop's mark "trained" (store
episodes, say how many steps it owes), then the shared training runs, then each seed's callbacks after
the mark (progress, log, save): a 1-seed run's order, seed by seed. Acting stays per seed (each seed's
own jitted policy call on its slice of the stack).

Equivalence with 1-seed runs is to float tolerance, not bitwise: XLA compiles the vmapped step's
contractions as batched ones, which sum float32 products in another order, so one step's losses and
parameters differ from the 1-seed step's in the last bits (~1e-7 relative), and those bits then grow
as training and acting feed them back (LaProp divides by a running RMS, so near-zero gradients carry
them into the optimiser state). `tests/muse_jax/test_seeds.py` bounds the difference.

Resume: each seed folder resumes from its checkpoint as a 1-seed run does. The seeds save at the same env
steps, but a kill during a save can leave the folders one checkpoint apart; they are then brought level at
the newest step all of them hold (the newer checkpoints moved to `checkpoints_set_aside/`, as `--from-step`
does). Folders further apart than one save (say, a new seed added to finished runs) are refused in one
line: run that seed on its own, or give the seeds a new --logdir.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from muse_jax import agent as A
from muse_jax.checkpoint import verify_integrity
from muse_jax.config import Config
from muse_jax.envs.suite import check_tasks
from muse_jax.errors import CheckpointError, NonFiniteLossError
from muse_jax.loops.jit_cache import memo_jit
from muse_jax.loops.pretrain import PretrainingRun, open_checkpoints, replay_megabytes, rewind_to, set_aside
from muse_jax.loops.run_loop import RunLoop
from muse_jax.loops.train_driver import DeviceMetrics, ReplayBatches, _non_finite_value, make_task_train_step
from muse_jax.replay import Replay

__all__ = ["SeedDriver", "SeedMetrics", "SeedStack", "level_checkpoints", "make_masked_seed_step",
           "pretrain_seeds", "seed_logdirs"]

TRAINED = "trained"
"""The `RunLoop` mark after each seed's train callback (pretrain `PretrainingRun.loop`)."""


def seed_logdirs(logdir: str | Path, seeds: Sequence[int]) -> list[Path]:
    """The run folder of each seed of `muse-wm pretrain --seeds ... --logdir DIR`: DIR/seed<K>."""
    return [Path(logdir) / f"seed{s}" for s in seeds]


def make_masked_seed_step(graphdef: Any) -> Callable:
    """jit(vmap(train_step)) over the seed axis, state donated, for steps some seeds sit out:
    (state [N..], batch [N,B,T..], keys [N], active [N] bool) -> the stepped state where active, the old
    state elsewhere (an exact select), and the metrics of every lane."""
    step = jax.vmap(lambda st, batch, key: A.train_step(graphdef, st, batch, key))

    def fn(state: Any, batch: Any, keys: jax.Array, active: jax.Array) -> tuple[Any, Any]:
        new, metrics = step(state, batch, keys)
        keep = lambda n, o: jnp.where(active.reshape(active.shape + (1,) * (n.ndim - 1)), n, o)
        return jax.tree.map(keep, new, state), metrics

    return jax.jit(fn, donate_argnums=0)


@functools.partial(jax.jit, static_argnums=1)
def _unstack(state: Any, n: int) -> tuple[Any, ...]:
    return tuple(jax.tree.map(lambda x, k=k: x[k], state) for k in range(n))


_fold_keys = jax.jit(jax.vmap(jax.random.fold_in))


@jax.jit
def _accumulate(acc: dict[str, Any], metrics: dict[str, jax.Array], steps: jax.Array, active: jax.Array
                ) -> dict[str, Any]:
    """`train_driver._accumulate` per seed lane, for the active lanes only."""
    out = {"count": acc["count"] + active.astype(jnp.int32), "sum": {}, "bad_step": {}, "bad_value": {}}
    for k, v in metrics.items():
        lane = jnp.asarray(v, jnp.float32).reshape(active.shape[0], -1)
        newly_bad = (acc["bad_step"][k] < 0) & ~jnp.isfinite(lane).all(1) & active
        out["sum"][k] = jnp.where(active, acc["sum"][k] + lane.mean(1), acc["sum"][k])
        out["bad_step"][k] = jnp.where(newly_bad, steps, acc["bad_step"][k])
        out["bad_value"][k] = jnp.where(newly_bad, jax.vmap(_non_finite_value)(lane), acc["bad_value"][k])
    return out


@jax.jit
def _clear_lane(acc: dict[str, Any], k: jax.Array) -> dict[str, Any]:
    def clear(x: jax.Array, fill: Any) -> jax.Array:
        return x.at[k].set(fill)

    return {"count": clear(acc["count"], 0), "sum": {n: clear(v, 0.0) for n, v in acc["sum"].items()},
            "bad_step": {n: clear(v, -1) for n, v in acc["bad_step"].items()},
            "bad_value": {n: clear(v, 0.0) for n, v in acc["bad_value"].items()}}


class SeedMetrics:
    """`DeviceMetrics` with a seed lane per metric: sums on the device, each seed's window read and
    restarted on its own (its log point), NaN/inf named with the seed's own train step."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._acc: dict[str, Any] | None = None

    def add(self, metrics: dict[str, jax.Array], steps: Sequence[int], active: np.ndarray) -> None:
        if self._acc is None:
            zero = jnp.zeros((self.n,), jnp.float32)
            self._acc = {"count": jnp.zeros((self.n,), jnp.int32), "sum": {k: zero for k in metrics},
                         "bad_step": {k: jnp.full((self.n,), -1, jnp.int32) for k in metrics},
                         "bad_value": {k: zero for k in metrics}}
        self._acc = _accumulate(self._acc, dict(metrics), jnp.asarray(steps, jnp.int32), jnp.asarray(active))

    def check(self, k: int) -> None:
        """Raise NonFiniteLossError if seed k's metrics went NaN/inf, naming the first one and its step."""
        if self._acc is not None:
            bad_step, bad_value = jax.device_get((self._acc["bad_step"], self._acc["bad_value"]))
            DeviceMetrics._raise_if_bad({n: v[k] for n, v in bad_step.items()},
                                        {n: v[k] for n, v in bad_value.items()})

    def read(self, k: int) -> dict[str, float]:
        """Seed k's means since its last read (after checking them), then its new window; {} if none."""
        if self._acc is None:
            return {}
        acc = jax.device_get(self._acc)
        if int(acc["count"][k]) == 0:
            return {}
        self._acc = _clear_lane(self._acc, jnp.asarray(k, jnp.int32))
        DeviceMetrics._raise_if_bad({n: v[k] for n, v in acc["bad_step"].items()},
                                    {n: v[k] for n, v in acc["bad_value"].items()})
        n = int(acc["count"][k])
        return {name: float(v[k]) / n for name, v in acc["sum"].items()}


class _Context:
    """One step's stacked training posteriors [N, B, T, ..], read from the device once for every seed."""

    def __init__(self, deter: jax.Array, stoch: jax.Array) -> None:
        self._device: tuple[Any, Any] | None = (deter, stoch)
        self._host: tuple[np.ndarray, np.ndarray] | None = None

    def lane(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self._host is None:
            self._host, self._device = jax.device_get(self._device), None
        return self._host[0][k], self._host[1][k]


class SeedStack:
    """N seeds' learner states stacked on a leading axis, trained by one vmapped step.

    Each seed's run joins with its own state (`join`, in seed order), then `stack` stacks them. A seed's
    train callback asks for its owed steps (`SeedDriver.train`); `train_requested` then runs them for all
    seeds together, each seed's batches from its own replay and its keys from its own seed. Training
    posteriors go back into each seed's replay "late", as the 1-seed driver does (replay context)."""

    def __init__(self, cfg: Config, seeds: Sequence[int]) -> None:
        self.seeds, self.n, self.rows = list(seeds), len(seeds), cfg.replay.batch_size
        self.write_back = cfg.replay.context
        self.graphdef: Any = None
        self.state: Any = None
        self.train_steps: list[int] = []
        self._joined: list[Any] = []
        self._keys = jnp.stack([jax.random.key(s + 1) for s in self.seeds])  # as TrainDriver.data_parallel
        self.metrics = SeedMetrics(self.n)
        self._pending: list[list[tuple[ReplayBatches, Any, _Context]]] = [[] for _ in self.seeds]
        self._requests: dict[int, tuple[ReplayBatches, int]] = {}
        self._lanes: tuple[Any, ...] | None = None

    def join(self, k: int, label: str, graphdef: Any, state: Any, train_steps: int) -> SeedDriver:
        """Seed k's (restored) state; its driver (`PretrainingRun`'s `make_driver`)."""
        if k != len(self._joined):
            raise ValueError(f"seed {k} joined out of order")
        self.graphdef = graphdef
        self._joined.append(state)
        self.train_steps.append(int(train_steps))
        return SeedDriver(self, k, label)

    def stack(self) -> None:
        """Stack the joined states (one program) and build the steps."""
        self.state = jax.jit(lambda *st: jax.tree.map(lambda *x: jnp.stack(x), *st))(*self._joined)
        self._joined = []
        self._step = memo_jit("task_train", self.graphdef, None, lambda: make_task_train_step(self.graphdef))
        self._masked_step = memo_jit("seed_train_masked", self.graphdef, None,
                                     lambda: make_masked_seed_step(self.graphdef))

    def lane(self, k: int) -> Any:
        """Seed k's learner state (for acting and saving); one program splits the stack after each step."""
        if self._lanes is None:
            self._lanes = _unstack(self.state, self.n)
        return self._lanes[k]

    def request(self, k: int, replay: Replay, due: int) -> None:
        self._requests[k] = (ReplayBatches(replay, self.rows, lambda b: b), due)

    def flush(self, k: int) -> None:
        """Write seed k's queued training posteriors back into its replay."""
        for source, where, context in self._pending[k]:
            source.write_back(where, context.lane(k))
        self._pending[k] = []

    def train_requested(self) -> None:
        """Run the steps the seeds asked for this tick: while any seed owes one and can sample, one
        vmapped step (seeds that owe none or cannot sample sit it out, masked). A seed's queued posteriors
        are written back first only when it owes a step (as `TrainDriver.train`): a tick with none owed
        does not wait for the device."""
        requests, self._requests = self._requests, {}
        for k, (_, due) in requests.items():
            if self.train_steps[k] < due:
                self.flush(k)
        while True:
            active = [k for k, (source, due) in sorted(requests.items())
                      if self.train_steps[k] < due and source.can_sample()]
            if not active:
                return
            self._train_once({k: requests[k][0] for k in active})

    def _train_once(self, sources: dict[int, ReplayBatches]) -> None:
        drawn = {k: source.sample() for k, source in sources.items()}
        filler = next(iter(drawn.values()))[0]  # what a sitting-out lane computes on, then discards
        batch = {name: np.stack([drawn[k][0][name] if k in drawn else filler[name] for k in range(self.n)])
                 for name in filler}
        active = np.array([k in drawn for k in range(self.n)])
        keys = _fold_keys(self._keys, jnp.asarray(self.train_steps, jnp.int32))
        if active.all():
            self.state, metrics = self._step(self.state, batch, keys)
        else:
            self.state, metrics = self._masked_step(self.state, batch, keys, jnp.asarray(active))
        self._lanes = None
        metrics, context = A.pop_context(metrics)
        if context is not None and self.write_back:
            shared = _Context(*context)
            for k, (_, where) in drawn.items():
                self._pending[k].append((sources[k], where, shared))
        self.metrics.add(metrics, self.train_steps, active)
        for k in drawn:
            self.train_steps[k] += 1


class _SeedMetricsView:
    """Seed k's `DeviceMetrics` face; a NaN/inf error names the seed's run folder."""

    def __init__(self, metrics: SeedMetrics, k: int, label: str) -> None:
        self._metrics, self._k, self._label = metrics, k, label

    def check(self) -> None:
        try:
            self._metrics.check(self._k)
        except NonFiniteLossError as e:
            raise NonFiniteLossError(f"{self._label}: {e}") from None

    def read(self) -> dict[str, float]:
        try:
            return self._metrics.read(self._k)
        except NonFiniteLossError as e:
            raise NonFiniteLossError(f"{self._label}: {e}") from None


class SeedDriver:
    """Seed k's face of a `SeedStack`: what a pre-training run uses of its `TrainDriver`."""

    def __init__(self, stack: SeedStack, k: int, label: str) -> None:
        self._stack, self._k = stack, k
        self.metrics = _SeedMetricsView(stack.metrics, k, label)

    @property
    def state(self) -> Any:
        return self._stack.lane(self._k)

    @property
    def train_steps(self) -> int:
        return self._stack.train_steps[self._k]

    def train(self, replay: Replay, due: int) -> None:
        """Ask for steps up to `due`; they run with the other seeds' at the loop's mark "trained"."""
        self._stack.request(self._k, replay, due)

    def flush_context(self) -> None:
        self._stack.flush(self._k)


def _checkpoint_steps(logdir: Path) -> list[int]:
    ckdir = logdir / "checkpoints"
    return sorted(int(p.name) for p in ckdir.iterdir() if p.name.isdigit()) if ckdir.is_dir() else []


def level_checkpoints(logdirs: Sequence[Path], save_every: int, echo: Callable[[str], None]) -> None:
    """Bring seed folders that a kill during a save left one checkpoint apart to the newest step all
    of them hold (0: none); refuse folders further apart (see the module docstring)."""
    steps = {d: _checkpoint_steps(d) for d in logdirs}
    newest = {d: s[-1] if s else 0 for d, s in steps.items()}
    if len(set(newest.values())) == 1:
        return
    common = max(set.intersection(*({0, *s} for s in steps.values())))
    far = [d for d, s in steps.items() if len([x for x in s if x > common]) > 1 or newest[d] - common > save_every]
    if far:
        at = ", ".join(f"{d.name}: {newest[d] or 'none'}" for d in logdirs)
        raise CheckpointError(f"the seed folders are at different checkpoints ({at}), more than one save apart: "
                              "a multi-seed run resumes seeds that were trained together; run the other seeds "
                              "on their own (--seeds K with --logdir of that folder) or use a new --logdir.")
    for d, s in steps.items():
        if common:
            verify_integrity(d / "checkpoints" / str(common))
        set_aside(d, [x for x in s if x > common], echo, f"{d}: seeds brought level at env step {common}")


def _check_same_config(cfgs: Sequence[Config]) -> None:
    base = cfgs[0].replace({"train.seed": 0}).to_dict()
    for cfg in cfgs[1:]:
        if cfg.replace({"train.seed": 0}).to_dict() != base:
            raise ValueError("pretrain_seeds: the seeds' configs differ in more than train.seed; several seeds "
                             "train together only with one config.")


def pretrain_seeds(cfgs: Sequence[Config], logdirs: Sequence[str | Path], *, stop_at: int | None = None,
                   from_step: int | None = None, echo: Callable[[str], None] = print,
                   act_mode: str = "dreamer") -> list[dict[str, Any]]:
    """Pre-train (or resume) one run per config, together: `cfgs` differ only in `train.seed`, each run
    writes its own folder of `logdirs`. Returns each run's `pretrain` result, in order. `stop_at`,
    `from_step` and `act_mode` are `pretrain._pretrain`'s, for every seed."""
    logdirs = [Path(d) for d in logdirs]
    if len(cfgs) != len(logdirs) or len(set(logdirs)) != len(logdirs) or not cfgs:
        raise ValueError("pretrain_seeds: give one distinct run folder per config.")
    _check_same_config(cfgs)
    check_tasks(cfgs[0].env.suite, cfgs[0].env.tasks)
    for d in logdirs:
        if from_step is not None:
            rewind_to(d, from_step, echo)
    level_checkpoints(logdirs, cfgs[0].train.save_every, echo)
    cfg = cfgs[0]
    echo(f"replay needs {replay_megabytes(cfg):.1f} MB for {cfg.replay.capacity} steps, per seed "
         f"({len(cfgs)} seeds)")
    total = cfg.train.env_steps if stop_at is None else min(cfg.train.env_steps, stop_at)
    stack = SeedStack(cfg, [c.train.seed for c in cfgs])
    runs: list[PretrainingRun] = []
    ckpts = []
    try:
        for k, (c, d) in enumerate(zip(cfgs, logdirs, strict=True)):
            ckpts.append(open_checkpoints(c, d))
            label = f"seed{c.train.seed}"
            runs.append(PretrainingRun(c, d, ckpts[-1], total, echo, desc=label, position=k,
                                     make_driver=functools.partial(stack.join, k, f"{label} ({d})")))
        stack.stack()
        loops = [run.loop(act_mode) for run in runs]
        run_together(loops, stack, lambda env_step: env_step >= total)
        for run, loop, ck in zip(runs, loops, ckpts, strict=True):
            if run.should_save.last != loop.env_step or ck.latest_step() is None:
                run.save(loop.env_step)
    finally:
        for run in runs:
            run.logger.close()
            run.collector.close()
        for ck in ckpts:
            ck.close()
    return [run.result(loop.env_step) for run, loop in zip(runs, loops, strict=True)]


def run_together(loops: Sequence[RunLoop], stack: SeedStack, done: Callable[[int], bool]) -> bool:
    """Step the seeds' loops in lockstep until `done(env_step)` (see the module docstring); False when a
    callback stopped its loop first."""
    while not done(loops[0].env_step):
        ticks = [loop.collect() for loop in loops]
        for loop, tick in zip(loops, ticks, strict=True):
            loop.dispatch(tick, until=TRAINED)
        stack.train_requested()
        for loop, tick in zip(loops, ticks, strict=True):
            loop.dispatch(tick, after=TRAINED)
        if any(loop.stopped for loop in loops):
            return False
    return True
