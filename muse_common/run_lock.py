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
import time
from collections.abc import Iterator
from pathlib import Path

from muse_common.files import UnsafePath, open_nofollow, run_folder_link_problem

LOCK_FILE = ".run.lock"


class RunFolderBusy(RuntimeError):
    """Another live process writes the same run folder; the message names its PID and the fix."""


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine (another user's counts; a number no pid can be: no)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _holder(path: Path, wait_s: float = 2.0) -> str:
    """The holder named in the lock file, as 'PID n (`cmd`)'.

    The holder writes its line just after taking the lock, so a refused process can read the file in
    between (empty, or the previous holder's line): it rereads for up to `wait_s` until the line names
    a live process, and says "another process" only if none appears."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            text = path.read_text(errors="replace").strip()
        except OSError:
            text = ""
        pid, _, cmd = (text.splitlines() or [""])[0].partition(" ")
        if pid.isdigit() and int(pid) != os.getpid() and pid_alive(int(pid)):
            return f"PID {pid}" + (f" (`{cmd}`)" if cmd else "")
        if time.monotonic() >= deadline:
            return "another process"
        time.sleep(0.05)


@contextlib.contextmanager
def run_folder_lock(folder: str | Path, flag: str = "--logdir") -> Iterator[Path]:
    """Hold the lock of `folder` (created if missing) for the block, or raise RunFolderBusy at once.

    `flag` names the command-line option of the folder in the refusal line. A symbolic link anywhere inside
    the folder (a received folder's `.run.lock` pointing at a file of yours) is refused with UnsafePath
    before anything is opened, and the lock file is opened without following links."""
    folder = Path(folder)
    if str(folder).strip() == "":
        raise UnsafePath(f"{flag} is empty (''); give a folder name")
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    problem = run_folder_link_problem(folder)
    if problem:
        raise UnsafePath(f"{flag} {folder}: {problem}")
    path = folder / LOCK_FILE
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderBusy(
                f"{flag} {folder} is in use by {_holder(path)}, which is writing this run now; wait for it to "
                f"end (or stop it) and rerun to resume, or give another {flag}.") from None
        cmd = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else ""
        line = f"{os.getpid()} {cmd}\n".encode()
        os.pwrite(fd, line, 0)  # the new line first, then cut the old one's tail: never an empty file
        os.ftruncate(fd, len(line))
        yield path
    finally:
        if created and [p.name for p in folder.iterdir()] == [LOCK_FILE]:
            # a run refused before writing anything leaves no folder behind (as the checks before it)
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()
        os.close(fd)  # closing the descriptor releases the lock
