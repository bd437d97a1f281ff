"""Shared helpers for the fault-injection suite: run the real CLIs in subprocesses and kill them.

Why subprocesses: the faults under test (SIGKILL mid-write, a CLI's exit code and stderr) only exist
at the process boundary; an in-process call would hide exactly what a user meets.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
JAX_CACHE = str(Path(tempfile.gettempdir()) / "muse-jax-faults-xla-cache")

# The smallest pre-training run the smoke config allows; every wm fault test shares it.
TINY_WM = (
    "train.env_steps=200",
    "train.prefill=50",
    "train.log_every=50",
    "train.save_every=50",
    "train.train_ratio=16",
    "replay.capacity=2000",
    "env.max_episode_steps=25",
)


def child_env() -> dict[str, str]:
    """Environment for CLI subprocesses: CPU only, offline, unbuffered so partial output survives a kill."""
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", JAX_PLATFORMS=env.get("JAX_PLATFORMS", "cpu"),
               TQDM_DISABLE="1")
    # Every restart of a killed run would recompile the train step (minutes on a busy CPU); the
    # persistent cache makes a restart cost what it costs a user who resumes.
    env.setdefault("JAX_COMPILATION_CACHE_DIR", JAX_CACHE)
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
    return env


def cli(name: str, *args: str, timeout: float = 300, check: bool = False,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `muse-wm` / `muse-llm` as a user would and capture its output (`env` adds variables)."""
    cmd = [str(BIN / name), *args]
    proc = subprocess.run(cmd, cwd=ROOT, env={**child_env(), **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc


def wm_set(*extra: str) -> list[str]:
    """`--set` flags for the tiny smoke run plus `extra` overrides."""
    out: list[str] = []
    for kv in (*TINY_WM, *extra):
        out += ["--set", kv]
    return out


def kill_when(cmd: Sequence[str], ready: Callable[[], bool], *, log: Path, timeout: float = 400,
              poll: float = 0.01, env: dict[str, str] | None = None) -> int | None:
    """Start `cmd` (output to `log`), SIGKILL its process group as soon as `ready()` is true.

    Returns None when killed, or the exit code if it ended first."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(list(cmd), cwd=ROOT, env={**child_env(), **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return proc.returncode
            if ready():
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return None
            time.sleep(poll)
        raise AssertionError(f"{cmd} neither reached the kill point nor ended in {timeout}s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@functools.cache
def can_mount_private_fs() -> bool:
    """A user+mount namespace with a tmpfs (Linux `unshare -rm`): how the suite makes a full or
    read-only disk without touching the machine's own file systems."""
    if not shutil.which("unshare") or not shutil.which("mount"):
        return False
    script = "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d && rmdir $d"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, timeout=30)
    return probe.returncode == 0


def cli_on_small_fs(mode: str, mount: Path, keep: Path, name: str, *args: str,
                    timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `name args` with `mount` a private 16 MB tmpfs (see fs_driver.py for `mode`); what the
    command left under `mount` is copied to `keep` (`env` adds variables)."""
    cmd = ["unshare", "-rm", sys.executable, str(Path(__file__).with_name("fs_driver.py")), mode, str(mount),
           str(keep), "--", str(BIN / name), *args]
    return subprocess.run(cmd, cwd=ROOT, env={**child_env(), **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def error_line(stderr: str, prog: str) -> str:
    """The one line a CLI prints for a problem: asserts there is exactly one and no traceback."""
    no_traceback(stderr)
    lines = [ln for ln in stderr.splitlines() if ln.startswith(f"{prog}:") or ln.startswith(f"{prog} ")]
    assert len(lines) == 1, f"expected one '{prog}' error line, got {len(lines)}:\n{stderr[-3000:]}"
    return lines[0]


def jsonl_lines(path: Path) -> list[dict]:
    """Every line must parse: a torn or duplicated write shows up here, not silently skipped."""
    if not path.exists():
        return []
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        assert line.strip(), f"{path}: blank line {i + 1}"
        out.append(json.loads(line))
    return out


def no_traceback(stderr: str) -> None:
    assert "Traceback (most recent call last)" not in stderr, f"CLI leaked a traceback:\n{stderr[-3000:]}"
