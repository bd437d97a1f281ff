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

The last line printed is always one JSON object.
"""

from __future__ import annotations

import argparse
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
    p.add_argument("--out", type=path_arg, help="also append the JSON record to this JSONL file")
    args = p.parse_args(argv)
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
