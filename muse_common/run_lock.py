"""One writer per run folder: an OS file lock held for the life of a run.

Two `muse-wm pretrain`, `muse-wm adapt` or `muse-llm run` on the same folder would append the same
episodes twice and interleave checkpoints. The lock is `fcntl.flock` on DIR/.run.lock: the kernel
drops it when the holder ends in any way (exit, crash, SIGKILL), so a lock left by a dead process is
taken over without a word, and the file itself (which names the holder's PID and command, for the
refusal line) is kept, so two processes never lock two different files of one name. (Only a folder
that the run itself created and left empty is removed again: a run refused before its first write
leaves nothing behind.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = ".run.lock"


class RunFolderBusy(RuntimeError):
    """Another live process writes the same run folder; the message names its PID and the fix."""


def _holder(path: Path) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return "another process"
    pid, _, cmd = text.partition(" ")
    if not pid.isdigit():
        return "another process"
    return f"PID {pid}" + (f" (`{cmd}`)" if cmd else "")


@contextlib.contextmanager
def run_folder_lock(folder: str | Path, flag: str = "--logdir") -> Iterator[Path]:
    """Hold the lock of `folder` (created if missing) for the block, or raise RunFolderBusy at once.

    `flag` names the command-line option of the folder in the refusal line."""
    folder = Path(folder)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderBusy(
                f"{flag} {folder} is in use by {_holder(path)}, which is writing this run now; wait for it to "
                f"end (or stop it) and rerun to resume, or give another {flag}.") from None
        cmd = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else ""
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {cmd}\n".encode(), 0)
        yield path
    finally:
        if created and [p.name for p in folder.iterdir()] == [LOCK_FILE]:
            # a run refused before writing anything leaves no folder behind (as the checks before it)
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()
        os.close(fd)  # closing the descriptor releases the lock
