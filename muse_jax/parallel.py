"""Data-parallel training over every device with `jax.sharding`, and multi-host start-up.

Why: one Mesh with a single "data" axis covers 1 CPU, 8 GPUs or a TPU pod slice with the same
code. The batch is split along B; parameters are replicated (default) or, with
`parallel.param_sharding: fsdp`, split along their largest divisible axis so that big models fit.
XLA inserts the gradient all-reduce / all-gather itself from the in/out shardings of the jitted step.

Multi-host (`parallel.distributed: true`, `muse-wm pretrain`): every process runs the whole loop on its
own envs, replay and run folder (`process_logdir`), samples its rows of the global batch
(`local_batch_size`) and joins the other processes only in the jitted train step, whose replicated
output is the same on every host. Acting, logging and checkpointing use this host's copy
(`host_local`); each process checkpoints its own folder (no shared file system needed), and all leave
the job together (`finish_distributed`). Train steps stay in lock step because every process takes the
same env steps and Meta-World episodes have a fixed length, so every replay can sample at the same step.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"
_distributed_started = False


def init_distributed(cfg: Any) -> bool:
    """Join a multi-host job when `cfg.parallel.distributed`; True if this process is part of one.

    Coordinates come from the environment: JAX_COORDINATOR_ADDRESS (host:port), JAX_NUM_PROCESSES
    and JAX_PROCESS_ID when set, otherwise jax auto-detects the cluster (SLURM, Open MPI, TPU, k8s).
    Must run before anything touches a device.
    """
    global _distributed_started
    if not cfg.parallel.distributed:
        return False
    if _distributed_started:
        return True
    kwargs: dict[str, Any] = {}
    if os.environ.get("JAX_COORDINATOR_ADDRESS"):
        kwargs["coordinator_address"] = os.environ["JAX_COORDINATOR_ADDRESS"]
    for env, key in (("JAX_NUM_PROCESSES", "num_processes"), ("JAX_PROCESS_ID", "process_id")):
        if os.environ.get(env):
            try:
                kwargs[key] = int(os.environ[env])
            except ValueError:
                raise ValueError(f"{env}={os.environ[env]!r} must be an integer "
                                 "(parallel.distributed).") from None
    try:
        jax.distributed.initialize(**kwargs)
    except (ValueError, RuntimeError) as e:
        raise RuntimeError(
            f"parallel.distributed=true but jax.distributed.initialize failed: {str(e).rstrip('.')}. "
            "Set JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES and JAX_PROCESS_ID, "
            "or run under SLURM/MPI; "
            "or set parallel.distributed=false for one host.") from e
    _distributed_started = True
    return True


_meetings = 0


def meet(what: str, timeout_s: float = 3600.0) -> None:
    """Multi-host: wait until every process got here (a coordination-service barrier; nothing on one host).

    Why not `multihost_utils.sync_global_devices`: that is itself a device collective, and on CPU (Gloo)
    setting up a collective over a new set of devices waits only 30 s for the other processes. Processes
    drift apart by more than that (each compiles the train step itself, steps its own envs, writes its own
    checkpoint), so they meet here first, before anything that may set up a collective: the first train
    step, orbax's own barriers in a save, the shutdown. `what` names the barrier in a timeout error.
    """
    global _meetings
    if not is_multi_process():
        return
    from jax._src import distributed  # the client jax.distributed.initialize made; jax has no public barrier

    _meetings += 1
    distributed.global_state.client.wait_at_barrier(f"muse-wm {_meetings}: {what}", int(timeout_s * 1000))


def compile_then_meet(fn: Callable, *args: Any) -> Callable:
    """Multi-host: compile the jitted `fn` for `args` now, then `meet`, and return the compiled program, so
    that its first run starts on every process together (see `meet`). One host: `fn` unchanged."""
    if not is_multi_process():
        return fn
    compiled = fn.lower(*args).compile()
    meet("train step compiled")
    return compiled


def finish_distributed() -> None:
    """Leave a multi-host job together: `meet` once every process finished its run (its last checkpoint
    written, its envs closed), then shut the client down.

    Why: without it the first process to finish enters jax's shutdown barrier alone and a slower one
    (still saving) fails at exit with a coordination-service shutdown-barrier timeout although its run
    was complete. Does nothing on one host.
    """
    global _distributed_started
    if not _distributed_started:
        return
    meet("run finished")
    jax.distributed.shutdown()
    _distributed_started = False


def process_logdir(logdir: str | os.PathLike) -> Path:
    """This process's run folder: `logdir` itself on one host and on process 0, `logdir/process-<i>` on
    process i > 0. Parameters are the same on every host, so process 0's folder is a complete run that
    `muse-wm adapt` reads; the others hold their own replay, metrics and checkpoints for resuming."""
    i = jax.process_index()
    return Path(logdir) if i == 0 else Path(logdir) / f"process-{i}"


def process_seed(seed: int) -> int:
    """Seed of this process's envs and replay sampling: `seed` on one host and on process 0, shifted on
    the others so that hosts collect and sample different episodes. (The train step's key stays the
    global seed: it is an input every process must agree on.)"""
    return seed + 1_000_003 * jax.process_index()


def is_multi_process() -> bool:
    """True inside a multi-host job (after `init_distributed`)."""
    return jax.process_count() > 1


def local_batch_size(batch_size: int, mesh: Mesh) -> int:
    """Rows of the global `replay.batch_size` that this process samples from its own replay."""
    check_batch_size(batch_size, mesh)
    n = jax.process_count()
    if batch_size % n:
        raise ValueError(f"replay.batch_size={batch_size} is not divisible by the {n} processes; "
                         f"set replay.batch_size to a multiple of {mesh.devices.size}.")
    return batch_size // n


def host_local(tree: Any) -> Any:
    """This process's copy of a replicated global pytree (single-process: unchanged, no copy).

    Why: acting and checkpointing are per process, but a replicated global array spans devices
    of other hosts; its local shard is the whole value. FSDP-split parameters have no whole local
    copy, so multi-host runs keep parameters replicated.
    """
    if not is_multi_process():
        return tree

    def local(x: Any) -> Any:
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if not x.sharding.is_fully_replicated:
            raise ValueError("a learner array is split over hosts (parallel.param_sharding=fsdp); multi-host runs "
                             "need parallel.param_sharding=replicated.")
        return x.addressable_data(0)

    return jax.tree.map(local, tree)


def enable_compilation_cache(directory: str | os.PathLike, min_compile_s: float = 1.0) -> Path:
    """Keep compiled XLA programs on disk so the next process skips compilation.

    Why: the train step takes minutes to compile on a small CPU and tens of seconds on GPU; with
    the cache a resumed run, a second test process or an evaluation reuses it (measured here: a
    program that compiled in 85 s loaded in 3.4 s). Entries are keyed by program, jax version and
    device, so a stale entry is never used.
    """
    path = Path(directory).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_s))
    return path


CACHE_ENV = "MUSE_JAX_COMPILATION_CACHE"
"""Environment variable for the CLI's persistent compilation cache: `0`/`off`/`false`/`no` turns it off, a
path puts it there. JAX's own JAX_COMPILATION_CACHE_DIR is honoured too (a path only)."""

_OFF = ("0", "off", "false", "no", "none", "")


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/muse-jax/xla`, or `~/.cache/muse-jax/xla` (the XDG base-directory default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base).expanduser() / "muse-jax" / "xla"


def cli_cache_dir(disabled: bool = False) -> Path | None:
    """Where the CLI keeps compiled programs, or None when the cache is turned off.

    Order: `--no-compile-cache` (`disabled`), then MUSE_JAX_COMPILATION_CACHE (off, or a path), then
    JAX_COMPILATION_CACHE_DIR, then `default_cache_dir()`.
    """
    if disabled:
        return None
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in _OFF else Path(value).expanduser()
    jax_dir = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    return Path(jax_dir).expanduser() if jax_dir else default_cache_dir()


def set_host_devices(n: int) -> None:
    """Split the host CPU into `n` XLA devices (jax's `jax_num_cpu_devices`, as
    `--xla_force_host_platform_device_count=n` does) so that `make_mesh` shards the batch over them.

    Must run before anything touches a device. Measured on the 2-core CPU (docs/speed.md, "The train step:
    what was tried on the CPU"): 2 host devices made the size1m and size12m train steps slower, not faster
    (the 1-device step already uses both cores when they are free), so nothing sets it by default; it stays
    for measuring (`benchmarks/wm_throughput.py --host-devices N`).
    """
    cap = max_host_devices()
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 1 <= n <= cap:
        raise ValueError(f"set_host_devices: the number of host devices must be an integer from 1 to {cap} (the "
                         f"larger of 64 and this machine's CPU count), got {n!r}.")
    try:
        jax.config.update("jax_num_cpu_devices", int(n))
    except RuntimeError as e:  # the CPU backend already started
        raise RuntimeError(f"cannot split the host into {n} devices: {' '.join(str(e).split()).rstrip('.')}; "
                           "set them before anything touches a device") from None


def max_host_devices() -> int:
    """The most host devices `set_host_devices` makes: 64, or the CPU count on a bigger machine. More devices
    than cores only measures overhead (each device's step gets a slice of the batch and of the cores), and a
    typo such as 1000 would spend minutes and gigabytes setting up devices before the first step."""
    return max(64, os.cpu_count() or 1)


def make_mesh(devices: list[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh over all (global) devices with the single axis "data"."""
    devices = list(jax.devices()) if devices is None else list(devices)
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def data_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) axis split over "data", the rest whole."""
    return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    """A full copy on every device."""
    return NamedSharding(mesh, PartitionSpec())


def check_batch_size(batch_size: int, mesh: Mesh) -> None:
    """The global batch must split evenly over the devices; say which setting to change."""
    n = mesh.devices.size
    if batch_size % n:
        lower, upper = (batch_size // n) * n, (batch_size // n + 1) * n
        options = f"{lower} or {upper}" if lower else f"{upper}"
        raise ValueError(f"replay.batch_size={batch_size} is not divisible by the {n} devices of the mesh; "
                         f"set replay.batch_size to a multiple of {n} (e.g. {options}).")


def shard_batch(batch: Mapping[str, Any], mesh: Mesh) -> dict[str, jax.Array]:
    """Host arrays [B, ...] -> global jax.Arrays split along B over the mesh.

    On several hosts each process passes its own slice of the batch (B_local rows); the global
    batch is B_local * process_count.
    """
    sharding = data_sharding(mesh)
    out = {}
    for name, x in batch.items():
        x = np.asarray(x)
        if x.ndim == 0:
            raise ValueError(f"batch['{name}'] is a scalar; every batch entry needs a leading batch axis.")
        check_batch_size(x.shape[0] * jax.process_count(), mesh)
        out[name] = jax.make_array_from_process_local_data(sharding, x)
    return out


def fsdp_spec(shape: tuple[int, ...], num_devices: int, min_size: int = 2**10) -> PartitionSpec:
    """Split the largest axis divisible by the device count; small or indivisible leaves stay whole."""
    if num_devices <= 1 or int(np.prod(shape, dtype=np.int64)) < min_size:
        return PartitionSpec()
    candidates = [(dim, i) for i, dim in enumerate(shape) if dim % num_devices == 0]
    if not candidates:
        return PartitionSpec()
    _, axis = max(candidates)
    return PartitionSpec(*([None] * axis + [DATA_AXIS]))


def state_shardings(state: Any, mesh: Mesh, mode: str = "replicated") -> Any:
    """A pytree of NamedShardings matching `state` (arrays or ShapeDtypeStructs)."""
    if mode == "replicated":
        return jax.tree.map(lambda _: replicated(mesh), state)
    if mode == "fsdp":
        n = mesh.devices.size
        return jax.tree.map(lambda x: NamedSharding(mesh, fsdp_spec(tuple(np.shape(x)), n)), state)
    raise ValueError(f"parallel.param_sharding={mode!r} is not supported; choose 'replicated' or 'fsdp'.")


def shard_state(state: Any, mesh: Mesh, mode: str = "replicated") -> Any:
    """Place a learner state on the mesh (replicated or FSDP-split).

    The result may share buffers with `state`; a step that donates it also invalidates `state`.
    """
    return jax.device_put(state, state_shardings(state, mesh, mode))


def jit_sharded_step(step: Callable[[Any, Any, jax.Array], tuple[Any, Any]], state: Any, mesh: Mesh,
                     mode: str = "replicated", donate: bool = True) -> Callable:
    """jit `step(state, batch, key) -> (state, metrics)` with the batch split over "data".

    The state's in and out shardings are the same (replicated or FSDP), so the step can donate
    its input state and be called in a loop; metrics come back replicated. `state` (arrays or
    ShapeDtypeStructs) gives the FSDP layout; it may be None for "replicated".
    """
    if state is None:
        if mode != "replicated":
            raise ValueError(f"parallel.param_sharding={mode!r} needs the learner state to choose "
                             "which axis of each parameter to split; pass state=learner.state.")
        state_sh = replicated(mesh)
    else:
        state_sh = state_shardings(state, mesh, mode)
    return jax.jit(step, in_shardings=(state_sh, data_sharding(mesh), replicated(mesh)),
                   out_shardings=(state_sh, replicated(mesh)), donate_argnums=(0,) if donate else ())
