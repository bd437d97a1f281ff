"""Two writers on one run folder: the second is refused with one line naming the first one's PID, and
the folder holds every record once (muse_common.run_lock: an OS file lock held for the run's life).

Both processes are started together, as two shells or two cluster jobs would, through the real CLIs.
"""

from __future__ import annotations

import collections
import os
import subprocess
import time
from pathlib import Path

import pytest
from fault_helpers import BIN, ROOT, TINY_WM, child_env, error_line, jsonl_lines, wm_set

HERE = Path(__file__).resolve().parent


def _both(cmd: list[str], tmp_path: Path, env: dict[str, str] | None = None,
          timeout: float = 600) -> list[tuple[subprocess.Popen, str]]:
    """Start `cmd` twice at once; wait for both; (process, stderr) of each."""
    procs = []
    for i in range(2):
        log = open(tmp_path / f"writer{i}.err", "w")  # noqa: SIM115 - closed below
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env={**child_env(), **(env or {})},
                                       stdout=subprocess.DEVNULL, stderr=log), log))
    deadline = time.monotonic() + timeout
    for p, log in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 1))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
    return [(p, (tmp_path / f"writer{i}.err").read_text()) for i, (p, _) in enumerate(procs)]


def _one_refused(results: list[tuple[subprocess.Popen, str]], prog: str, flag: str, folder: Path) -> None:
    codes = sorted(p.returncode for p, _ in results)
    assert codes == [0, 2], [(p.returncode, err[-2000:]) for p, err in results]
    (winner, _), (loser, err) = sorted(results, key=lambda x: x[0].returncode)
    line = error_line(err, prog)
    assert f"{flag} {folder} is in use by PID {winner.pid}" in line, line
    assert "another " + flag in line, line


def _counts(path: Path) -> collections.Counter:
    return collections.Counter((str(r["task"]), int(r["episode"])) for r in jsonl_lines(path))


@pytest.mark.slow
def test_two_muse_llm_runs_on_one_out(tmp_path: Path) -> None:
    out = tmp_path / "llm"
    tasks, episodes = ["mine_log", "mine_sand"], 3
    cmd = [str(BIN / "muse-llm"), "run", "--env", "minecraft", "--agent", "scripted-test", "--model",
           "smollm2", "--tasks", ",".join(tasks), "--episodes", str(episodes), "--max-steps", "8", "--out", str(out),
           "--no-progress"]
    results = _both(cmd, tmp_path, env={"PYTHONPATH": f"{HERE}:{ROOT}", "SCRIPTED_REPLY_SECONDS": "0.25"})
    _one_refused(results, "muse-llm run", "--out", out)
    assert _counts(out / "episodes.jsonl") == {(t, e): 1 for t in tasks for e in range(episodes)}


@pytest.mark.slow
def test_two_pretrains_on_one_logdir(tmp_path: Path) -> None:
    logdir = tmp_path / "wm"
    cmd = [str(BIN / "muse-wm"), "pretrain", "--config", "smoke", *wm_set(), "--logdir", str(logdir)]
    _one_refused(_both(cmd, tmp_path), "muse-wm", "--logdir", logdir)
    steps = [r["step"] for r in jsonl_lines(logdir / "metrics.jsonl")]
    assert steps and steps == sorted(set(steps)), steps  # one writer: strictly increasing, no repeats
    env_steps = int(dict(kv.split("=") for kv in TINY_WM)["train.env_steps"])
    assert steps[-1] == env_steps, steps


@pytest.mark.slow
def test_two_adapts_on_one_logdir(tmp_path: Path, pretrained_run: Path) -> None:
    out, task = tmp_path / "adapt", "coffee-button-v3"
    cmd = [str(BIN / "muse-wm"), "adapt", "--checkpoint", str(pretrained_run), "--agent", "muse", "--tasks", task,
           "--episodes", "3", "--logdir", str(out)]
    _one_refused(_both(cmd, tmp_path), "muse-wm", "--logdir", out)
    assert _counts(out / "episodes.jsonl") == {(task, e): 1 for e in range(3)}
    assert (out / "results.json").exists()


def test_lock_names_the_holder_and_a_dead_holders_lock_is_taken_over(tmp_path: Path) -> None:
    import signal
    import sys

    from muse_common.run_lock import LOCK_FILE, RunFolderBusy, run_folder_lock

    folder = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from muse_common.run_lock import run_folder_lock\n"
         f"with run_folder_lock({str(folder)!r}):\n    print('locked', flush=True); time.sleep(600)"],
        cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderBusy, match=f"in use by PID {holder.pid} "), run_folder_lock(folder):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)  # a kill leaves the lock file behind, but not the lock
        holder.wait()
    assert (folder / LOCK_FILE).exists()
    with run_folder_lock(folder, "--out"):
        assert (folder / LOCK_FILE).read_text().startswith(f"{os.getpid()} ")


def test_refusal_waits_for_the_holder_to_write_its_line(tmp_path: Path) -> None:
    """The holder writes its PID just after taking the lock; a process refused in between (file empty, or
    still naming the dead previous holder) rereads it and names the live holder, not "another process"."""
    import fcntl
    import sys
    import threading

    from muse_common.run_lock import LOCK_FILE, RunFolderBusy, run_folder_lock

    folder = tmp_path / "run"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        path = folder / LOCK_FILE
        path.write_text(f"{dead.pid} muse-wm pretrain (an earlier, killed run)\n")
        fd = os.open(path, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # locked, its line not yet written
        late = threading.Timer(0.5, lambda: path.write_text(f"{live.pid} muse-wm adapt\n"))
        late.start()
        try:
            with pytest.raises(RunFolderBusy, match=f"in use by PID {live.pid} "), run_folder_lock(folder):
                pass
        finally:
            late.join()
            os.close(fd)
    finally:
        live.kill()
        live.wait()
