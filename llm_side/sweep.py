"""The tau sweep of the RefRea paper's Figure 3: run RefRea at several similarity thresholds on the
same tasks and plot the mean score (left) and the mean reasoning/reference action similarity with its
spread (right) against tau.

Each tau is an ordinary resumable run in OUT/tau_<value>/ (episodes.jsonl + summary.json through the
shared runner), so a killed sweep picks up where it stopped; OUT/sweep.json and OUT/sweep.png are
rewritten atomically after every tau. Run it as `python -m llm_side.sweep --env scienceworld
--tasks 8-2,9-3 --out runs/tau` (proposed CLI: `muse-llm sweep-tau` with the same flags).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llm_side.harness.records import load_records
from muse_common.files import atomic_write_json

PAPER_TAUS = (0.0, 0.2, 0.4, 0.6, 0.8, 0.95)


def tau_dir(out_dir: str | Path, tau: float) -> Path:
    return Path(out_dir) / f"tau_{tau:g}"


def summarize_tau(tau: float, records: list[dict[str, Any]]) -> dict[str, Any]:
    """One point of Figure 3 from a tau run's records: mean score (0-100; success x 100 where the env
    has no score) and the mean / std of the per-step action similarities."""
    scores = [float(r["score"]) if r.get("score") is not None else 100.0 * bool(r.get("success"))
              for r in records]
    sims = [float(s) for r in records for s in (r.get("similarities") or []) if s is not None]
    return {
        "tau": tau,
        "episodes": len(records),
        "mean_score": statistics.fmean(scores) if scores else None,
        "success_rate": statistics.fmean(bool(r.get("success")) for r in records) if records else None,
        "mean_similarity": statistics.fmean(sims) if sims else None,
        "std_similarity": statistics.pstdev(sims) if len(sims) > 1 else 0.0 if sims else None,
        "mean_steps": statistics.fmean(int(r.get("steps") or 0) for r in records) if records else None,
    }


def plot_sweep(points: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Figure 3: score vs tau (left), similarity +- std vs tau (right). Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    pts = [p for p in points if p["mean_score"] is not None]
    left.plot([p["tau"] for p in pts], [p["mean_score"] for p in pts], "o-")
    left.set(xlabel="similarity threshold τ", ylabel="mean score", title="Task performance")
    sp = [p for p in points if p["mean_similarity"] is not None]
    right.errorbar([p["tau"] for p in sp], [p["mean_similarity"] for p in sp],
                   yerr=[p["std_similarity"] for p in sp], fmt="o-", capsize=3)
    right.set(xlabel="similarity threshold τ", ylabel="action similarity", title="Action consistency")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path


def sweep_tau(env: Any, make_agent: Callable[[float], Any], *, env_name: str, taus: Sequence[float],
              task_ids: Sequence[str], episodes: int, max_steps: int | None, out_dir: str | Path,
              seed: int = 0, progress: bool = True) -> list[dict[str, Any]]:
    """Run `make_agent(tau)` for each tau through the shared runner; return the Figure 3 points."""
    from llm_side.harness.runner import run_eval

    if not taus:
        raise ValueError("no tau values to sweep; pass e.g. --taus 0,0.2,0.4,0.6,0.8,0.95")
    bad = [t for t in taus if not 0.0 <= t <= 1.0]
    if bad:
        raise ValueError(f"tau values must lie in [0, 1]; got {bad}.")
    out_dir = Path(out_dir)
    points = []
    for tau in taus:
        run_dir = tau_dir(out_dir, tau)
        run_eval(env, make_agent(tau), env_name=env_name, agent_name="refrea", task_ids=task_ids,
                 episodes=episodes, max_steps=max_steps, out_dir=run_dir, seed=seed, progress=progress)
        wanted = {str(t) for t in task_ids}
        recs = [r for r in load_records(run_dir) if str(r["task"]) in wanted and int(r["episode"]) < episodes]
        points.append(summarize_tau(tau, recs))
        atomic_write_json(out_dir / "sweep.json", {"env": env_name, "tasks": list(task_ids), "points": points})
        plot_sweep(points, out_dir / "sweep.png")
    return points


def parse_taus(text: str) -> list[float]:
    try:
        taus = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--taus expects comma-separated numbers such as 0,0.4,0.8; got '{text}'.") from None
    if not taus or not all(0.0 <= t <= 1.0 for t in taus):
        raise ValueError(f"--taus needs values in [0, 1], e.g. 0,0.2,0.4,0.6,0.8,0.95; got '{text}'.")
    return taus


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="muse-llm sweep-tau", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="scienceworld")
    p.add_argument("--tasks", default="8-2,9-3", help="comma-separated task ids (paper: 8-2,9-3)")
    p.add_argument("--taus", default=",".join(f"{t:g}" for t in PAPER_TAUS))
    p.add_argument("--model", default=None, help="LLM spec (default: the backends' default)")
    p.add_argument("--episodes", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--env-opt", action="append", metavar="K=V", default=[])
    p.add_argument("--agent-opt", action="append", metavar="K=V", default=[])
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except ValueError as exc:  # bad input (options, taus, tasks): one line naming the fix, exit status 2
        print(f"muse-llm sweep-tau: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from llm_side import registry
    from llm_side.backends import DEFAULT_MODEL, LazyLLM
    from muse_common.overrides import parse_key_values

    taus = parse_taus(args.taus)
    env_opts = parse_key_values(args.env_opt, "--env-opt", structured=False)  # OverrideError is a ValueError
    agent_opts = parse_key_values(args.agent_opt, "--agent-opt", structured=False)
    if "tau" in agent_opts:
        raise ValueError("--agent-opt tau=... clashes with --taus; drop it.")
    factory = registry.agent_factory("refrea")
    llm = LazyLLM(args.model or DEFAULT_MODEL)
    env = registry.env_factory(args.env)(**env_opts)
    try:
        specs = [t.strip() for t in args.tasks.split(",") if t.strip()]
        expand = getattr(env, "expand_task_ids", None)
        task_ids = expand(specs) if callable(expand) else specs
        points = sweep_tau(env, lambda tau: factory(args.env, llm, {**agent_opts, "tau": tau}), env_name=args.env,
                           taus=taus, task_ids=task_ids, episodes=args.episodes, max_steps=args.max_steps,
                           out_dir=args.out, seed=args.seed, progress=not args.no_progress)
    finally:
        env.close()
    for p in points:
        print(f"tau={p['tau']:g}: score {p['mean_score']}, similarity {p['mean_similarity']}")
    print(f"sweep written to {Path(args.out) / 'sweep.json'} and sweep.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
