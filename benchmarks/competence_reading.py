"""The two readings of the competence labels (`model.competence_reading`) side by side, from run folders.

Why: MUSE §3.1.1 can be read as the steps LEFT to the first success (`steps_left`, the default) or as the
success time from the episode START (`from_start`); psi_1 is the same, psi_2..psi_N are not. This reads one
`muse-wm pretrain` + `muse-wm adapt` run per reading and writes one JSON file with, per reading: the last
pre-training window's `sa/*` (metrics.jsonl), the adaptation results.json figures, the adaptation
quantile accuracy rescored against BOTH readings' true quantiles (from adapt/episodes.jsonl), so a head
trained on one reading is also scored against the other, and the step shares those figures rest on
(steps of solved episodes, steps predicted class 0 = failure). Wall times come from `--times NAME=FILE`, lines
`pretrain rc=R wall_s=S` and `adapt rc=R wall_s=S` (the runner writes them).

    python -m benchmarks.competence_reading --run steps_left=/tmp/reading/steps_left \\
        --run from_start=/tmp/reading/from_start --times steps_left=/tmp/reading/steps_left.time \\
        --times from_start=/tmp/reading/from_start.time --machine "2 CPU cores, shared" \\
        --out docs/competence_reading_quickstart.json
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.table1 import adapt_results  # noqa: E402 - after the path fix above
from muse_common.files import atomic_write_text, read_jsonl  # noqa: E402
from muse_common.records import ADAPT_EPISODE, read_records  # noqa: E402
from muse_jax import evaluate  # noqa: E402
from muse_jax.config import load_config  # noqa: E402

PRETRAIN_KEYS = ("sa/auroc", "sa/accuracy", "sa/quantile_accuracy", "sa/episodes", "sa/successes",
                 "sa/outcome_classes")
ADAPT_KEYS = ("sa_auroc", "sa_accuracy", "sa_quantile_accuracy", "success_rate", "episodes",
              "mean_time_to_success", "competence_reading")


def last_window(metrics: Path) -> dict[str, Any]:
    """The last metrics.jsonl row with `sa/auroc`: the final pre-training window's self-awareness (a line that
    is not a record is skipped with a warning naming it, `read_jsonl`)."""
    rows = list(read_jsonl(metrics, ("sa/auroc",)))
    if not rows:
        raise ValueError(f"{metrics}: no row with sa/* figures (a pre-training run logs them per window).")
    r = rows[-1]
    return {"step": r.get("step"), "env_steps": r.get("env_steps"), **{k: r.get(k) for k in PRETRAIN_KEYS}}


def rescored(episodes: Sequence[dict[str, Any]], max_steps: int, n_quantiles: int) -> dict[str, float | None]:
    """Per-step quantile accuracy of the recorded predictions against each reading's true quantiles."""
    out: dict[str, float | None] = {}
    for reading in evaluate.READINGS:
        pred, true = evaluate.quantile_predictions(episodes, max_steps, n_quantiles, reading)
        out[reading] = float((pred == true).mean()) if pred.size else None
    return out


def step_shares(episodes: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """What the adaptation figures rest on: the share of steps in solved episodes, and the share of steps
    (all, and those of solved episodes) whose predicted quantile class is 0 (failure)."""
    with_q = [e for e in episodes if e.get("quantile")]
    steps = sum(len(e["quantile"]) for e in with_q)
    solved = [e for e in with_q if e["success"]]
    solved_steps = sum(len(e["quantile"]) for e in solved)
    zero = lambda eps: sum(int(np.sum(np.asarray(e["quantile"]) == 0)) for e in eps)  # noqa: E731
    return {"adapt_solved_step_share": solved_steps / steps if steps else None,
            "adapt_predicted_failure_share": zero(with_q) / steps if steps else None,
            "adapt_predicted_failure_share_solved": zero(solved) / solved_steps if solved_steps else None}


def parse_times(path: Path | None) -> dict[str, Any]:
    if path is None or not path.exists():
        return {}
    out: dict[str, Any] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"(pretrain|adapt) rc=(-?\d+) wall_s=(\d+)", line.strip())
        if m:
            out[m.group(1)] = {"rc": int(m.group(2)), "wall_s": int(m.group(3))}
    return out


def commands(name: str, run: Path, config: str) -> dict[str, str]:
    over = "" if name == "steps_left" else f" --set model.competence_reading={name}"
    return {"pretrain": f"muse-wm pretrain --config {config} --agent muse --logdir {run}{over}",
            "adapt": f"muse-wm adapt --checkpoint {run} --agent muse --logdir {run}/adapt"}


def summarize_run(name: str, run: Path, times: Path | None, config: str) -> dict[str, Any]:
    res = adapt_results(run / "adapt", agent="muse", reading=name)
    episodes = list(read_records(run / "adapt" / "episodes.jsonl", ADAPT_EPISODE))
    n_quantiles = load_config(config).model.competence_quantiles
    return {
        "reading": name,
        "commands": commands(name, run, config),
        "times": parse_times(times),
        "pretrain_last_window": last_window(run / "metrics.jsonl"),
        "adapt": {k: res.get(k) for k in ADAPT_KEYS},
        "adapt_tasks": [{k: t.get(k) for k in ("task", "success_rate", "sa_auroc", "sa_accuracy",
                                               "sa_quantile_accuracy")} for t in res.get("tasks", [])],
        "adapt_quantile_accuracy_against": rescored(episodes, int(res["max_steps"]), n_quantiles),
        **step_shares(episodes),
    }


def _pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in evaluate.READINGS:
            raise SystemExit(f"{flag} {item!r}: give READING=VALUE with READING one of {evaluate.READINGS}.")
        out[name] = value
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True, help="READING=pretrain logdir (with adapt/ inside)")
    ap.add_argument("--times", action="append", default=[], help="READING=file of 'pretrain/adapt rc= wall_s=' lines")
    ap.add_argument("--config", default="quickstart")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--reference", action="append", default=[],
                    help="LABEL=run folder of an earlier steps_left run (pretrain + adapt/), shown beside")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    runs, times = _pairs(args.run, "--run"), _pairs(args.times, "--times")
    out = {
        "what": "MUSE with the competence labels read as steps left to the first success (steps_left) vs as the "
                "success time from the episode start (from_start): pre-train then adapt, one seed",
        "made_by": "python -m benchmarks.competence_reading " + shlex.join(sys.argv[1:] if argv is None else argv),
        "config": args.config, "agent": "muse", "seed": args.seed, "machine": args.machine,
        "notes": ["one seed: a measurement, not a conclusion", *args.note],
    }
    refs = [item.partition("=") for item in args.reference]
    if any(not label or not sep or not path for label, sep, path in refs):
        raise SystemExit("--reference: give LABEL=run folder of a steps_left run (pretrain + adapt/).")
    try:
        out["runs"] = {name: summarize_run(name, Path(path), Path(times[name]) if name in times else None,
                                           args.config) for name, path in runs.items()}
        if refs:
            out["references"] = {label: {k: v for k, v in summarize_run("steps_left", Path(path), None,
                                                                        args.config).items()
                                         if k not in ("commands", "times")} for label, _, path in refs}
    except (ValueError, OSError) as e:  # a run folder that is not what it is given as: one line, no traceback
        raise SystemExit(f"competence_reading: {e}") from None
    atomic_write_text(args.out, json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
