"""Does Algorithm 1 change what the agent does, and does that change succeed more often?

Why: MUSE §3.1.2 credits self-regulation (Algorithm 1, gradient ascent on the model state towards
predicted success) with solving novel tasks. This script runs the SAME pre-trained weights closed loop,
without any training, on novel tasks whose outcomes are mixed, once per arm:
- `plain`: the actor's sample (`regulation.strategy: none`) and `mean`: its mean action, no exploration noise
  (`regulation.strategy: mean`): the two controls; a gain over `plain` that `mean` also has is de-noising,
  not competence steering, so every arm is also tested against `mean`;
- `rollouts` (option a) and `mcts` (option b) at the checkpoint's settings;
- Algorithm 1 with beta in {0, 0.02, 0.1, 0.5} and a normalised step (beta * g / |g|, `--norm-beta`), each
  in the two readings of the loop (`regulation.rollout`: "forward" = rolled H model steps ahead as
  written, "in_place" = ascent on the current state only).
Arms are paired: episode i of every arm runs the same env seed (same object and goal positions) with
the same JAX key stream, so a McNemar exact test on the discordant pairs compares two arms. Each arm
reports successes with Clopper-Pearson 95% intervals, the paired test against `plain` and against
beta = 0 of the same reading (what the gradient itself adds), and the mean per-step effect sizes that
`policy_step` reports (state/action change against the plain actor, and against the same loop with
beta = 0). Other `regulation.*` fields stay at the checkpoint's config unless `--set` changes them.

    python benchmarks/regulation_effect.py --checkpoint runs/quickstart/muse --episodes 24

The last line printed is one JSON object (benchmarks.report.emit_record).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from scipy import stats

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record  # noqa: E402
from muse_jax import agent as A  # noqa: E402
from muse_jax.config import Config  # noqa: E402
from muse_jax.envs.metaworld import make_vector_env  # noqa: E402
from muse_jax.loops.collect import AGENT_OBS_KEYS, REGULATION_EFFECT_KEYS  # noqa: E402
from muse_jax.loops.restore import abstract_learner, obs_spec, restore_learner  # noqa: E402

BETAS = (0.0, 0.02, 0.1, 0.5)


def arms(norm_beta: float) -> dict[str, dict[str, Any]]:
    """Arm name -> regulation overrides."""
    out: dict[str, dict[str, Any]] = {"plain": {"regulation.strategy": "none"},
                                      "mean": {"regulation.strategy": "mean"},
                                      "rollouts": {"regulation.strategy": "rollouts"},
                                      "mcts": {"regulation.strategy": "mcts"}}
    for rollout in ("forward", "in_place"):
        for beta in BETAS:
            out[f"{rollout}/beta={beta}"] = {"regulation.strategy": "gradient", "regulation.rollout": rollout,
                                             "regulation.beta": beta, "regulation.step": "fixed"}
        out[f"{rollout}/normalized={norm_beta}"] = {"regulation.strategy": "gradient", "regulation.rollout": rollout,
                                                    "regulation.beta": norm_beta, "regulation.step": "normalized"}
    return out


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """Exact binomial 95% interval of k successes in n."""
    if n == 0:
        return (float("nan"), float("nan"))
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return float(ci.low), float(ci.high)


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """Exact McNemar test of paired successes: discordant pairs (a only, b only) and the two-sided p."""
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    n = only_a + only_b
    p = float(stats.binomtest(only_a, n, 0.5).pvalue) if n else 1.0
    return {"only_this": only_a, "only_other": only_b, "p": p}


def run_arm(cfg: Config, state: Any, spec: Any, tasks: list[str], episodes: int, seed: int) -> dict[str, Any]:
    """One episode per env, all tasks x episodes side by side; successes [n] and per-step effect means."""
    graphdef = abstract_learner(cfg, spec, cfg.train.seed).graphdef  # the arm's static config
    policy = A.make_policy_step(graphdef, "muse")
    n = len(tasks) * episodes
    venv = make_vector_env(tasks, [0] * len(tasks), cfg.env, seed, n)
    try:
        obs, _ = venv.reset(seed=seed)
        carry = A.initial_carry(graphdef, state, n)
        success = np.zeros(n, bool)
        done = np.zeros(n, bool)
        sums: dict[str, float] = {}  # only what the policy reports (the plain actor has no regulation keys)
        count, t = 0, 0
        key = jax.random.key(seed)
        while not done.all():
            agent_obs = {k: obs[k] for k in AGENT_OBS_KEYS if k in obs}
            action, carry, info = policy(state, carry, agent_obs, jax.random.fold_in(key, t))
            for k in (*REGULATION_EFFECT_KEYS, "competence", "regulated_competence"):
                if k in info:
                    sums[k] = sums.get(k, 0.0) + float(np.asarray(info[k])[~done].sum())
            count += int((~done).sum())
            obs, _, term, trunc, _ = venv.step(np.asarray(action))
            success |= np.asarray(obs["success"], bool) & ~done
            done |= np.asarray(term, bool) | np.asarray(trunc, bool)
            t += 1
    finally:
        venv.close()
    return {"success": success, "steps": t, "means": {k: v / max(count, 1) for k, v in sums.items()}}


def main() -> None:
    from muse_common.arg_parser import ArgumentParser, path_text_arg

    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="a `muse-wm pretrain --agent muse` logdir")
    p.add_argument("--tasks", nargs="*", default=None, help="novel tasks (default: the config's novel_tasks)")
    p.add_argument("--episodes", type=int, default=24, help="paired episodes per task and arm")
    p.add_argument("--norm-beta", type=float, default=0.5, help="step length of the normalised-gradient arm")
    p.add_argument("--arms", nargs="*", default=None, help="subset of arm names (default: all)")
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--set", nargs="*", default=[], help="extra config overrides key=value (YAML values)")
    p.add_argument("--out", default=None, type=path_text_arg, help="append the JSON record to this file")
    args = p.parse_args()

    from muse_common.overrides import parse_key_values

    extra = parse_key_values(args.set, "--set", structured=True)  # bounded YAML values, one line on a bad pair
    base = restore_learner(args.checkpoint, agent="muse", overrides=extra)
    tasks = list(args.tasks or base.cfg.env.novel_tasks)
    spec = obs_spec(base.cfg)
    table = arms(args.norm_beta)
    names = args.arms or list(table)
    results: dict[str, dict[str, Any]] = {}
    t0 = time.time()
    for name in names:
        cfg = base.cfg.replace({**table[name], "env.vector": "sync", **extra})
        results[name] = run_arm(cfg, base.learner.state, spec, tasks, args.episodes, args.seed)
        s = results[name]["success"]
        progress = json.dumps({"success": s.astype(int).tolist(), **results[name]["means"]})  # enough for a table
        print(f"{name}: {int(s.sum())}/{s.size} ({time.time() - t0:.0f} s) {progress}", file=sys.stderr, flush=True)
    rows = {}
    for name in names:
        s = results[name]["success"]
        per_task = {t: int(s[i::len(tasks)].sum()) for i, t in enumerate(tasks)}
        row: dict[str, Any] = {"successes": int(s.sum()), "episodes": int(s.size),
                               "success_rate": float(s.mean()), "ci95": clopper_pearson(int(s.sum()), s.size),
                               "per_task": per_task, **{k: round(v, 5) for k, v in results[name]["means"].items()}}
        if name != "plain" and "plain" in results:
            row["vs_plain"] = mcnemar_exact(s, results["plain"]["success"])
        if name != "mean" and "mean" in results:  # the noise-free actor: the control a strategy must beat
            row["vs_mean"] = mcnemar_exact(s, results["mean"]["success"])
        zero = f"{name.split('/')[0]}/beta=0.0"
        if "/" in name and name != zero and zero in results:
            row["vs_beta0"] = mcnemar_exact(s, results[zero]["success"])
        rows[name] = row
    import os

    emit_record({"benchmark": "regulation_effect", "checkpoint": str(args.checkpoint), "tasks": tasks,
                 "machine": f"{jax.devices()[0].device_kind} ({jax.default_backend()}, {os.cpu_count()} CPU cores)",
                 "episodes_per_task": args.episodes, "seed": args.seed, "horizon": base.cfg.regulation.horizon,
                 "z_source": base.cfg.replace(extra).regulation.z_source,
                 "carry_regulated_state": base.cfg.regulation.carry_regulated_state,
                 "agent_steps_per_episode": int(next(iter(results.values()))["steps"]) if results else None,
                 "seconds": round(time.time() - t0, 1), "arms": rows}, args.out)


if __name__ == "__main__":
    main()
