"""How every benchmark ends, and the documentation pages made from what they wrote.

`emit_record`: a benchmark's summary record appended to `--out` (if given) and printed as the last JSON line,
so scripts and CI can read the last line of stdout.

`python -m benchmarks.report docs [--check] [--list]`: regenerate the experiment pages under `docs/` and the
results block of `README.md` from the committed JSON lines (`benchmarks/pages.py` holds the registry);
`--check` writes nothing and exits 1 naming every page that is out of date with its data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from muse_common.machine import cpu_model as cpu_model  # re-exported: speed records name their processor

REPO = Path(__file__).resolve().parents[1]


def git_commit(repo: Path = REPO) -> str:
    """The checkout's short commit, which every record names so that a figure traces to its code
    ("unknown" outside a git checkout)."""
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def loops_record(cfg: Any) -> dict[str, Any]:
    """The scan settings a train step compiled in this process uses (`auto` resolved for
    `jax.default_backend()`), as every speed record names them."""
    import dataclasses

    import jax

    from muse_jax.config.loops import loops_for

    return dataclasses.asdict(loops_for(cfg, jax.default_backend()))


HOST_MALLOC_VARIABLES = ("GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
                         "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "LD_PRELOAD")
"""Environment variables that change how host memory is allocated, and with it a CPU step's time (docs/speed.md,
"Host memory"): a record made with any of them set names them."""


def host_malloc_record() -> dict[str, str]:
    """The HOST_MALLOC_VARIABLES set in this process's environment ({} with glibc's defaults)."""
    return {k: os.environ[k] for k in HOST_MALLOC_VARIABLES if os.environ.get(k)}


def run_conditions() -> dict[str, Any]:
    """What a speed figure depends on besides its code and settings: `cpu_model` (the host processor, always),
    `host_malloc` (a host-memory setting, when one is set) and `xla_flags` (`XLA_FLAGS`, when set), so that
    a record is never read as one made on another processor or with the defaults."""
    conditions: dict[str, Any] = {}
    if malloc := host_malloc_record():
        conditions["host_malloc"] = malloc
    if flags := os.environ.get("XLA_FLAGS", "").strip():
        conditions["xla_flags"] = flags
    conditions["cpu_model"] = cpu_model()
    return conditions


def emit_record(record: dict[str, Any], out: str | None) -> dict[str, Any]:
    """Print `record` as one JSON line (and append it to `out`), with its `run_conditions` (a field the record
    already has is kept)."""
    record = {**record, **{k: v for k, v in run_conditions().items() if k not in record}}
    if out:
        from muse_common.files import append_jsonl

        append_jsonl(out, record)
    print(json.dumps(record), flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    from muse_common.arg_parser import ArgumentParser

    parser = ArgumentParser(prog="python -m benchmarks.report", description=__doc__.split("\n\n")[2])
    sub = parser.add_subparsers(dest="command", required=True)
    docs = sub.add_parser("docs", help="regenerate the experiment pages and the README's results block")
    docs.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    docs.add_argument("--list", action="store_true", help="list the generated pages and their data")
    args = parser.parse_args(argv)

    from benchmarks import pages

    if args.list:
        for p in pages.PAGES.values():
            print(f"docs/{p.path}: {', '.join('docs/' + s for s in p.sources)} ({p.render.__name__})")
        for name in pages.README_BLOCKS:
            print(f"README.md <!-- generated:{name} -->")
        return 0
    if args.check:
        bad = pages.stale()
        for path in bad:
            print(f"{path} is out of date with its data: run `python -m benchmarks.report docs`", file=sys.stderr)
        return 1 if bad else 0
    for path in pages.write():
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
