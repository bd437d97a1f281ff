"""summary.json: a run's headline figures, computed from its records (a pure function)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from muse_common import metrics

TIME_PENALTY = 100  # MUSE-LLM tables: a failed episode counts as 100 steps


def _mean(values: list[float]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    successes = [bool(r["success"]) for r in records]
    steps = [int(r["steps"]) for r in records]
    return {
        "episodes": len(records),
        "successes": int(sum(successes)),
        "success_rate": metrics.success_rate(successes) if records else None,
        "mean_steps": _mean(steps),
        "mean_score": _mean([r.get("score") for r in records]),
        "time_to_success": metrics.mean_time_to_success(steps, successes, penalty=TIME_PENALTY) if records else None,
    }


def similarity_distribution(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """RefRea's reasoning/reference action similarities over every step of the run (paper 003 Figure 3,
    right): count, mean, quantiles, and the share of steps at 1.0 (identical actions: the check cannot
    trigger) and below the run's tau (the refinement triggered). None when no record has similarities."""
    sims = [float(s) for r in records for s in (r.get("similarities") or []) if s is not None]
    if not sims:
        return None
    taus = {r.get("tau") for r in records if r.get("tau") is not None}
    tau = float(next(iter(taus))) if len(taus) == 1 else None
    q = np.quantile(sims, [0.0, 0.1, 0.5, 0.9, 1.0])
    return {"steps": len(sims), "mean": float(np.mean(sims)), "std": float(np.std(sims)),
            "min": float(q[0]), "p10": float(q[1]), "median": float(q[2]), "p90": float(q[3]), "max": float(q[4]),
            "share_identical": float(np.mean([s >= 1.0 - 1e-6 for s in sims])),
            "tau": tau, "share_below_tau": None if tau is None else float(np.mean([s < tau for s in sims]))}


def summarize(records: list[dict[str, Any]], *, expected: int | None = None) -> dict[str, Any]:
    """Overall and per-task success rate, mean steps, mean score and counts. `expected` is how many
    episodes the run asked for, so a partial summary says how far it got."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_task[str(r["task"])].append(r)
    out = _figures(records)
    out.update(
        {
            "env": records[0]["env"] if records else None,
            "agent": records[0]["agent"] if records else None,
            "tasks": len(by_task),
            "failed_with_reason": sum(1 for r in records if r.get("reason")),
            "expected_episodes": expected,
            "complete": expected is not None and len(records) >= expected,
            "per_task": {t: _figures(rs) for t, rs in sorted(by_task.items())},
        }
    )
    sims = similarity_distribution(records)
    if sims is not None:
        out["similarity"] = sims
    return out
