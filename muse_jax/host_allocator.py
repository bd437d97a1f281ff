"""Keep freed host memory in the process, so XLA's CPU backend stops paying page faults every step.

XLA's CPU executable allocates all of a program's temporaries as one block per call (~400 MB for
the size1m train step at B16 x T64). glibc serves a block that large with a fresh `mmap` and returns
it with `munmap` when the call ends, so every train step touches ~100k never-used pages: each is a
page fault plus the kernel zeroing 4 KiB (measured here: ~98k minor faults and 0.15-0.2 s of system
time per size1m step, a quarter of the step's CPU time). `keep_freed_memory` tells glibc to serve
every size from its heap (no mmap), in one arena (thread arenas cannot grow past 64 MB and would fall
back to mmap), and never to give freed memory back to the OS; the next call reuses the same pages.

Opt-in (`wm_throughput.py --keep-freed-memory`), not on by default, because it is a trade: on the
2-core machine it saved ~8% of the size1m step's CPU time when idle and 0.15 s per step under load,
but the small jitted acting calls got slower (regulation decision 1.2 -> 3.1 ms, measured back to
back), probably because all threads then share one malloc arena. The process also keeps its peak
heap size (it does not shrink after a large step). Call it once,
early, before JAX first runs a computation (its worker threads pick their malloc arena on their first
allocation). A no-op off glibc (macOS, musl) or when MUSE_KEEP_FREED_MEMORY=0.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8
_applied: bool | None = None


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
