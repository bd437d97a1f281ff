"""Does the adaptation data mix decide whether MUSE's competence head learns a novel task?

Why: by default (`adapt.novel_fraction: null`, the paper is silent) adaptation batches are uniform over the
retained pre-training buffer plus the new episodes, so a novel task is only its share of stored steps (4.5% at
the quickstart, 0.5% at the paper's scale) and the competence head sees few rows of it. This script adapts one
pre-trained MUSE checkpoint to its novel tasks under each mix (`--arms`), for several adaptation seeds
(`train.seed`, which seeds the envs, replay sampling and policy noise of `adapt`), and writes one JSON line
per (arm, seed) with the figures of `results.json` (self-awareness AUROC overall and for the early and late
halves of the episodes, where the head's learning shows; accuracy, quantile accuracy, success rate) and the
episodes' per-step signals, for paired intervals. The docs page `experiments/novel-fraction.md` pairs the arms
by seed. Resumable: a finished (arm, seed) run folder is read, not redone (its wall time is then unknown); a
half-done one resumes (`muse-wm adapt` resumes its own episodes). A run folder records the checkpoint it
adapted, and one of another checkpoint is refused, never counted: give each checkpoint its own `--runs`.

    python -m benchmarks.novel_fraction --checkpoint runs/quickstart/muse --seeds 0 1 2 \\
        --runs runs/novel_fraction/quickstart --out docs/novel_fraction/quickstart.jsonl
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ARMS = {"uniform": None, "novel_fraction_0.5": 0.5}
"""Arm name -> `adapt.novel_fraction` (None: the default uniform mix)."""
FIGURES = ("success_rate", "sa_auroc", "sa_accuracy", "sa_quantile_accuracy", "episodes")


def arm_settings(arm: str, seed: int) -> list[str]:
    """The `--set` arguments of one (arm, seed) run."""
    sets = [f"train.seed={seed}"]
    if ARMS[arm] is not None:
        sets.append(f"adapt.novel_fraction={ARMS[arm]}")
    return [x for s in sets for x in ("--set", s)]


def checkpoint_window(checkpoint: str | Path) -> dict[str, Any] | None:
    """The checkpoint's last pre-training window of self-awareness figures (`metrics.jsonl`: step, episodes,
    successes, outcome classes, AUROC), so a reader sees what the head had learned before adaptation; None
    where the run folder has no such row."""
    from muse_common.files import read_jsonl

    rows = list(read_jsonl(Path(checkpoint) / "metrics.jsonl", ("sa/episodes",)))
    if not rows:
        return None
    keys = ("step", "sa/episodes", "sa/successes", "sa/outcome_classes", "sa/auroc")
    return {k: rows[-1].get(k) for k in keys}


def line_from_run(folder: Path, *, arm: str, seed: int, checkpoint: str, wall_s: float | None) -> dict[str, Any]:
    """One committed line from a finished adapt folder's `results.json`."""
    from benchmarks.table1 import adapt_results, compact
    from muse_common.files import read_jsonl

    r = adapt_results(folder, agent="muse")
    episodes = [compact(e, seed) for e in read_jsonl(folder / "episodes.jsonl", ("task", "episode", "success"))]
    halves = {h["half"]: {k: h.get(k) for k in ("episodes", "success_rate", "sa_auroc", "sa_accuracy")}
              for h in r.get("sa_by_episode_index") or []}
    return {"benchmark": "novel_fraction", "arm": arm, "novel_fraction": ARMS[arm], "seed": seed,
            "checkpoint": checkpoint, "checkpoint_window": checkpoint_window(checkpoint),
            **{k: r.get(k) for k in FIGURES}, "halves": halves,
            "tasks": [t["task"] for t in r.get("tasks", [])], "wall_s": wall_s, "episodes_records": episodes}


def foreign_run(folder: Path, checkpoint: str) -> str | None:
    """Why `folder` cannot be reused or resumed for `checkpoint` (None: it can): an adapt folder records the
    checkpoint it adapted (`adapt.json`), and a folder of another checkpoint must not be counted as this one's."""
    path = folder / "adapt.json"
    if not path.exists():
        return None
    try:
        old = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        old = None
    if not isinstance(old, dict):
        return f"{path} is not an adapt run's settings file; delete {folder} or pass another --runs"
    if old.get("checkpoint") != str(Path(checkpoint).resolve()):
        return (f"{folder} holds an adaptation of another checkpoint ({old.get('checkpoint')!r}, not "
                f"{str(Path(checkpoint).resolve())!r}); pass a --runs folder of this checkpoint's own")
    return None


def main(argv: list[str] | None = None) -> int:
    from muse_common.arg_parser import ArgumentParser
    from muse_common.files import append_jsonl, read_jsonl

    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="a MUSE pretrain run folder")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=list(ARMS))
    p.add_argument("--episodes", type=int, default=20, help="adaptation episodes per novel task")
    p.add_argument("--runs", required=True, help="folder for the adapt run folders")
    p.add_argument("--out", required=True, help="JSON lines, one per (arm, seed); existing ones are kept")
    args = p.parse_args(argv)
    done = {(x.get("arm"), x.get("seed")) for x in read_jsonl(args.out, ("arm", "seed"))} \
        if Path(args.out).exists() else set()
    for seed in args.seeds:
        for arm in args.arms:
            if (arm, seed) in done:
                continue
            folder = Path(args.runs) / f"{arm}_seed{seed}"
            if why := foreign_run(folder, args.checkpoint):
                print(f"novel_fraction: {why}", file=sys.stderr)
                return 2
            if (folder / "results.json").is_file():  # finished before its line was written
                try:
                    line = line_from_run(folder, arm=arm, seed=seed, checkpoint=args.checkpoint, wall_s=None)
                except ValueError as e:
                    print(f"novel_fraction: {e}", file=sys.stderr)
                    return 2
                append_jsonl(args.out, line)
                continue
            start = time.time()
            cmd = [sys.executable, "-m", "muse_jax.cli", "adapt", "--checkpoint", args.checkpoint,
                   "--agent", "muse", "--episodes", str(args.episodes), "--logdir", str(folder),
                   *arm_settings(arm, seed)]
            print(f"[novel_fraction] {arm} seed {seed} -> {folder}", flush=True)
            rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False).returncode
            if rc != 0 or not (folder / "results.json").is_file():
                print(f"novel_fraction: adapt {arm} seed {seed} stopped (exit {rc}); rerun to resume it",
                      file=sys.stderr)
                return 1
            line = line_from_run(folder, arm=arm, seed=seed, checkpoint=args.checkpoint,
                                 wall_s=round(time.time() - start))
            append_jsonl(args.out, line)
            print(json.dumps({k: line[k] for k in ("arm", "seed", "sa_auroc", "success_rate")}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
