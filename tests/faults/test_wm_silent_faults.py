"""`muse-wm` inputs that used to be accepted without a word, end in a traceback, hang, or lose their
message: each ends with one stderr line naming the input and the fix (exit 2), or is handled as
docs/reliability.md says (a non-record line stops the reader naming file and line, Ctrl-C exits 130 with a message).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fault_helpers import (
    BIN,
    ROOT,
    can_mount_private_fs,
    child_env,
    cli,
    cli_on_small_fs,
    error_line,
    no_traceback,
    wm_set,
)


def _wm_error(*args: str, timeout: float = 180) -> str:
    proc = cli("muse-wm", *args, timeout=timeout)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    return error_line(proc.stderr, "muse-wm")


# ---------------------------------------------------------------------------------------------- compare

@pytest.mark.parametrize(("data", "words"), [
    ({"episodes": 20, "tasks": []}, ["no 'agent'"]),
    ({"agent": "muse", "episodes": 20}, ["no 'tasks'"]),
    ([], ["a JSON list, not an object"]),
    ({"agent": "muse", "episodes": 20, "tasks": [5]}, ["'tasks' is not a list of per-task results"]),
], ids=["no-agent", "no-tasks", "list", "bad-tasks"])
def test_compare_names_a_results_file_without_what_it_needs(tmp_path: Path, data: object, words: list[str]) -> None:
    run = tmp_path / "adapt"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(data))
    err = _wm_error("compare", str(run))
    assert str(run / "results.json") in err and "muse-wm adapt" in err, err
    for w in words:
        assert w in err, (w, err)


def test_compare_out_at_a_folder(tmp_path: Path) -> None:
    err = _wm_error("compare", str(tmp_path / "a"), "--out", str(tmp_path))
    assert f"--out {tmp_path} is a folder" in err and "roc.png" in err, err
    assert "tmp" not in err.replace(str(tmp_path), ""), err  # no internal temp file is named


# ---------------------------------------------------------------------------------------------- config

@pytest.mark.slow
def test_misspelled_novel_task_is_refused_at_pretrain(tmp_path: Path) -> None:
    logdir = tmp_path / "run"
    err = _wm_error("pretrain", "--config", "smoke", *wm_set("env.novel_tasks=[coffee-buton-v3]"),
                    "--logdir", str(logdir))
    assert "env.novel_tasks" in err and "'coffee-buton-v3' is not a Meta-World v3 task" in err, err
    assert "coffee-button-v3" in err, err  # the close match
    assert not logdir.exists()


@pytest.mark.slow
@pytest.mark.parametrize("prog", ["muse-wm", "muse-llm"])
def test_config_on_a_named_pipe_is_refused_without_hanging(tmp_path: Path, prog: str) -> None:
    fifo = tmp_path / "cfg.yaml"
    os.mkfifo(fifo)
    if prog == "muse-wm":
        args = ["pretrain", "--config", str(fifo), "--logdir", str(tmp_path / "run")]
    else:
        args = ["run", "--config", str(fifo), "--out", str(tmp_path / "run")]
    proc = cli(prog, *args, timeout=120)  # a read of the pipe would block until the timeout
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = error_line(proc.stderr, prog)
    assert str(fifo) in line and "not a regular file" in line, line


# ---------------------------------------------------------------------------------------------- adapt

@pytest.mark.slow
@pytest.mark.parametrize("junk", [b"\x00garbage", b"[1, 2]"], ids=["binary", "list"])
def test_garbage_adapt_json_is_named(tmp_path: Path, pretrained_run: Path, junk: bytes) -> None:
    out = tmp_path / "adapt"
    out.mkdir()
    (out / "adapt.json").write_bytes(junk)
    err = _wm_error("adapt", "--checkpoint", str(pretrained_run), "--agent", "muse", "--tasks", "coffee-button-v3",
                    "--episodes", "1", "--logdir", str(out), timeout=600)
    assert str(out / "adapt.json") in err and "new --logdir" in err, err
    assert (out / "adapt.json").read_bytes() == junk


@pytest.mark.slow
def test_adapt_stops_on_non_record_lines_then_resumes_once_fixed(tmp_path: Path, pretrained_run: Path) -> None:
    """A line of episodes.jsonl that is not an episode record stops adapt in one line naming the
    file and line (it was skipped with a warning); the file is left as it is, and once the line is removed
    the rerun resumes with every episode exactly once."""
    out, task = tmp_path / "adapt", "coffee-button-v3"
    args = ["adapt", "--checkpoint", str(pretrained_run), "--agent", "muse", "--tasks", task, "--episodes", "3",
            "--logdir", str(out)]
    first = cli("muse-wm", *args, "--stop-after-rounds", "1", timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    good = (out / "episodes.jsonl").read_text()
    with open(out / "episodes.jsonl", "a") as f:
        f.write('42\n{"foo": 1}\n')
    proc = cli("muse-wm", *args, timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    n = good.count("\n") + 1
    assert f"episodes.jsonl line {n} is a JSON int, not an episode record" in error_line(proc.stderr, "muse-wm")
    assert (out / "episodes.jsonl").read_text() == good + '42\n{"foo": 1}\n'
    (out / "episodes.jsonl").write_text(good)
    proc = cli("muse-wm", *args, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    no_traceback(proc.stderr)
    records = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["episode"] for r in records) == [0, 1, 2], records
    assert json.loads((out / "results.json").read_text())["episodes"] == 3


def test_metrics_resume_stops_on_non_records_and_cuts_a_torn_tail(tmp_path: Path,
                                                                   capfd: pytest.CaptureFixture) -> None:
    from muse_common.files import read_jsonl
    from muse_common.records import RecordError
    from muse_jax.run_log import drop_metrics_after

    path = tmp_path / "metrics.jsonl"
    text = ('{"step": 1, "env_steps": 1}\n42\n[1]\n{"step": 2, "env_steps": 2}\n{"step": 3, "env_steps": 3}\n'
            '{"step": 4, "env_st')
    path.write_text(text)
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3]  # the generic reader still skips (official events)
    assert [r["step"] for r in read_jsonl(path, required=("nope",))] == []
    with pytest.raises(RecordError, match=r"metrics.jsonl line 2 is a JSON int, not a metrics row"):
        drop_metrics_after(path, 2)  # the pre-training resume: one reader per record kind
    path.write_text(text.replace("42\n[1]\n", ""))
    drop_metrics_after(path, 2)
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    err = capfd.readouterr().err
    assert "cut a torn last line" in err and "past the checkpoint's env_steps 2" in err, err


# ---------------------------------------------------------------------------------------------- stderr

def test_stderr_is_given_back_after_a_save_that_failed_for_another_reason(capfd: pytest.CaptureFixture) -> None:
    """Only a write error or Ctrl-C keeps fd 2 held (the CLI prints its one line on user_stderr());
    any other failure gets stderr back, so its message is seen."""
    from muse_jax import orbax_quiet

    old = orbax_quiet.HOLD_STDERR_AFTER_FAILED_SAVE
    orbax_quiet.HOLD_STDERR_AFTER_FAILED_SAVE = True
    try:
        with pytest.raises(ValueError), orbax_quiet.stderr_kept_on_success():
            raise ValueError("not a write error")
        assert not orbax_quiet._HELD_STDERR  # noqa: SLF001
        os.write(2, b"seen after\n")
        assert "seen after" in capfd.readouterr().err
    finally:
        orbax_quiet.HOLD_STDERR_AFTER_FAILED_SAVE = old


def _step_of(name: str) -> int:
    """The step of an orbax checkpoint folder name (`50`, `50.orbax-checkpoint-tmp-...`); a huge number if none."""
    head = name.split(".", 1)[0]
    return int(head) if head.isdigit() else 1 << 62


@pytest.mark.slow
def test_ctrl_c_during_a_checkpoint_write_exits_130_with_a_message(tmp_path: Path) -> None:
    logdir = tmp_path / "run"
    ckdir = logdir / "checkpoints"
    # checkpoints every 50 steps up to 400: the test interrupts a write before the last one, so the run still
    # has work left (a Ctrl-C landing in the final write's tail can arrive after the command has returned)
    cmd = [str(BIN / "muse-wm"), "pretrain", "--config", "smoke", *wm_set("train.env_steps=400"), "--logdir",
           str(logdir)]
    err_path = tmp_path / "err.log"
    with open(err_path, "w") as err:
        # SIGINT back to its default in the child: a test run started in the background of a shell inherits
        # SIGINT ignored (POSIX), and a Python started that way never turns Ctrl-C into KeyboardInterrupt
        proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(), stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            if ckdir.exists() and any(_step_of(p.name) < 400 for p in ckdir.iterdir() if "tmp" in p.name):
                break
            time.sleep(0.005)
        assert proc.poll() is None, "pretrain ended before a checkpoint write"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground process group
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stderr = err_path.read_text()
    assert rc == 130, (rc, stderr[-3000:])
    line = error_line(stderr, "muse-wm")
    assert line.startswith("muse-wm: stopped: interrupted") and "rerun the same command" in line, line
    assert "the last complete checkpoint (step " in line or "no checkpoint was complete" in line, line


@pytest.mark.slow
@pytest.mark.skipif(not can_mount_private_fs(), reason="needs unprivileged user+mount namespaces (unshare -rm)")
def test_disk_full_between_checkpoints_is_one_line_without_a_tensorboard_traceback(tmp_path: Path) -> None:
    mount, keep = tmp_path / "disk", tmp_path / "keep"
    proc = cli_on_small_fs("fill-full-after:run/checkpoints/50/muse_files.json", mount, keep, "muse-wm", "pretrain",
                           "--config", "smoke", *wm_set(), "--logdir", str(mount / "run"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = error_line(proc.stderr, "muse-wm")  # also: no traceback, from tensorboardX's exit handler or any other
    assert line.startswith("muse-wm: stopped: cannot write") and "No space left on device" in line, line
    assert "Exception" not in proc.stderr, proc.stderr[-3000:]
