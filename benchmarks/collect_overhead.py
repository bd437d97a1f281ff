"""Env steps/s of the collector (policy on device) against the raw gymnasium vector env, same envs.

Why: acting must not be the bottleneck of training; the collector (muse_jax/loops/collect.py) adds
the jitted policy step, the host<->device copies and the per-step episode bookkeeping on top of
stepping the environments. This script builds the same Meta-World vector env twice from one config
(`make_vector_env`, as pre-training does), steps it `--steps` times with uniform random actions
(`raw`), then `--steps` times through `Collector.step` with the policy of a freshly initialised agent
(`collector`, after one untimed warm-up step that compiles the policy), and reports both rates and

    overhead = raw_env_steps_per_s / collector_env_steps_per_s - 1   (goal: at most 0.10)

i.e. the extra wall time per env step that the collector costs, as a fraction of the env's own time.

    python benchmarks/collect_overhead.py --config quickstart --steps 200 --mode dreamer

With `--loop` it times a learning run instead: pre-training's own loop (`muse_jax.loops.pretrain`: envs,
policy, replay, train ratio, log points; no checkpoints) in a temporary folder (removed afterwards, also on an
error), once as configured and once with `train.overlap_collect` (acting while the train steps run; same config,
same compiled programs), each for `--updates` train steps after `--warmup-updates` (prefill, compile). Then, in
the same process, the same compiled train step on a batch from the same replay, timed as `wm_throughput.py`
times it (each call waited for, median): `bench_updates_per_s`. Each run prints one JSON line with

    loop_updates_per_s, bench_updates_per_s, ratio = loop / bench   (goal: at least 0.90)

and where the loop's wall time went, per update (`per_update_s`: env stepping, the rest of a collector
step (policy dispatch, waiting for its actions, episode bookkeeping), the train callback (writing back
the previous posteriors, sampling batches, dispatching steps), log points, the final wait for the device).
The last line is the summary of both runs.

    python benchmarks/collect_overhead.py --loop --config quickstart --set model.size=size1m --updates 30

The last line printed is always one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record  # noqa: E402
from benchmarks.wm_throughput import load_average  # noqa: E402
from muse_jax.config import ConfigError, load_config  # noqa: E402

MODES = ("dreamer", "muse", "random")


def time_raw(make_venv, steps: int, seed: int) -> float:
    """Seconds for `steps` vector-env steps with uniformly random actions (reset excluded)."""
    venv = make_venv(seed)
    try:
        venv.reset(seed=seed)
        venv.action_space.seed(seed)
        actions = [venv.action_space.sample() for _ in range(steps)]
        t0 = time.perf_counter()
        for a in actions:
            venv.step(a)
        return time.perf_counter() - t0
    finally:
        venv.close()


def time_collector(cfg, make_venv, steps: int, seed: int, mode: str) -> tuple[float, int]:
    """Seconds for `steps` Collector.step calls (after one untimed compile step), and episodes finished."""
    from muse_jax import agent as A
    from muse_jax.envs.metaworld import ACT_DIM, PROPRIO_DIM
    from muse_jax.loops.collect import Collector

    spec = A.ObsSpec.from_config(cfg, proprio_dim=PROPRIO_DIM, act_dim=ACT_DIM)
    learner = A.create_learner(cfg, spec, seed)
    graphdef, state = learner.graphdef, learner.state
    policy = A.make_policy_step(graphdef)
    carry = A.initial_carry(graphdef, state, cfg.env.num_envs)
    task_ids = list(range(1, len(cfg.env.tasks) + 1))
    collector = Collector(make_venv, policy, carry, list(cfg.env.tasks), seed,
                          task_names=dict(zip(task_ids, cfg.env.tasks, strict=True)))
    try:
        collector.step(state, mode)  # compiles the policy
        episodes = 0
        t0 = time.perf_counter()
        for _ in range(steps):
            episodes += len(collector.step(state, mode))
        wall = time.perf_counter() - t0
        if collector.faults:
            raise SystemExit(f"the envs failed during the benchmark: {collector.faults[-1]['reason']}")
        return wall, episodes
    finally:
        collector.close()


def _timed(fn, key: str, acc: dict[str, float]):
    """`fn`, adding its wall seconds to `acc[key]`."""
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc[key] += time.perf_counter() - t0
    return wrapper


def time_loop(cfg, overlap: bool, updates: int, warmup: int, mode: str) -> tuple[dict[str, Any], Any]:
    """`updates` train steps of pre-training's loop (after `warmup` untimed ones), and where the time went;
    also returns the run (its driver and replay, in memory) for `time_bench`. `overlap` sets the loop's
    `train.overlap_collect` behaviour on the same config (so both runs share their compiled programs).

    The run's temporary folder (metrics, an unused checkpoint folder) is removed once the run's logger,
    envs and checkpointer are closed, on an error too. Env stepping is timed by the collector's own
    `env_s` counter; the public callbacks of the run (collector step and prefetch, train, log, replay
    sampling, context write-back) by wrapping them on this run's instances."""
    import contextlib
    import shutil
    import tempfile

    import jax

    from muse_jax.checkpoint import Checkpointer
    from muse_jax.loops import pretrain as pre

    cfg = cfg.replace({"train.env_steps": 10**9, "train.save_every": 10**9})
    acc = dict.fromkeys(("collect", "prefetch", "train", "flush", "sample", "log"), 0.0)
    with contextlib.ExitStack() as cleanup:  # closed in reverse: logger, envs, checkpointer, then the folder
        logdir = Path(tempfile.mkdtemp(prefix="collect_overhead_loop_"))
        cleanup.callback(shutil.rmtree, logdir, ignore_errors=True)
        ckpt = Checkpointer(logdir / "checkpoints", 1)
        cleanup.callback(ckpt.close)
        run = pre.PretrainingRun(cfg, logdir, ckpt, 10**9, echo=lambda s: None, desc=f"overlap={overlap}")
        col = run.collector
        cleanup.callback(col.close)
        cleanup.callback(run.logger.close)
        col.step, col.prefetch = _timed(col.step, "collect", acc), _timed(col.prefetch, "prefetch", acc)
        run.train, run.log = _timed(run.train, "train", acc), _timed(run.log, "log", acc)
        run.driver.flush_context = _timed(run.driver.flush_context, "flush", acc)
        run.replay.sample = _timed(run.replay.sample, "sample", acc)
        loop = run.loop(mode)
        loop.overlap = overlap
        while run.driver.train_steps < warmup:
            loop.dispatch(loop.collect())
        jax.block_until_ready(run.driver.state)
        acc.update(dict.fromkeys(acc, 0.0))
        u0, e0, env0 = run.driver.train_steps, loop.env_step, col.env_s
        t0, c0 = time.perf_counter(), time.process_time()
        while run.driver.train_steps < u0 + updates:
            loop.dispatch(loop.collect())
        t1 = time.perf_counter()
        jax.block_until_ready(run.driver.state)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        env = col.env_s - env0
    n = run.driver.train_steps - u0
    per = {"env": env, "collect_rest": acc["collect"] - env, "prefetch": acc["prefetch"],
           "train_callback": acc["train"], "train_flush_context": acc["flush"], "train_sample": acc["sample"],
           "log": acc["log"], "final_wait": wall - (t1 - t0)}
    per["other"] = wall - sum(v for k, v in per.items() if k not in ("train_flush_context", "train_sample"))
    return {"overlap_collect": overlap, "updates": n, "env_steps": loop.env_step - e0, "loop_s": wall,
            "loop_cpu_s": cpu, "loop_updates_per_s": n / wall,
            "per_update_s": {k: v / n for k, v in per.items()}}, run


def time_bench(run, updates: int) -> dict[str, Any]:
    """The run's compiled train step on one batch of its replay, timed as `wm_throughput.py` does (each call
    waited for; median), and back to back without waiting (`bench_pipelined_updates_per_s`)."""
    import statistics

    import jax

    from benchmarks.wm_throughput import time_calls

    driver = run.driver
    batch, _ = driver.replay_batches(run.replay).sample()
    state, fn = driver.state, driver.step_fn
    key = jax.random.key(0)

    def once():
        nonlocal state
        state, metrics = fn(state, batch, key)
        return metrics

    jax.block_until_ready(once())
    times = time_calls(once, updates)
    t0 = time.perf_counter()
    for _ in range(updates):
        once()
    jax.block_until_ready(state)
    return {"bench_updates_per_s": 1.0 / statistics.median(times), "bench_step_median_s": statistics.median(times),
            "bench_pipelined_updates_per_s": updates / (time.perf_counter() - t0)}


def main_loop(args: argparse.Namespace, cfg) -> dict[str, Any]:
    """`--loop`: both runs (configured overlap first, then the other), each with its bench; then the summary."""
    import jax

    load_before = load_average()
    base = {"benchmark": "collect_overhead_loop", "config": args.config, "sets": list(args.set),
            "num_envs": cfg.env.num_envs, "vector": cfg.env.vector, "size": cfg.model.size,
            "batch": cfg.replay.batch_size, "seq": cfg.replay.seq_len, "train_ratio": cfg.train.train_ratio,
            "mode": args.mode, "cpu_cores": os.cpu_count(), "backend": jax.default_backend(),
            "device": jax.devices()[0].device_kind, "host": platform.node(),
            "date": time.strftime("%Y-%m-%d", time.gmtime())}
    rows = {}
    for overlap in (cfg.train.overlap_collect, not cfg.train.overlap_collect):
        load0 = load_average()
        rec, run = time_loop(cfg, overlap, args.updates, args.warmup_updates, args.mode)
        rec.update(time_bench(run, max(args.updates // 2, 5)))
        rec["ratio"] = rec["loop_updates_per_s"] / rec["bench_updates_per_s"]
        rec.update(loadavg_1m=load0, loadavg_1m_end=load_average())
        rows[overlap] = rec
        print(json.dumps({**base, **rec}), flush=True)
        print(f"overlap_collect={overlap}: loop {rec['loop_updates_per_s']:.2f} updates/s, bench "
              f"{rec['bench_updates_per_s']:.2f} updates/s, ratio {rec['ratio']:.3f}", file=sys.stderr)
    summary = {**base, "summary": True, "updates": args.updates, "loadavg_1m": load_before,
               "loadavg_1m_end": load_average()}
    for overlap, rec in rows.items():
        tag = "overlap" if overlap else "serial"
        summary.update({f"{tag}_loop_updates_per_s": rec["loop_updates_per_s"],
                        f"{tag}_bench_updates_per_s": rec["bench_updates_per_s"], f"{tag}_ratio": rec["ratio"]})
    summary.update(loop_updates_per_s=rows[True]["loop_updates_per_s"],
                   bench_updates_per_s=rows[True]["bench_updates_per_s"], ratio=rows[True]["ratio"],
                   overlap_speedup=rows[True]["loop_updates_per_s"] / rows[False]["loop_updates_per_s"])
    return emit_record(summary, args.out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from muse_common.arg_parser import ArgumentParser, path_arg

    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", default="quickstart", help="a muse-wm config name or YAML file (envs, model)")
    p.add_argument("--envs", type=int, default=0, help="vector env size (0: the config's env.num_envs)")
    p.add_argument("--steps", type=int, default=200, help="timed vector steps on each side")
    p.add_argument("--mode", default="dreamer", choices=MODES, help="policy_step mode the collector acts with")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, e.g. --set env.vector=sync --set model.size=size1m")
    p.add_argument("--loop", action="store_true",
                   help="time a learning run (pre-training's loop, with and without train.overlap_collect) "
                        "against its train step alone")
    p.add_argument("--updates", type=int, default=20, help="--loop: timed train steps per run")
    p.add_argument("--warmup-updates", type=int, default=3,
                   help="--loop: untimed train steps first (after the prefill; the first compiles)")
    p.add_argument("--out", type=path_arg, help="also append the JSON record to this JSONL file")
    args = p.parse_args(argv)
    if args.updates < 1 or args.warmup_updates < 1:
        p.error("--updates and --warmup-updates must be >= 1")
    if args.steps < 1:
        p.error("--steps must be >= 1")
    if args.envs < 0:
        p.error("--envs must be >= 0")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    overrides = list(args.set) + ([f"env.num_envs={args.envs}"] if args.envs else [])
    try:
        cfg = load_config(args.config, overrides)
    except (ConfigError, FileNotFoundError) as e:
        raise SystemExit(f"collect_overhead: {e}") from None
    if args.loop:
        return main_loop(args, cfg)
    from muse_jax.envs.metaworld import make_vector_env

    task_ids = list(range(1, len(cfg.env.tasks) + 1))
    make_venv = lambda s: make_vector_env(cfg.env.tasks, task_ids, cfg.env, s, round_robin=True)  # noqa: E731
    n = cfg.env.num_envs
    load_before = load_average()
    raw_s = time_raw(make_venv, args.steps, args.seed)
    coll_s, episodes = time_collector(cfg, make_venv, args.steps, args.seed, args.mode)
    raw_sps, coll_sps = n * args.steps / raw_s, n * args.steps / coll_s
    import jax

    record = {"benchmark": "collect_overhead", "config": args.config, "num_envs": n, "steps": args.steps,
              "env_steps": n * args.steps, "mode": args.mode, "vector": cfg.env.vector, "image": cfg.env.image,
              "size": cfg.model.size, "raw_env_steps_per_s": raw_sps, "collector_env_steps_per_s": coll_sps,
              "overhead": raw_sps / coll_sps - 1.0, "raw_s": raw_s, "collector_s": coll_s,
              "episodes_finished": episodes, "loadavg_1m": load_before, "loadavg_1m_end": load_average(),
              "cpu_cores": os.cpu_count(), "backend": jax.default_backend(), "host": platform.node()}
    print(f"{n} envs x {args.steps} steps: raw {raw_sps:.0f} env steps/s, collector {coll_sps:.0f} env steps/s, "
          f"overhead {100 * record['overhead']:.1f}%", file=sys.stderr)
    return emit_record(record, args.out)


if __name__ == "__main__":
    main()
