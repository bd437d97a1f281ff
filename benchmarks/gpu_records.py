"""Fold one GPU lease's output folder into the committed records the speed page is generated from.

    python -m benchmarks.gpu_records /work/.device/1 /work/.device/2 --session "2026-12-01 H100 lease 1" \\
        --code 679e16c --seconds 540

`benchmarks/gpu_session.sh` writes JSON lines into the device tool's `$OUT`: `gpu_session.jsonl` (the
same-call timings against the official), `wm_seeds.jsonl` (N seeds in one step) and
`collect_overhead_loop.jsonl` (a learning run's updates/s). This appends them to `docs/official_speed_gpu.jsonl`,
`docs/wm_seeds_gpu.jsonl` and `docs/collect_overhead_gpu.jsonl`, each record tagged with the lease
(`session`), the commit it ran (`code`) and the first call's budget (`session_seconds`), which
`benchmarks/pages.py` groups and labels by.

What comes back from a lease is not trusted: a run cut off by its timeout can leave a partial line, and a
folder can hold anything. A line that is not a JSON object with the fields its page reads (of the right
types), or that was measured off a GPU (`gpu_session.sh --dry-run`), is skipped and named, never counted;
a lease already in the records is refused (run it once); the records are rewritten atomically (a temporary
file, then a rename), so a kill leaves the old or the new file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from muse_common.files import atomic_write_text, read_jsonl
from muse_jax.config.loops import GPU_BACKENDS

NUMBER = (int, float)

OFFICIAL_SPEED = {"size": str, "dtype": str, "order": str, "device": str, "ours_jax": str, "rounds": int,
                  "steps_per_round": int, "cpu_cores": int, "ours_train_step_median_s": NUMBER,
                  "ours_train_step_cpu_s": NUMBER, "ours_ready_s": NUMBER, "ours_loops": dict}
"""The fields of an `official_speed` record that the speed page reads."""
OFFICIAL_SIDE = {"official_train_step_median_s": NUMBER, "official_train_step_cpu_s": NUMBER,
                 "official_ready_s": NUMBER, "speed_ratio_official_over_ours": NUMBER,
                 "cpu_ratio_official_over_ours": NUMBER}
"""And, for a record timed alternating with the official (not "ours only"), the official side's."""
LOOPS = {"observe_unroll": int, "imag_unroll": int, "observe_remat": str}
SEEDS = {"size": str, "device": str, "jax": str, "steps": int, "batch": int, "seq": int, "seeds": int,
         "loops": dict, "train_step_median_s": NUMBER, "seeds_train_step_median_s": NUMBER,
         "seeds_ratio": NUMBER, "seeds_per_seed_s": NUMBER, "compile_s": NUMBER, "seeds_compile_s": NUMBER}
"""The fields of a `wm_throughput --seeds` record that the seeds table reads."""
LOOP = {"config": str, "size": str, "num_envs": int, "batch": int, "seq": int, "train_ratio": NUMBER,
        "device": str, "updates": int, "serial_loop_updates_per_s": NUMBER, "serial_bench_updates_per_s": NUMBER,
        "serial_ratio": NUMBER, "overlap_loop_updates_per_s": NUMBER, "overlap_bench_updates_per_s": NUMBER,
        "overlap_ratio": NUMBER}
"""The fields of a learning-loop summary (`collect_overhead.py --loop`) that the speed page reads."""

FILES = {"gpu_session.jsonl": "official_speed_gpu.jsonl", "wm_seeds.jsonl": "wm_seeds_gpu.jsonl",
         "collect_overhead_loop.jsonl": "collect_overhead_gpu.jsonl"}
"""What `gpu_session.sh` writes -> where its records are kept under docs/."""


def _problem(x: Any, fields: dict[str, Any]) -> str | None:
    """Why record `x` lacks what a page reads (a missing field, a wrong type), or None."""
    if not isinstance(x, dict):
        return "not a JSON object"
    for key, kind in fields.items():
        value = x.get(key)
        if value is None:
            return f"no {key!r}"
        if isinstance(value, bool) or not isinstance(value, kind):
            return f"{key!r} is {type(value).__name__}"
        if kind is NUMBER and not (math.isfinite(value) and value >= 0):
            return f"{key!r} is {value} (a time, rate or ratio: finite, not negative)"
    return None


def check(name: str, x: Any) -> str | None:
    """Why a record from output file `name` cannot be kept, or None (a summary line needs only its kind)."""
    if not isinstance(x, dict):
        return "not a JSON object"
    backend = x.get("platform", x.get("backend"))
    if backend not in GPU_BACKENDS:
        return f"measured on {backend!r}, not a GPU (a --dry-run's output?)"
    if name == "gpu_session.jsonl":
        if x.get("benchmark") == "official_speed_summary":
            return None
        if x.get("benchmark") != "official_speed":
            return f"benchmark {x.get('benchmark')!r} is not official_speed"
        fields = OFFICIAL_SPEED | ({} if x.get("order") == "ours only" else OFFICIAL_SIDE)
        if not isinstance(x.get("official_deterministic", True), bool):  # the page reads it as a flag
            return f"'official_deterministic' is {type(x['official_deterministic']).__name__}, not true/false"
        return _problem(x, fields) or _problem(x["ours_loops"], LOOPS)
    if name == "wm_seeds.jsonl":
        if x.get("benchmark") != "wm_throughput":
            return f"benchmark {x.get('benchmark')!r} is not wm_throughput"
        return _problem(x, SEEDS) or _problem(x["loops"], LOOPS)
    if x.get("benchmark") != "collect_overhead_loop" or not x.get("summary"):
        return "not a collect_overhead_loop summary"
    return _problem(x, LOOP)


def read(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The keepable records of one output file and a line per line skipped."""
    kept, skipped = [], []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            x = json.loads(line)
        except ValueError:
            skipped.append(f"{path}:{n}: not JSON (a line cut off?)")
            continue
        if why := check(path.name, x):
            skipped.append(f"{path}:{n}: {why}")
        else:
            kept.append(x)
    return kept, skipped


def fold(folders: list[Path], docs: Path, session: str, code: str, seconds: int) -> dict[str, int]:
    """Append the lease's records to docs/, tagged; returns how many went into each file. Raises ValueError
    (one line) when the lease is already recorded or nothing could be read."""
    if not docs.is_dir():
        raise ValueError(f"{docs} is not a folder: give --docs the repository's docs/")
    new: dict[str, list[dict[str, Any]]] = {}
    for folder in folders:
        if not folder.is_dir():
            raise ValueError(f"{folder} is not a folder: give the device tool's files_at folder(s)")
        for name, target in FILES.items():
            if (folder / name).is_file():
                kept, skipped = read(folder / name)
                for line in skipped:
                    print(f"skipped {line}", file=sys.stderr)
                new.setdefault(target, []).extend(kept)
    if not any(new.values()):
        raise ValueError(f"no records in {', '.join(map(str, folders))}: expected {', '.join(FILES)}")
    new = {target: records for target, records in new.items() if records}
    old = {target: (docs / target).read_text() if (docs / target).exists() else "" for target in new}
    for target in new:
        if any(x.get("session") == session for x in read_jsonl(docs / target)):
            raise ValueError(f"{docs / target} already holds session {session!r}: a lease is folded once "
                             "(give another --session, or remove its lines first)")
    for target, records in new.items():
        lines = [json.dumps(x | {"session": session, "code": code, "session_seconds": seconds}) for x in records]
        text = old[target] + ("\n" if old[target] and not old[target].endswith("\n") else "")
        atomic_write_text(docs / target, text + "".join(x + "\n" for x in lines))
    return {target: len(records) for target, records in new.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="the lease's output folders (files_at), calls in order")
    p.add_argument("--session", required=True, help='the lease\'s name, e.g. "2026-12-01 H100 lease 1"')
    p.add_argument("--code", required=True, help="the commit the lease ran (git rev-parse --short HEAD)")
    p.add_argument("--seconds", type=int, required=True, help="SESSION_SECONDS of the lease's first call")
    p.add_argument("--docs", type=Path, default=Path(__file__).resolve().parents[1] / "docs")
    args = p.parse_args(argv)
    try:
        counts = fold(args.folders, args.docs, args.session, args.code, args.seconds)
    except (ValueError, OSError) as e:  # OSError: an unwritable docs/ or a link there (never written through)
        print(f"error: {e}", file=sys.stderr)
        return 2
    for target, n in counts.items():
        print(f"{n} records -> docs/{target}")
    print("then: python -m benchmarks.report docs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
