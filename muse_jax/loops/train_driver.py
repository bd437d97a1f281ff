"""The host side of training: how many gradient steps are owed, running them on replay batches, and
their metrics, which stay on the device until a log point or a checkpoint reads them.

Why metrics stay on the device: turning ~20 metrics into Python floats (and checking them for NaN)
after every gradient step blocks the host until that step has finished, so dispatch never runs
ahead of the device. `DeviceMetrics` instead adds each step's metrics to on-device sums (one small
jitted update, no transfer) and remembers, per metric, the first train step at which it was not
finite. A read (at each log point, before each checkpoint and at the end) is one transfer; a NaN/inf
then stops the run naming the metric (losses first) and that first step, so no checkpoint is ever
written after it, whichever step it appeared at.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from muse_jax import agent as A
from muse_jax import parallel
from muse_jax.config import Config
from muse_jax.errors import NonFiniteLossError
from muse_jax.loops.jit_cache import memo_jit
from muse_jax.replay import Replay

__all__ = ["Batches", "DeviceMetrics", "NonFiniteLossError", "ReplayBatches", "TrainDriver", "TrainRatio",
           "check_finite", "make_task_train_step", "train_steps_due"]


def train_steps_due(env_steps: int, train_ratio: float, batch_size: int, seq_len: int) -> int:
    """Gradient steps owed after `env_steps` environment steps at the given train ratio."""
    return int(env_steps * train_ratio / (batch_size * seq_len))


class TrainRatio:
    """DreamerV3's training schedule (embodied/run/train.py: `elements.when.Ratio(train_ratio / (B * T))`,
    called only once replay holds one batch): the first call trains one step and starts the clock; every
    later call owes int((env_step - prev) * ratio) steps, `prev` advancing by what was paid. So training
    starts as soon as there is data for one batch and follows the ratio from there, with no burst of
    steps owed for the env steps before it. `prev` is saved in checkpoints (None = not started)."""

    def __init__(self, train_ratio: float, batch_size: int, seq_len: int, prev: float | None = None) -> None:
        self.ratio = float(train_ratio) / (batch_size * seq_len)
        self.prev = None if prev is None else float(prev)

    @property
    def started(self) -> bool:
        return self.prev is not None

    def __call__(self, env_step: int) -> int:
        """Gradient steps owed now, at `env_step` (call it only once replay can sample a batch)."""
        if self.ratio <= 0:
            return 0
        if self.prev is None:
            self.prev = float(env_step)
            return 1
        repeats = int((env_step - self.prev) * self.ratio)
        self.prev += repeats / self.ratio
        return repeats


def _metric_order(name: str) -> tuple[bool, str]:
    return (not name.startswith("loss/"), name)


def check_finite(metrics: Mapping[str, float], step: int) -> None:
    """Raise NonFiniteLossError naming the first non-finite loss (then any other metric)."""
    for k in sorted(metrics, key=_metric_order):
        if not math.isfinite(metrics[k]):
            raise NonFiniteLossError(
                f"{k} is {metrics[k]} at train step {step}; stopped without saving, the last good checkpoint is "
                "kept. Lower optim.lr or check the inputs, then resume.")


def _non_finite_value(x: jax.Array) -> jax.Array:
    """nan if any element is nan, else the sum of the infinite elements (inf, -inf; nan if both)."""
    return jnp.where(jnp.isnan(x).any(), jnp.nan, jnp.where(jnp.isfinite(x), 0.0, x).sum())


@jax.jit
def _accumulate(acc: dict[str, Any], metrics: dict[str, jax.Array], step: jax.Array) -> dict[str, Any]:
    """Add one step's metrics (scalars, or [K] per task: averaged) to the sums; note first non-finite steps."""
    out = {"count": acc["count"] + 1, "sum": {}, "bad_step": {}, "bad_value": {}}
    for k, v in metrics.items():
        v = jnp.asarray(v, jnp.float32)
        newly_bad = (acc["bad_step"][k] < 0) & ~jnp.isfinite(v).all()
        out["sum"][k] = acc["sum"][k] + v.mean()
        out["bad_step"][k] = jnp.where(newly_bad, step, acc["bad_step"][k])
        out["bad_value"][k] = jnp.where(newly_bad, _non_finite_value(v), acc["bad_value"][k])
    return out


class DeviceMetrics:
    """Sums of train-step metrics on the device, read at log points (see the module docstring)."""

    def __init__(self) -> None:
        self._acc: dict[str, Any] | None = None

    def add(self, metrics: Mapping[str, jax.Array], step: int) -> None:
        """Queue one train step's metrics (no device-to-host transfer)."""
        metrics = dict(metrics)
        if self._acc is None or set(self._acc["sum"]) != set(metrics):
            zero = jnp.zeros((), jnp.float32)
            self._acc = {"count": jnp.zeros((), jnp.int32), "sum": {k: zero for k in metrics},
                         "bad_step": {k: jnp.full((), -1, jnp.int32) for k in metrics},
                         "bad_value": {k: zero for k in metrics}}
        self._acc = _accumulate(self._acc, metrics, jnp.asarray(step, jnp.int32))

    def check(self) -> None:
        """Raise NonFiniteLossError if any metric was NaN/inf, naming it and the first step it was."""
        if self._acc is None:
            return
        bad_step, bad_value = jax.device_get(parallel.host_local((self._acc["bad_step"], self._acc["bad_value"])))
        self._raise_if_bad(bad_step, bad_value)

    @staticmethod
    def _raise_if_bad(bad_step: Mapping[str, Any], bad_value: Mapping[str, Any]) -> None:
        bad = [k for k in bad_step if int(bad_step[k]) >= 0]
        if bad:
            first = min(int(bad_step[k]) for k in bad)
            at_first = {k: float(bad_value[k]) for k in bad if int(bad_step[k]) == first}
            check_finite(at_first, first)

    def read(self) -> dict[str, float]:
        """Means since the last read (after checking them), then start a new window; {} if none."""
        if self._acc is None:
            return {}
        acc = jax.device_get(parallel.host_local(self._acc))
        self._acc = None
        self._raise_if_bad(acc["bad_step"], acc["bad_value"])
        n = max(int(acc["count"]), 1)
        return {k: float(v) / n for k, v in acc["sum"].items()}


class Batches(Protocol):
    """Where a driver's batches come from and where their training posteriors go back to."""

    def can_sample(self) -> bool: ...

    def sample(self) -> tuple[Any, Any]:
        """(batch, where): `where` tells `write_back` which stored steps the batch rows came from."""

    def write_back(self, where: Any, context: Any) -> None:
        """Store the training posteriors (deter, stoch) of the rows `where` names (dreamerv3 `replay.update`)."""


class ReplayBatches:
    """Pre-training's batches: this process's rows of one replay, sharded over the device mesh."""

    def __init__(self, replay: Replay, rows: int, shard: Callable[[Any], Any]) -> None:
        self.replay, self.rows, self.shard = replay, rows, shard

    def can_sample(self) -> bool:
        return self.replay.can_sample()

    def sample(self) -> tuple[Any, list]:
        return self.shard(self.replay.sample(self.rows)), self.replay.last_positions

    def write_back(self, where: list, context: Any) -> None:
        deter, stoch = context
        self.replay.write_back(where, jax.device_get(deter), jax.device_get(stoch))


class TrainDriver:
    """Owns the learner state and runs the owed gradient steps on batches from a `Batches` source;
    metrics are kept in `metrics` (DeviceMetrics) until read. Pre-training (`data_parallel`) and
    adaptation (`task_stacked`) both train through it.

    `write_back` says when a step's training posteriors go back into replay (replay context, dreamerv3
    `replay.update`): "late" queues them until the next `train` call or `flush_context`, so reading them
    does not stall dispatch; "now" writes them before the next batch is drawn; "never" drops them."""

    def __init__(self, step_fn: Callable, state: Any, train_steps: int, key: jax.Array, *, tasks: int | None = None,
                 write_back: str = "late", mesh: Any = None, rows: int | None = None) -> None:
        self._fn, self.state, self.train_steps, self._key = step_fn, state, int(train_steps), key
        self._tasks, self._write_back, self.mesh, self.rows = tasks, write_back, mesh, rows
        self._compiled = False
        self.metrics = DeviceMetrics()
        self._pending: list[tuple[Batches, Any, Any]] = []

    @classmethod
    def data_parallel(cls, cfg: Config, graphdef: Any, state: Any, train_steps: int, seed: int) -> TrainDriver:
        """Pre-training's driver: one learner, each batch split over every local device (and host)."""
        mesh = parallel.make_mesh()
        parallel.check_batch_size(cfg.replay.batch_size, mesh)
        fn = memo_jit("train", graphdef, mesh, lambda: A.make_train_step(cfg, graphdef, mesh, state))
        # several hosts: this host's copy becomes the global replicated state (one host: jit places it), and
        # each host's rows of the replicated posteriors are not split out, so none are written back
        multi = parallel.is_multi_process()
        placed = parallel.shard_state(state, mesh, cfg.parallel.param_sharding) if multi else state
        return cls(fn, placed, train_steps, jax.random.key(seed + 1), mesh=mesh,
                   rows=parallel.local_batch_size(cfg.replay.batch_size, mesh),  # this process's rows of the batch
                   write_back="late" if cfg.replay.context and not multi else "never")

    @classmethod
    def task_stacked(cls, graphdef: Any, state: Any, train_steps: int, key: jax.Array, tasks: int) -> TrainDriver:
        """Adaptation's driver: `state` is K task learners stacked on a leading axis, each batch [K, B, T..]
        and each step's key split K ways; posteriors are written back at once, before the next batch."""
        fn = memo_jit("task_train", graphdef, None, lambda: make_task_train_step(graphdef))
        return cls(fn, state, train_steps, key, tasks=tasks, write_back="now")

    @property
    def step_fn(self) -> Callable:
        """The train step `(state, batch, key) -> (state, metrics)` that `train` runs (after the first `train`
        call: the compiled program), e.g. to time it alone on a batch (benchmarks/collect_overhead.py --loop).
        The state argument is donated: pass the state it returned last, as `train` does."""
        return self._fn

    def replay_batches(self, replay: Replay) -> ReplayBatches:
        """Pre-training's batch source for `replay`."""
        return ReplayBatches(replay, self.rows, lambda b: parallel.shard_batch(b, self.mesh))

    def flush_context(self) -> None:
        """Write the queued training posteriors back into replay (one device read per queued step)."""
        for source, where, context in self._pending:
            source.write_back(where, context)
        self._pending = []

    def _step_key(self) -> jax.Array:
        key = jax.random.fold_in(self._key, self.train_steps)
        return key if self._tasks is None else jax.random.split(key, self._tasks)

    def train(self, source: Batches | Replay, due: int) -> int:
        """Gradient steps until `due` is reached; returns how many ran. Metrics are not read back; the
        previous calls' training posteriors are written back into replay first, when a step is due (a
        call with none due leaves them queued, so it does not wait for the device: the next batch or
        checkpoint reads replay after them either way, and an episode evicted in between, which they
        skip, is read by nothing). A Replay is read as `replay_batches(replay)`."""
        if isinstance(source, Replay):
            source = self.replay_batches(source)
        if self.train_steps >= due:
            return 0
        self.flush_context()
        n = 0
        while self.train_steps < due and source.can_sample():
            batch, where = source.sample()
            key = self._step_key()
            if not self._compiled:  # several hosts: all start the first step together (parallel.meet)
                self._fn, self._compiled = parallel.compile_then_meet(self._fn, self.state, batch, key), True
            self.state, metrics = self._fn(self.state, batch, key)
            metrics, context = A.pop_context(metrics)
            if context is not None and self._write_back == "now":
                source.write_back(where, context)
            elif context is not None and self._write_back == "late":
                self._pending.append((source, where, context))
            self.metrics.add(metrics, self.train_steps)  # adaptation: [K] per metric
            self.train_steps += 1
            n += 1
        return n


def make_task_train_step(graphdef: Any) -> Callable:
    """jit(vmap(train_step)) over the task axis, state donated: (state [K..], batch [K,B,T..], keys [K])."""
    return jax.jit(jax.vmap(lambda st, batch, key: A.train_step(graphdef, st, batch, key)), donate_argnums=0)
