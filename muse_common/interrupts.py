"""Ctrl-C that Python would otherwise drop.

Python raises a SIGINT's KeyboardInterrupt wherever the main thread happens to be. When that is inside a
garbage-collector callback or a finalizer (jax's `_xla_gc_callback` runs on every collection), Python prints
"Exception ignored in ..." and swallows it: a run would then go on to its end and exit 0 as if never
interrupted. Within `recording_interrupts()` each SIGINT is also recorded, and a loop calls
`raise_if_lost()` between its steps, where stopping is safe, to raise the one that was swallowed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["raise_if_lost", "recording_interrupts"]

_pending = False


def _record_and_raise(signum: int, frame: FrameType | None) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


@contextlib.contextmanager
def recording_interrupts() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt as Python's default handler does, and is recorded for `raise_if_lost`.
    A no-op off the main thread, or where SIGINT does not have Python's default handler (ignored, as in a
    job started in the background of a shell, or handled by someone else)."""
    global _pending
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    _pending = False
    signal.signal(signal.SIGINT, _record_and_raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _pending = False


def raise_if_lost() -> None:
    """Raise KeyboardInterrupt for a recorded Ctrl-C that has not stopped the program (Python swallowed it);
    once per Ctrl-C."""
    global _pending
    if _pending:
        _pending = False
        raise KeyboardInterrupt
