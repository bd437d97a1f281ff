"""Keeping orbax's own output off a `muse-wm` user's terminal, so that a checkpoint problem reaches the
user as the one line `muse_jax.checkpoint` writes, not as absl logs and worker-thread tracebacks.

Two mechanisms, both about orbax only: `stderr_kept_on_success` holds back file descriptor 2 around a
save (orbax and tensorstore write there from C++ and from their own threads, which Python's
`sys.stderr` does not see), and `_DropReadOnlyNotice`, installed on the absl logger when this module is
imported, drops the one warning a read-only open (adapt, evaluation) always prints.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import TextIO


def os_error_in(e: BaseException) -> OSError | None:
    """The OSError behind an exception orbax/tensorstore raised (chained, or only in the message)."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno:
            return cur
        cur = cur.__cause__ or cur.__context__
    text = str(e)
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO):
        if os.strerror(code) in text:
            return OSError(code, os.strerror(code))
    return None


_HELD_STDERR: list[TextIO] = []
HOLD_STDERR_AFTER_FAILED_SAVE = False
"""Set by the `muse-wm` CLI, which reports a failed save as one line: fd 2 then stays held (see below).
Library callers keep their stderr back after a failed save."""


@contextlib.contextmanager
def stderr_kept_on_success() -> Iterator[None]:
    """Hold back what is written to fd 2 (orbax's absl logs, tracebacks printed by tensorstore's
    threads) and pass it on if the block succeeds. If it fails under the CLI
    (HOLD_STDERR_AFTER_FAILED_SAVE), fd 2 STAYS held: orbax's worker
    threads keep logging the failure after `save` has raised, so the caller reports it as one line
    on `user_stderr()` and the threads' output goes nowhere."""
    try:
        sys.stderr.flush()
        saved, tmp = os.dup(2), tempfile.TemporaryFile()
    except OSError:  # no fd or no temp space: let the output through
        yield
        return
    os.dup2(tmp.fileno(), 2)
    try:
        yield
    except BaseException as e:
        # Held only for what the CLI reports as one line (a write error, Ctrl-C); any other error gets
        # its stderr back, so its message or traceback is not swallowed.
        if HOLD_STDERR_AFTER_FAILED_SAVE and (isinstance(e, KeyboardInterrupt) or os_error_in(e) is not None):
            _HELD_STDERR.append(os.fdopen(saved, "w"))
        else:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.close()
        raise
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
    tmp.seek(0)
    if data := tmp.read():
        os.write(2, data)
    tmp.close()


def user_stderr() -> TextIO:
    """Where a one-line report goes: the real stderr, even while a failed save holds fd 2."""
    return _HELD_STDERR[0] if _HELD_STDERR else sys.stderr


class _DropReadOnlyNotice(logging.Filter):
    """Drops exactly orbax's `Given directory is read only=...` warning (absl logger, CheckpointManager
    init): opening a run's checkpoints read-only (adapt, evaluation) is what we ask for, not a problem.
    Every other absl/orbax record passes. (The option warnings read-only used to cause are avoided at
    the source: the read-only options are built already as orbax would force them.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Given directory is read only=%s"


logging.getLogger("absl").addFilter(_DropReadOnlyNotice())
