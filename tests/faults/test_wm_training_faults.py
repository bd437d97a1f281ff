"""Faults 1, 2 and 5 on the real `muse-wm pretrain` (Meta-World, orbax checkpoints, subprocesses).

1. SIGKILL during a checkpoint write (as soon as orbax's tmp folder appears), mid-training, and during
   a later write; then resume to the end: counters and replay size equal an uninterrupted run's, a
   half-written checkpoint is never resumed from, and every metrics.jsonl line parses.
2. The run states the replay's memory need before it starts, and the replay stays within capacity.
5. A loss blown up by a huge learning rate stops the run with the loss name and the step, exit 1,
   and the last good checkpoint stays intact.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fault_helpers import BIN, cli, jsonl_lines, kill_when, no_traceback, wm_set


def _steps(ckdir: Path) -> list[int]:
    """Finished checkpoint steps: numbered folders (orbax renames a tmp folder into one when done)."""
    if not ckdir.exists():
        return []
    return sorted(int(p.name) for p in ckdir.iterdir() if p.name.isdigit())


def _tmp_written_since(ckdir: Path, t0: float) -> bool:
    """An orbax tmp folder (a checkpoint being written) created by this process (orbax reuses the name
    `<step>.orbax-checkpoint-tmp`, so a stale one from an earlier kill does not count)."""
    try:
        return any("tmp" in p.name and p.stat().st_mtime >= t0 for p in ckdir.iterdir())
    except FileNotFoundError:  # the folder, or a tmp folder being renamed, vanished while we looked
        return False


def _meta(ckdir: Path, step: int) -> dict:
    return json.loads((ckdir / str(step) / "meta" / "metadata").read_text())


def _checkpoint_write(ckdir: Path) -> Callable[[], bool]:
    t0 = time.time()
    return lambda: _tmp_written_since(ckdir, t0)


def _after_new_metrics(path: Path, delay_s: float) -> Callable[[], bool]:
    """True `delay_s` after metrics.jsonl gains a line: the kill lands among train steps."""
    start = len(path.read_text().splitlines()) if path.exists() else 0
    hit: list[float] = []

    def ready() -> bool:
        if not hit and path.exists() and len(path.read_text().splitlines()) > start:
            hit.append(time.monotonic())
        return bool(hit) and time.monotonic() - hit[0] >= delay_s
    return ready


@pytest.mark.slow
def test_pretrain_killed_repeatedly_resumes_to_uninterrupted_counters(tmp_path: Path, pretrained_run: Path) -> None:
    logdir = tmp_path / "killed"
    ckdir, metrics, log = logdir / "checkpoints", logdir / "metrics.jsonl", tmp_path / "killed.log"
    cmd = [str(BIN / "muse-wm"), "pretrain", "--config", "smoke", *wm_set(), "--logdir", str(logdir)]
    rng = random.Random(7)
    kills, interrupted_writes = 0, 0
    for point in ("checkpoint write", "training", "checkpoint write"):
        ready = _checkpoint_write(ckdir) if point == "checkpoint write" else _after_new_metrics(
            metrics, rng.uniform(0.0, 1.0))
        before = _steps(ckdir)
        rc = kill_when(cmd, ready, log=log)
        if rc is not None:  # finished before this kill point: nothing left to interrupt
            assert rc == 0, log.read_text()[-3000:]
            break
        kills += 1
        interrupted_writes += point == "checkpoint write" and any("tmp" in p.name for p in ckdir.iterdir())
        after = _steps(ckdir)
        assert set(before) <= set(after) or len(after) >= 1, "a kill destroyed finished checkpoints"
        for s in after:  # every numbered folder is a finished checkpoint with its integrity record
            assert (ckdir / str(s) / "muse_files.json").exists(), f"half-written checkpoint {s} looks finished"
    assert kills >= 2, f"only {kills} kills landed; the run is too short to test resume"
    assert interrupted_writes >= 1, "no kill landed inside a checkpoint write"

    resumable = _steps(ckdir)
    proc = cli("muse-wm", "pretrain", "--config", "smoke", *wm_set(), "--logdir", str(logdir), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if resumable:
        m = re.search(r"resuming .* at env step (\d+)", proc.stdout)
        assert m, proc.stdout[-2000:]
        assert int(m.group(1)) == resumable[-1], "resumed from something other than the last finished checkpoint"

    ref_ck = pretrained_run / "checkpoints"
    ref, got = _meta(ref_ck, _steps(ref_ck)[-1])["counters"], _meta(ckdir, _steps(ckdir)[-1])["counters"]
    assert (got["env_steps"], got["train_steps"]) == (ref["env_steps"], ref["train_steps"]), (got, ref)
    # Episodes still running at a kill are not in any checkpoint (their env state is not saved), so a
    # killed run may finish fewer episodes: at most one per env per kill.
    num_envs = 2
    assert ref["episodes"] - kills * num_envs <= got["episodes"] <= ref["episodes"], (got, ref)

    ref_lines, lines = jsonl_lines(pretrained_run / "metrics.jsonl"), jsonl_lines(metrics)
    for key in ("step", "env_steps"):
        assert lines[-1][key] == ref_lines[-1][key], (key, lines[-1], ref_lines[-1])
    # Rows logged after a checkpoint and before a kill are dropped on resume: env_steps only grows.
    env_steps = [row["env_steps"] for row in lines]
    assert env_steps == sorted(set(env_steps)), env_steps
    assert np.isfinite(lines[-1]["loss/total"])


@pytest.mark.slow
def test_pretrain_states_replay_memory_before_work(pretrained_run: Path) -> None:
    # The reference run's stdout is not kept by the fixture; the same message comes from a resume that
    # has nothing left to do (stop-at below the finished step), which is cheap.
    proc = cli("muse-wm", "pretrain", "--config", "smoke", *wm_set(), "--logdir", str(pretrained_run),
               "--stop-at", "1", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"replay needs ([\d.]+) MB for (\d+) steps", proc.stdout)
    assert m, proc.stdout[-2000:]
    assert int(m.group(2)) == 2000
    from muse_jax.config import load_config
    from muse_jax.loops.pretrain import replay_megabytes

    assert float(m.group(1)) == pytest.approx(replay_megabytes(load_config("smoke", wm_set()[1::2])), abs=0.05)
    replay_steps = [x["replay_steps"] for x in jsonl_lines(pretrained_run / "metrics.jsonl")]
    assert max(replay_steps) <= 2000


def test_replay_is_bounded_by_capacity_whatever_is_added() -> None:
    from muse_jax.envs.metaworld import ACT_DIM, PROPRIO_DIM
    from muse_jax.replay import Replay, step_bytes

    capacity, rng = 500, np.random.default_rng(0)
    replay = Replay(capacity, seq_len=8, seed=0)
    for _ in range(60):  # ~3x capacity
        T = int(rng.integers(8, 40))
        ep = {"proprio": rng.normal(size=(T, PROPRIO_DIM)).astype(np.float32),
              "action": rng.uniform(-1, 1, (T, ACT_DIM)).astype(np.float32),
              "reward": np.zeros(T, np.float32), "is_first": np.eye(1, T, dtype=bool)[0],
              "is_terminal": np.zeros(T, bool), "task_id": np.ones(T, np.int32)}
        replay.add_episode(ep, success_T=np.zeros(T, bool))
        assert len(replay) <= capacity
        assert replay.nbytes() <= capacity * step_bytes(None, PROPRIO_DIM, ACT_DIM)
    assert len(replay) > capacity // 2  # eviction drops whole old episodes, not everything
    with pytest.raises(ValueError, match="replay.capacity"):
        replay.add_episode({k: np.repeat(v[:1], capacity + 1, axis=0) for k, v in ep.items()},
                           success_T=np.zeros(capacity + 1, bool))


HUGE_LR = ("optim.lr=1e30", "optim.warmup=0", "optim.agc=0")


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    logdir = tmp_path_factory.mktemp("nan") / "run"
    proc = cli("muse-wm", "pretrain", "--config", "smoke", *wm_set(*HUGE_LR), "--logdir", str(logdir), timeout=600)
    return logdir, proc


@pytest.mark.slow
def test_nan_loss_stops_with_name_and_step_and_keeps_last_good_checkpoint(nan_run) -> None:  # noqa: ANN001
    logdir, proc = nan_run
    no_traceback(proc.stderr)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    m = re.search(r"muse-wm: stopped: (\S+) is (nan|inf|-inf) at train step (\d+)", proc.stderr)
    assert m, proc.stderr[-2000:]
    assert m.group(1).startswith(("loss/", "grad_norm/")), m.group(0)
    ckdir = logdir / "checkpoints"
    steps = _steps(ckdir)
    assert steps, "no good checkpoint was kept"
    last = steps[-1]
    meta = _meta(ckdir, last)
    assert meta["counters"]["train_steps"] <= int(m.group(3)), "a checkpoint was written after the NaN"
    from muse_jax.checkpoint import verify_integrity

    verify_integrity(ckdir / str(last))  # raises naming the file if the good checkpoint was damaged


@pytest.mark.slow
def test_nan_run_resumes_with_lower_learning_rate_as_the_message_says(nan_run) -> None:  # noqa: ANN001
    logdir, _ = nan_run
    last = _steps(logdir / "checkpoints")[-1]
    proc = cli("muse-wm", "pretrain", "--config", "smoke", *wm_set(), "--logdir", str(logdir),
               "--stop-at", str(last), timeout=300)  # resume and stop at once: no training needed
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"at env step {last}" in proc.stdout
