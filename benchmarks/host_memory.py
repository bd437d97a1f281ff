"""The train step under each way of allocating host memory, this project's and the official's alike.

XLA's CPU runtime allocates a program's temporaries as one block per call (398 MiB for the size1m train
step), and glibc maps such a block afresh each call: ~100k page faults per step (docs/speed.md, "Host
memory"). glibc reads its malloc settings only when a process starts, so each variant is its own run of
`benchmarks/official/speed.py` with the variant's environment, which both of its workers inherit: the
official's step runs under the same setting as this project's, and the ratio compares like with like.
With `--bench loop` each variant is a run of `benchmarks/collect_overhead.py --loop` instead: a learning
run's updates/s (acting, env workers and training together, serial and overlapped), the figure that decides
whether a setting pays for a whole run and not only for the train step. Variants alternate in rounds; every
record is the benchmark's own (speed.py's per-size records, collect_overhead's summary), plus `variant` and
`round`:

    python benchmarks/host_memory.py --rounds 2 --out docs/host_memory_speed_cpu.jsonl -- --size size1m
    python benchmarks/host_memory.py --variants defaults hugetlb -- --ours-only --size size12m
    python benchmarks/host_memory.py --bench loop -- --config quickstart --set model.size=size1m --updates 40

Everything after `--` goes to the benchmark (its `--out` is this script's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import HOST_MALLOC_VARIABLES  # noqa: E402
from muse_common.files import append_jsonl  # noqa: E402

VARIANTS: dict[str, dict[str, str]] = {
    "defaults": {},
    "hugetlb": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    "kept": {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**34)},
    "kept_arenas": {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**34)},
}
"""glibc's defaults; 2 MiB pages for blocks glibc maps (glibc >= 2.35, transparent huge pages in `madvise`
or `always` mode); freed memory kept in one arena, never mapped or trimmed (what `muse_jax.host_allocator`
sets in-process); the same with glibc's per-thread arenas left as they are (a block too large for a thread's
arena is then served by the main one)."""


def variant_env(name: str) -> dict[str, str]:
    """This process's environment with every host-memory variable replaced by the variant's."""
    env = {k: v for k, v in os.environ.items() if k not in HOST_MALLOC_VARIABLES}
    return {**env, **VARIANTS[name]}


BENCHES: dict[str, tuple[list[str], str]] = {
    "speed": (["official/speed.py"], "official_speed"),
    "loop": (["collect_overhead.py", "--loop"], "collect_overhead_loop"),
}
"""--bench: the script (under benchmarks/, with its fixed flags) and the `benchmark` of the records kept."""


def run_variant(name: str, rnd: int, bench: str, bench_args: list[str]) -> list[dict[str, Any]]:
    """One run of the benchmark under the variant; its result records (speed.py's per size, the loop's
    summary)."""
    (script, *fixed), kind = BENCHES[bench]
    path = Path(__file__).resolve().parent / script
    proc = subprocess.run([sys.executable, str(path), *fixed, *bench_args], env=variant_env(name),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"host_memory: {script} under {name!r} exited {proc.returncode}: {tail[0]}")
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    keep = [r for r in records if r.get("benchmark") == kind and (bench != "loop" or r.get("summary"))]
    return [{**r, "variant": name, "round": rnd} for r in keep]


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    from muse_common.arg_parser import ArgumentParser

    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["defaults", "hugetlb", "kept"])
    p.add_argument("--bench", choices=list(BENCHES), default="speed",
                   help="speed: official/speed.py (the train step, both sides); loop: collect_overhead.py --loop")
    p.add_argument("--rounds", type=int, default=2, help="each variant once per round, in the order given")
    p.add_argument("--out", help="also append every record to this JSONL file")
    args = p.parse_args(own)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if "--out" in bench_args:
        p.error("give --out before `--` (this script writes the records)")
    if args.bench == "loop" and "--loop" in bench_args:
        bench_args.remove("--loop")
    return args, bench_args


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args, bench_args = parse_args(argv)
    records = []
    for rnd in range(1, args.rounds + 1):
        for name in args.variants:
            for rec in run_variant(name, rnd, args.bench, bench_args):
                print(json.dumps(rec), flush=True)
                if args.out:
                    append_jsonl(args.out, rec)
                records.append(rec)
    return records


if __name__ == "__main__":
    main()
