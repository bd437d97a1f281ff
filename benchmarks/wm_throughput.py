"""Throughput of the MUSE world model: jitted train step, policy step and self-regulation decision.

Why: the project sets a speed target against DreamerV3 (JAX) and r2dreamer (PyTorch) in one fixed
setting (24-dim vector observation, 6-dim action, batch 16 x 64, fp32). This script measures that
setting, or any size/shape, the same way each time: compile once (timed), warm up, then time
several repeats and take the median. FLOPs come from XLA's cost analysis of the compiled train step
and are compared with a large fp32 matmul on the same device in the same run.

    python benchmarks/wm_throughput.py --size size1m --obs-dim 24 --act-dim 6 --batch 16 --seq 64 --steps 5

With `--seeds N` (N > 1) the same run also times N seeds' learners trained by one vmapped step
(`muse-wm pretrain --seeds`, muse_jax/loops/seeds.py) and reports `seeds_train_step_median_s` (wall time
per update of all N seeds), `seeds_ratio` (that over the 1-seed `train_step_median_s` of the same run;
N seeds as N separate steps would be N) and `seeds_per_seed_s`.

With `--host-devices N` the host CPU is split into N XLA devices and the train step shards the batch over
them (data parallel, as on several GPUs); `devices` in the record says how many ran it.

The last line printed is always one JSON object.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record, loops_record  # noqa: E402
from muse_jax.agent import ObsSpec, create_learner, initial_carry, make_policy_step, make_train_step  # noqa: E402
from muse_jax.config import MODEL_SIZES, Config, from_dict, parse_overrides  # noqa: E402
from muse_jax.host_allocator import keep_freed_memory  # noqa: E402


def build_config(size: str, obs_dim: int, image: bool, image_size: int, batch: int, seq: int,
                 overrides: list[str] | None = None) -> Config:
    """The benchmark config: a DreamerV3 size preset with a vector and/or image observation."""
    if size not in MODEL_SIZES:
        raise SystemExit(f"--size {size!r} is not a preset; choose one of {list(MODEL_SIZES)}.")
    if obs_dim <= 0 and not image:
        raise SystemExit("give --obs-dim D > 0 (vector observation) or --image, or both.")
    data = {"model": {"size": size},
            "env": {"image": image, "proprio": obs_dim > 0, "image_size": image_size},
            "replay": {"batch_size": batch, "seq_len": seq},
            "regulation": {"strategy": "gradient"}}
    return from_dict(data, parse_overrides(overrides or []))


def synthetic_batch(spec: ObsSpec, batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A replay-shaped batch [B, T, ...] with plausible values (episode starts, successes, rewards)."""
    rng = np.random.default_rng(seed)
    is_first = np.zeros((batch, seq), bool)
    is_first[:, 0] = True
    action = rng.uniform(-1, 1, (batch, seq, spec.act_dim)).astype(np.float32)
    action[is_first] = 0.0
    tts = rng.integers(-1, 200, (batch, seq)).astype(np.float32)
    out = {
        "action": action,
        "reward": rng.normal(0, 1, (batch, seq)).astype(np.float32),
        "is_first": is_first,
        "is_terminal": np.zeros((batch, seq), bool),
        "time_to_success": tts,
        "task_id": rng.integers(1, spec.num_tasks + 1, (batch, seq)).astype(np.int32),
    }
    if spec.proprio_dim is not None:
        out["proprio"] = rng.normal(0, 1, (batch, seq, spec.proprio_dim)).astype(np.float32)
    if spec.image_shape is not None:
        out["image"] = rng.integers(0, 256, (batch, seq, *spec.image_shape), dtype=np.uint8)
    return out


def synthetic_obs(spec: ObsSpec, envs: int, seed: int = 0) -> dict[str, np.ndarray]:
    """One acting step's observation for `envs` environments."""
    batch = synthetic_batch(spec, envs, 2, seed)
    return {k: v[:, 1] for k, v in batch.items() if k in ("proprio", "image", "task_id", "is_first")}


def _block(tree: Any) -> Any:
    return jax.block_until_ready(tree)


def time_calls(fn: Callable[[], Any], steps: int, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds of `steps` calls, each waited for; process CPU seconds appended to `cpu` if given.

    CPU seconds are robust to other processes sharing the machine: on an idle machine with C
    cores a call takes at least cpu/C wall seconds.
    """
    times = []
    for _ in range(steps):
        c0, t0 = time.process_time(), time.perf_counter()
        _block(fn())
        times.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(time.process_time() - c0)
    return times


def load_average() -> float:
    """1-minute load average (how busy the machine was), NaN where unavailable."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def cost_flops(compiled: Any) -> float:
    """FLOPs of a compiled XLA executable (cost analysis is a dict, or a list of one in older jax)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else {}
    return float((cost or {}).get("flops", float("nan")))


def peak_matmul_gflops(n: int, repeats: int = 3) -> float:
    """Achieved GFLOP/s of an n x n fp32 matmul: the device's practical ceiling for dense layers."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul).lower(a, b).compile()
    _block(mm(a, b))
    best = statistics.median(time_calls(lambda: mm(a, b), repeats))
    return 2.0 * n**3 / best / 1e9


def count_params(tree: Any) -> int:
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(tree)))


def time_seeds(cfg: Config, spec: ObsSpec, args: argparse.Namespace) -> dict[str, Any]:
    """Wall seconds per update of `args.seeds` learners (seeds 0..N-1) stacked on a seed axis and trained by
    one jit(vmap(train_step)) (muse_jax/loops/seeds.py), each on its own batch and key; one device."""
    from muse_jax.loops.train_driver import make_task_train_step

    n = args.seeds
    learners = [create_learner(cfg, spec, seed=k) for k in range(n)]
    graphdef = learners[0].graphdef
    state = jax.tree.map(lambda *x: jnp.stack(x), *[lr.state for lr in learners])
    del learners
    batch = jax.device_put(jax.tree.map(lambda *x: np.stack(x),
                                        *[synthetic_batch(spec, args.batch, args.seq, seed=k) for k in range(n)]))
    keys = jnp.stack([jax.random.key(k + 1) for k in range(n)])
    t0 = time.perf_counter()
    compiled = make_task_train_step(graphdef).lower(state, batch, keys).compile()
    compile_s = time.perf_counter() - t0
    for _ in range(args.warmup):
        state, _ = _block(compiled(state, batch, keys))

    def step_once():
        nonlocal state
        state, metrics = compiled(state, batch, keys)
        return metrics

    cpu: list[float] = []
    times = time_calls(step_once, args.steps, cpu)
    return {"seeds": n, "seeds_train_step_median_s": statistics.median(times), "seeds_train_step_times_s": times,
            "seeds_train_step_cpu_s": statistics.median(cpu), "seeds_compile_s": compile_s}


def run(args: argparse.Namespace) -> dict[str, Any]:
    cfg = build_config(args.size, args.obs_dim, args.image, args.image_size, args.batch, args.seq, args.set)
    spec = ObsSpec.from_config(cfg, proprio_dim=max(args.obs_dim, 1), act_dim=args.act_dim)
    learner = create_learner(cfg, spec, seed=0)
    graphdef, state = learner.graphdef, learner.state
    agent = nnx.merge(graphdef, state).agent
    wm_params = count_params(nnx.state(agent.wm, nnx.Param))
    all_params = count_params(nnx.state(agent, nnx.Param))
    key = jax.random.key(0)

    # Train step: lower + compile timed separately, then run the compiled executable.
    batch = synthetic_batch(spec, args.batch, args.seq)
    mesh = None
    if jax.device_count() > 1:  # data-parallel over all devices (e.g. CPU cores as forced host devices)
        from muse_jax import parallel

        mesh = parallel.make_mesh()
        state, batch = parallel.shard_state(state, mesh), parallel.shard_batch(batch, mesh)
    else:
        batch = jax.device_put(batch)
    t0 = time.perf_counter()
    compiled = make_train_step(cfg, graphdef, mesh).lower(state, batch, key).compile()
    compile_s = time.perf_counter() - t0
    flops = cost_flops(compiled)
    keys = iter(jax.random.split(key, args.steps + args.warmup))
    for _ in range(args.warmup):
        state, metrics = _block(compiled(state, batch, next(keys)))

    def train_once():
        nonlocal state, metrics
        state, metrics = compiled(state, batch, next(keys))
        return metrics

    load_before = load_average()
    train_cpu: list[float] = []
    if args.profile:  # a jax.profiler trace of the timed steps (open in Perfetto / TensorBoard)
        with jax.profiler.trace(str(args.profile), create_perfetto_trace=True):
            train_times = time_calls(train_once, args.steps, train_cpu)
    else:
        train_times = time_calls(train_once, args.steps, train_cpu)
    load_after = load_average()
    loss = float(metrics["loss/total"])
    train_med = statistics.median(train_times)
    seeds: dict[str, Any] = {}
    if args.seeds > 1:  # the same run, after the 1-seed timing: N seeds, one vmapped step
        seeds = time_seeds(cfg, spec, args)
        seeds.update(seeds_ratio=seeds["seeds_train_step_median_s"] / train_med,
                     seeds_per_seed_s=seeds["seeds_train_step_median_s"] / args.seeds)

    # Acting: the plain actor ("dreamer") and the gradient self-regulation decision ("muse").
    state = jax.device_put(state, jax.devices()[0]) if mesh is not None else state
    obs = jax.device_put(synthetic_obs(spec, args.envs))
    carry = initial_carry(graphdef, state, args.envs)
    acting = {}
    for mode in ("dreamer", "muse"):
        t0 = time.perf_counter()
        act = make_policy_step(graphdef, mode).lower(state, carry, obs, key).compile()
        acting[f"{mode}_compile_s"] = time.perf_counter() - t0
        _block(act(state, carry, obs, key))
        acting[mode] = statistics.median(time_calls(lambda act=act: act(state, carry, obs, key), args.steps))

    peak = peak_matmul_gflops(args.matmul_n or (2048 if jax.default_backend() == "cpu" else 8192))
    gflops = flops * (jax.device_count() if mesh is not None else 1) / 1e9  # cost analysis is per device
    train_sps = 1.0 / train_med
    return {
        "benchmark": "wm_throughput",
        "size": args.size, "batch": args.batch, "seq": args.seq, "obs_dim": args.obs_dim,
        "act_dim": args.act_dim, "image": bool(args.image), "envs": args.envs,
        "dtype": cfg.model.compute_dtype, "steps": args.steps,
        "wm_params": wm_params, "params": all_params,
        "train_steps_per_s": train_sps,
        "frames_per_s": args.batch * args.seq * train_sps,
        "policy_steps_per_s": args.envs / acting["dreamer"],
        "regulation_decisions_per_s": args.envs / acting["muse"],
        "model_gflops_per_step": gflops,
        "achieved_gflops_per_s": gflops * train_sps,
        "peak_matmul_gflops_per_s": peak,
        "train_step_median_s": train_med,
        "train_step_min_s": min(train_times),
        "train_step_times_s": train_times,
        "compile_s": compile_s,
        "train_step_cpu_s": statistics.median(train_cpu),
        "cpu_cores": os.cpu_count(),
        "loadavg_1m": load_before,
        "loadavg_1m_after_train": load_after,
        "policy_step_median_s": acting["dreamer"],
        "regulation_decision_median_s": acting["muse"],
        "policy_compile_s": acting["dreamer_compile_s"],
        "regulation_compile_s": acting["muse_compile_s"],
        "final_loss": loss,
        "regulation_strategy": cfg.regulation.strategy,
        "regulation_horizon": cfg.regulation.horizon,
        "backend": jax.default_backend(),
        "loops": loops_record(cfg),
        "device": jax.devices()[0].device_kind,
        "devices": jax.device_count(),
        "jax": jax.__version__,
        "host": platform.node(),
        **seeds,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from muse_common.arg_parser import ArgumentParser, path_arg

    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--size", default="size1m", help=f"model size preset: {', '.join(MODEL_SIZES)}")
    p.add_argument("--batch", type=int, default=16, help="B, sequences per train batch")
    p.add_argument("--seq", type=int, default=64, help="T, sequence length")
    p.add_argument("--steps", type=int, default=5, help="timed repeats of each call (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed train steps after compiling")
    p.add_argument("--obs-dim", type=int, default=24, help="vector observation size D (0 = none)")
    p.add_argument("--act-dim", type=int, default=6, help="continuous action size A")
    p.add_argument("--image", action="store_true", help="add a 64x64 RGB observation (CNN encoder/decoder)")
    p.add_argument("--image-size", type=int, default=64, help="image side with --image")
    p.add_argument("--seeds", type=int, default=1,
                   help="also time N seeds trained by one vmapped step (muse-wm pretrain --seeds); 1: not")
    p.add_argument("--envs", type=int, default=1, help="environments batched in one policy/regulation call")
    p.add_argument("--host-devices", type=int, default=0, metavar="N",
                   help="split the host CPU into N XLA devices and shard the batch over them (data parallel; "
                        "0: jax's default, one CPU device unless XLA_FLAGS says otherwise)")
    p.add_argument("--matmul-n", type=int, default=0, help="side of the peak matmul (0: 2048 on CPU, else 8192)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, e.g. --set model.compute_dtype=bfloat16")
    p.add_argument("--compile-cache", type=Path, metavar="DIR",
                   help="persistent XLA compilation cache (a warm cache makes compile_s small)")
    p.add_argument("--profile", type=Path, metavar="DIR", help="write a jax.profiler trace of the timed train steps")
    p.add_argument("--keep-freed-memory", action="store_true",
                   help="keep freed host memory in the process (muse_jax/host_allocator.py): no page faults in "
                        "the train step, but slower acting calls")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument("--out", type=path_arg, help="also append the JSON record to this JSONL file")
    args = p.parse_args(argv)
    for name in ("batch", "seq", "steps", "act_dim", "envs", "seeds"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    from muse_jax.parallel import max_host_devices

    if not 0 <= args.host_devices <= max_host_devices():
        p.error(f"--host-devices {args.host_devices}: give 1 to {max_host_devices()} host devices (the larger of 64 "
                "and this machine's CPU count), or 0 for jax's default")
    if args.host_devices > 1 and args.batch % args.host_devices:
        p.error(f"--batch {args.batch} must be a multiple of --host-devices {args.host_devices}")
    if args.seq < 2:
        p.error("--seq must be >= 2")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    kept = keep_freed_memory() if args.keep_freed_memory else False  # before JAX runs anything
    if args.host_devices:  # before JAX runs anything too
        from muse_jax.parallel import set_host_devices

        set_host_devices(args.host_devices)
    if args.compile_cache:
        from muse_jax.parallel import enable_compilation_cache

        enable_compilation_cache(args.compile_cache)
    record = run(args)
    record["compile_cache"] = str(args.compile_cache) if args.compile_cache else None
    record["host_keep_freed_memory"] = kept
    if not args.json:
        print(f"{record['size']} B={record['batch']} T={record['seq']} on {record['devices']}x {record['device']}: "
              f"train step {record['train_step_median_s']:.3f} s median (compile {record['compile_s']:.1f} s), "
              f"{record['frames_per_s']:.0f} frames/s, {record['achieved_gflops_per_s']:.1f} of "
              f"{record['peak_matmul_gflops_per_s']:.1f} peak GFLOP/s; policy {record['policy_steps_per_s']:.0f}/s, "
              f"regulation {record['regulation_decisions_per_s']:.1f}/s", file=sys.stderr)
        if args.seeds > 1:
            print(f"{args.seeds} seeds, one vmapped step: {record['seeds_train_step_median_s']:.3f} s per update, "
                  f"{record['seeds_ratio']:.2f}x one seed's", file=sys.stderr)
    bad = [k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        print(f"warning: non-finite values for {bad}", file=sys.stderr)
    return emit_record(record, args.out)


if __name__ == "__main__":
    main()
