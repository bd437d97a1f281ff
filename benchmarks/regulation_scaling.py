"""Self-regulation decision latency against the number of environments, for each strategy.

Why: MUSE regulates every acting step (§3.1.2), so a decision must stay cheap as environments are
added. Each strategy (`gradient` = Algorithm 1, `rollouts`, `mcts`; muse_jax/regulation/) is written
for one environment and vmapped over the batch; this script times the jitted `policy_step` in "muse"
mode exactly as the collector calls it (filter the observation, then regulate) for 1, 4, 16 and 64
environments, and reports how much 16 environments cost against one (the goal is at most 3x).

    python benchmarks/regulation_scaling.py --size size1m --envs 1 4 16 64 --steps 20

The last line printed is always one JSON object: per strategy, `latency_s` {envs: median seconds per
decision call for all envs}, `decisions_per_s` {envs: envs / latency}, `compile_s` {envs: ...} and
`ratio_16_vs_1` (present when 1 and 16 are both measured).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jax

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record  # noqa: E402
from benchmarks.wm_throughput import build_config, load_average, synthetic_obs, time_calls  # noqa: E402
from muse_jax.agent import ObsSpec, create_learner, initial_carry, make_policy_step  # noqa: E402
from muse_jax.regulation import STRATEGIES  # noqa: E402


def measure_strategy(strategy: str, args: argparse.Namespace) -> dict[str, Any]:
    """Compile and time one strategy's decision for every env count in `args.envs`."""
    overrides = [f"regulation.strategy={strategy}", *args.set]
    cfg = build_config(args.size, args.obs_dim, False, 64, 16, 64, overrides)
    spec = ObsSpec.from_config(cfg, proprio_dim=args.obs_dim, act_dim=args.act_dim)
    learner = create_learner(cfg, spec, seed=0)
    graphdef, state = learner.graphdef, learner.state
    key = jax.random.key(0)
    latency, compile_s = {}, {}
    for n in args.envs:
        obs = jax.device_put(synthetic_obs(spec, n))
        carry = initial_carry(graphdef, state, n)
        t0 = time.perf_counter()
        step = make_policy_step(graphdef, "muse").lower(state, carry, obs, key).compile()
        compile_s[n] = time.perf_counter() - t0
        jax.block_until_ready(step(state, carry, obs, key))  # warm-up
        latency[n] = statistics.median(time_calls(lambda step=step, obs=obs, carry=carry: step(state, carry, obs, key),
                                                  args.steps))
    out: dict[str, Any] = {
        "latency_s": {str(n): latency[n] for n in args.envs},
        "decisions_per_s": {str(n): n / latency[n] for n in args.envs},
        "compile_s": {str(n): compile_s[n] for n in args.envs},
        "horizon": cfg.regulation.horizon,
    }
    if 1 in latency and 16 in latency:
        out["ratio_16_vs_1"] = latency[16] / latency[1]
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from muse_common.arg_parser import ArgumentParser, path_arg

    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--size", default="size1m", help="model size preset (see muse_jax/config.py MODEL_SIZES)")
    p.add_argument("--envs", type=int, nargs="+", default=[1, 4, 16, 64], help="environment counts to time")
    p.add_argument("--strategies", nargs="+", default=sorted(STRATEGIES), choices=sorted(STRATEGIES),
                   help="self-regulation strategies to time")
    p.add_argument("--steps", type=int, default=20, help="timed decisions per env count (median reported)")
    p.add_argument("--obs-dim", type=int, default=24, help="vector observation size D")
    p.add_argument("--act-dim", type=int, default=6, help="continuous action size A")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, e.g. --set regulation.horizon=5")
    p.add_argument("--out", type=path_arg, help="also append the JSON record to this JSONL file")
    args = p.parse_args(argv)
    for name in ("steps", "obs_dim", "act_dim"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if min(args.envs) < 1:
        p.error(f"--envs must all be >= 1, got {args.envs}")
    args.envs = sorted(set(args.envs))
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    load_before = load_average()
    per_strategy = {}
    for s in args.strategies:
        per_strategy[s] = measure_strategy(s, args)
        ratio = per_strategy[s].get("ratio_16_vs_1")
        lat = ", ".join(f"{n}: {1e3 * v:.2f} ms" for n, v in per_strategy[s]["latency_s"].items())
        print(f"{s}: {lat}" + (f"; 16 envs / 1 env = {ratio:.2f}x" if ratio is not None else ""), file=sys.stderr)
    record = {"benchmark": "regulation_scaling", "size": args.size, "envs": args.envs, "steps": args.steps,
              "obs_dim": args.obs_dim, "act_dim": args.act_dim, "strategies": per_strategy,
              "loadavg_1m": load_before, "loadavg_1m_end": load_average(), "cpu_cores": os.cpu_count(),
              "backend": jax.default_backend(), "device": jax.devices()[0].device_kind, "jax": jax.__version__,
              "host": platform.node()}
    return emit_record(record, args.out)


if __name__ == "__main__":
    main()
