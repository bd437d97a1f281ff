"""Host memory for XLA's CPU backend: stop paying page faults for every step's temporaries.

XLA's CPU executable allocates all of a program's temporaries as one block per call (~400 MB for
the size1m train step at B16 x T64). glibc serves a block that large with a fresh `mmap` and returns
it with `munmap` when the call ends, so every train step touches ~100k never-used pages: each is a
page fault plus the kernel zeroing 4 KiB (measured here: ~98k minor faults and 0.15-0.2 s of system
time per size1m step, a quarter of the step's CPU time). `keep_freed_memory` tells glibc to serve
every size from its heap (no mmap), in one arena (thread arenas cannot grow past 64 MB and would fall
back to mmap), and never to give freed memory back to the OS; the next call reuses the same pages.

Opt-in (`wm_throughput.py --keep-freed-memory`), not on by default, because it is a trade: it saves the
step's faults, but all threads then share one malloc arena, and a whole learning run got slower with it
(quickstart at size1m: 1.39 updates/s serially against 1.71 with glibc's defaults; `benchmarks/host_memory.py
--bench loop`, docs/speed.md "Host memory"). The process also keeps its peak heap size. Call it once,
early, before JAX first runs a computation (its worker threads pick their malloc arena on their first
allocation). A no-op off glibc (macOS, musl) or when MUSE_KEEP_FREED_MEMORY=0.

`restart_with_huge_pages` is the default of `muse-wm pretrain` and `muse-wm adapt` instead: glibc's tunable
`glibc.malloc.hugetlb=1` (glibc >= 2.35) backs the blocks it maps with 2 MiB pages, so the same step pays ~1.7k
faults instead of ~100k, without a change of arenas (docs/speed.md, "Host memory"). glibc reads tunables only
when a process starts, so the command restarts itself once, before JAX is imported, with the tunable added to
GLIBC_TUNABLES (the same command line, the same process id: `os.execve`). Off with MUSE_JAX_HUGE_PAGES=0.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8
_applied: bool | None = None

HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"
HUGE_PAGES_SWITCH = "MUSE_JAX_HUGE_PAGES"  # "0": keep glibc's defaults
RESTARTED = "MUSE_JAX_RESTARTED_FOR_HUGE_PAGES"  # set in the restarted process: never restart twice
THP_MODE_FILE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def keep_freed_memory() -> bool:
    """Configure glibc malloc as described in the module docstring; True when it took effect."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("MUSE_KEEP_FREED_MEMORY", "1") == "0" or platform.system() != "Linux":
        return False
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = (libc.mallopt(M_ARENA_MAX, 1) == 1 and libc.mallopt(M_MMAP_MAX, 0) == 1
              and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1)
    except (OSError, AttributeError):
        return False
    _applied = bool(ok)
    return _applied


def thp_mode(path: Path = THP_MODE_FILE) -> str | None:
    """The kernel's transparent-huge-page mode (`always`, `madvise` or `never`), None where unknown."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def huge_pages_environment(environ: Mapping[str, str], system: str, libc: tuple[str, str],
                           thp: str | None) -> dict[str, str] | None:
    """The environment to restart with for 2 MiB pages, or None where a restart would change nothing: turned off
    (MUSE_JAX_HUGE_PAGES=0), already restarted, the tunable already set, not Linux with glibc >= 2.35 (older
    glibc ignores the tunable), or transparent huge pages `never` (or unknown) in the kernel."""
    if environ.get(HUGE_PAGES_SWITCH, "1") == "0" or environ.get(RESTARTED):
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in tunables or system != "Linux" or libc[0] != "glibc":
        return None
    try:
        version = tuple(int(p) for p in libc[1].split(".")[:2])
    except ValueError:
        return None
    if version < (2, 35) or thp not in ("always", "madvise"):
        return None
    return {**environ, "GLIBC_TUNABLES": f"{tunables}:{HUGE_PAGES_TUNABLE}" if tunables else HUGE_PAGES_TUNABLE,
            RESTARTED: "1"}


def restart_with_huge_pages() -> None:
    """Replace this process by the same command line under `huge_pages_environment` (module docstring); returns
    only where there is nothing to do, or where the restart failed (the run goes on with glibc's defaults).
    Call it before JAX is imported: the work done before the restart is lost."""
    env = huge_pages_environment(os.environ, platform.system(), platform.libc_ver(), thp_mode())
    argv = list(getattr(sys, "orig_argv", []))
    if env is None or not argv:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, argv, env)
    except OSError:
        return
