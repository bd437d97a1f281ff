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
    return out
