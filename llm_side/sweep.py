"""The tau sweep of the RefRea paper's Figure 3: run RefRea at several similarity thresholds on the
same tasks and plot the mean score (left) and the mean reasoning/reference action similarity with its
spread (right) against tau.

Each tau is an ordinary resumable run in OUT/tau_<value>/ (run.json, episodes.jsonl, summary.json: the
RunSpec of the command line with `tau` added to RefRea's options, run by run_spec.execute), so a killed
sweep picks up where it stopped; OUT/sweep.json and OUT/sweep.png are rewritten atomically after every
tau. `muse-llm sweep-tau --env scienceworld --tasks 8-2,9-3 --out runs/tau`.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llm_side.harness.records import load_records
from llm_side.run_settings import add_task_flags, load_settings
from llm_side.run_spec import (
    RUN_KEYS,
    RunSpec,
    UsageError,
    build_spec,
    execute,
    make_env,
    parse_options,
    run_command,
    select_tasks,
)
from muse_common.arg_parser import ArgumentParser, path_text_arg
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


def sweep_tau(env: Any, spec: RunSpec, *, taus: Sequence[float], out_dir: str | Path, progress: bool = True,
              make_agent: Callable[[float], Any] | None = None) -> list[dict[str, Any]]:
    """Run `spec` with each tau (RefRea's `tau` option) on the one `env`, each into OUT/tau_<value>/, and
    return the Figure 3 points. `make_agent(tau)`: a ready agent instead of the spec's (tests)."""
    if not taus:
        raise ValueError("no tau values to sweep; pass e.g. --taus 0,0.2,0.4,0.6,0.8,0.95")
    bad = [t for t in taus if not 0.0 <= t <= 1.0]
    if bad:
        raise ValueError(f"tau values must lie in [0, 1]; got {bad}.")
    out_dir = Path(out_dir)
    task_ids = select_tasks(env, spec.split, spec.tasks, spec.limit)
    points = []
    for tau in taus:
        run_dir = tau_dir(out_dir, tau)
        execute(spec.with_agent_opt(tau=tau), run_dir, env=env, agent=make_agent(tau) if make_agent else None,
                progress=progress)
        wanted = set(task_ids)
        recs = [r for r in load_records(run_dir) if str(r["task"]) in wanted and int(r["episode"]) < spec.episodes]
        points.append(summarize_tau(tau, recs))
        atomic_write_json(out_dir / "sweep.json", {"env": spec.env, "tasks": task_ids, "points": points})
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


SWEEP_DEFAULTS = {"env": "scienceworld", "agent": "refrea", "tasks": "8-2,9-3"}  # the paper's Figure 3 setting


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="muse-llm sweep-tau", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="YAML of run settings (as `muse-llm run --config`; agent: refrea)")
    add_task_flags(p, env_help="default scienceworld, with --tasks 8-2,9-3 (the paper's) unless --tasks or --split")
    p.add_argument("--taus", default=",".join(f"{t:g}" for t in PAPER_TAUS))
    p.add_argument("--episodes", type=int, help="episodes per task; default 1")
    p.add_argument("--out", required=True, type=path_text_arg)
    p.add_argument("--env-opt", action="append", metavar="K=V")
    p.add_argument("--agent-opt", action="append", metavar="K=V", help="RefRea option, repeatable (not tau)")
    p.add_argument("--no-progress", action="store_true")
    return p


def spec_of(args: argparse.Namespace) -> RunSpec:
    """The RunSpec the sweep runs at every tau: RefRea, the flags over `--config`, the paper's tasks."""
    cfg = load_settings(args.config, RUN_KEYS)
    if cfg.get("agent", "refrea") != "refrea":
        raise UsageError(f"sweep-tau sweeps RefRea's tau; {args.config} names agent '{cfg['agent']}'")
    opts = {**(cfg.get("agent_opt") or {}), **parse_options(args.agent_opt, "--agent-opt")}
    if "tau" in opts:
        raise UsageError("--agent-opt tau=... clashes with --taus; drop it.")
    return build_spec(cfg, {k: getattr(args, k, None) for k in RUN_KEYS}, SWEEP_DEFAULTS)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command("sweep-tau", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    taus = parse_taus(args.taus)
    spec = spec_of(args)
    env = make_env(spec.env, spec.env_opt)
    try:
        points = sweep_tau(env, spec, taus=taus, out_dir=args.out, progress=not args.no_progress)
    finally:
        env.close()
    for p in points:
        print(f"tau={p['tau']:g}: score {p['mean_score']}, similarity {p['mean_similarity']}")
    print(f"sweep written to {Path(args.out) / 'sweep.json'} and sweep.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
