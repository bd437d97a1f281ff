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
@pytest.mark.long  # test_kills_right_after_checkpoints_lose_no_env_step runs in CI
def test_pretrain_killed_repeatedly_resumes_to_uninterrupted_counters(tmp_path: Path, pretrained_run: Path) -> None:
    logdir = tmp_path / "killed"
    ckdir, metrics, log = logdir / "checkpoints", logdir / "metrics.jsonl", tmp_path / "killed.log"
    cmd = [str(BIN / "muse-wm"), "pretrain", "--config", "smoke", *wm_set(), "--logdir", str(logdir)]
    rng = random.Random(7)
    kills, interrupted_writes = 0, 0
    unrecorded: set[int] = set()  # complete steps killed between orbax's rename and their integrity record
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
        for s in after:  # every numbered folder is a finished checkpoint: orbax renames a step when it is complete
            step_dir = ckdir / str(s)
            if not (step_dir / "muse_files.json").exists():  # killed between that rename and the record
                assert (step_dir / "commit_success.txt").exists(), f"half-written checkpoint {s} looks finished"
                unrecorded.add(s)
    assert kills >= 2, f"only {kills} kills landed; the run is too short to test resume"
    assert interrupted_writes >= 1, "no kill landed inside a checkpoint write"

    resumable = _steps(ckdir)
    proc = cli("muse-wm", "pretrain", "--config", "smoke", *wm_set(), "--logdir", str(logdir), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for s in unrecorded & set(_steps(ckdir)):  # the next start gave them their record (Checkpointer._roll_forward)
        assert (ckdir / str(s) / "muse_files.json").exists(), f"step {s} never got its integrity record"
    if resumable:
        m = re.search(r"resuming .* at env step (\d+)", proc.stdout)
        assert m, proc.stdout[-2000:]
        assert int(m.group(1)) == resumable[-1], "resumed from something other than the last finished checkpoint"

    ref_ck = pretrained_run / "checkpoints"
    ref, got = _meta(ref_ck, _steps(ref_ck)[-1])["counters"], _meta(ckdir, _steps(ckdir)[-1])["counters"]
    assert (got["env_steps"], got["train_steps"]) == (ref["env_steps"], ref["train_steps"]), (got, ref)
    # Episodes still running at a checkpoint are saved with it and, after a kill, added to the replay cut
    # there (the simulator state is not saved), so a killed run finishes fewer episodes: at most one per
    # env per kill (the steps themselves are kept: see test_kills_right_after_checkpoints_lose_no_env_step).
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


def _replay_steps(ckdir: Path, step: int) -> tuple[int, int]:
    """(steps in the checkpoint's replay, steps of its saved unfinished episodes)."""
    from muse_jax.checkpoint import Checkpointer

    with Checkpointer(ckdir, read_only=True) as ck:
        _, replay, _ = ck.restore(step)
        partial = ck.restore_partial(step)
    stored = int(replay["episode_lengths"].sum()) if replay is not None else 0
    return stored, int(partial["episode_lengths"].sum()) if partial is not None else 0


def _new_checkpoint(ckdir: Path) -> Callable[[], bool]:
    """True as soon as a checkpoint newer than the ones present now is finished (its integrity record
    exists): the kill lands right after a checkpoint, when the most unfinished-episode steps are at risk."""
    before = set(_steps(ckdir))
    return lambda: any(s not in before and (ckdir / str(s) / "muse_files.json").exists() for s in _steps(ckdir))


@pytest.mark.slow
def test_kills_right_after_checkpoints_lose_no_env_step(tmp_path: Path, pretrained_run: Path) -> None:
    """Killed right after each of several checkpoints, pre-training resumes with every env step
    taken before the checkpoint in its replay (finished episodes plus the unfinished ones saved with the
    checkpoint), ends at the same env-step count as an uninterrupted run, and `step` in metrics.jsonl
    strictly increases across all the resumes."""
    logdir = tmp_path / "killed"
    ckdir, log = logdir / "checkpoints", tmp_path / "killed.log"
    cmd = [str(BIN / "muse-wm"), "pretrain", "--config", "smoke", *wm_set(), "--logdir", str(logdir)]
    kills = 0
    for _ in range(3):
        rc = kill_when(cmd, _new_checkpoint(ckdir), log=log)
        if rc is not None:
            assert rc == 0, log.read_text()[-3000:]
            break
        kills += 1
        last = _steps(ckdir)[-1]
        stored, partial = _replay_steps(ckdir, last)
        assert partial > 0, "the envs' unfinished episodes were not saved with the checkpoint"
        assert stored + partial == last, (stored, partial, last)  # every env step so far is in the checkpoint
    assert kills >= 2, f"only {kills} kills landed"

    proc = cli("muse-wm", "pretrain", "--config", "smoke", *wm_set(), "--logdir", str(logdir), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"resuming .* at env step (\d+) \(train step \d+, (\d+) replay steps", proc.stdout)
    assert m and int(m.group(2)) == int(m.group(1)), proc.stdout[-2000:]  # nothing before the checkpoint lost

    final = _steps(ckdir)[-1]
    meta = _meta(ckdir, final)["counters"]
    ref = _meta(pretrained_run / "checkpoints", _steps(pretrained_run / "checkpoints")[-1])["counters"]
    assert meta["env_steps"] == ref["env_steps"] == final
    assert meta["train_steps"] == ref["train_steps"]
    stored, partial = _replay_steps(ckdir, final)
    assert stored + partial == meta["env_steps"], (stored, partial, meta)
    assert meta["episodes_cut"] >= kills - 1  # the last resume may have had nothing left to checkpoint
    steps = [row["step"] for row in jsonl_lines(logdir / "metrics.jsonl")]
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False)), steps
    assert steps[-1] == meta["env_steps"]


@pytest.mark.slow
def test_truncated_newest_checkpoint_message_and_from_step(tmp_path: Path, pretrained_run: Path) -> None:
    """The damaged-checkpoint message gives command-line fixes; `--from-step` resumes from the earlier intact
    step, moves the damaged one aside (not deleted) and finishes the run."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(pretrained_run, run)
    ckdir = run / "checkpoints"
    newest, prev = _steps(ckdir)[-1], _steps(ckdir)[-2]
    victim = max((p for p in (ckdir / str(newest) / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    base = ["pretrain", "--config", "smoke", *wm_set("train.env_steps=250"), "--logdir", str(run)]
    proc = cli("muse-wm", *base, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("muse-wm:")]
    no_traceback(proc.stderr)
    assert len(err) == 1 and str(victim) in err[0] and "truncated" in err[0], proc.stderr[-2000:]
    assert f"--from-step {prev}" in err[0] and f"delete {ckdir / str(newest)}" in err[0], err[0]
    assert "restore(step" not in err[0]

    proc = cli("muse-wm", *base, "--from-step", str(prev), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"at env step {prev}" in proc.stdout, proc.stdout[-2000:]
    assert (run / "checkpoints_set_aside" / str(newest)).is_dir()
    assert _meta(ckdir, _steps(ckdir)[-1])["counters"]["env_steps"] == 250
    steps = [row["step"] for row in jsonl_lines(run / "metrics.jsonl")]
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False)), steps


@pytest.mark.slow
def test_from_step_that_does_not_exist(tmp_path: Path, pretrained_run: Path) -> None:
    proc = cli("muse-wm", "pretrain", "--config", "smoke", *wm_set(), "--logdir", str(pretrained_run),
               "--from-step", "7", timeout=300)
    assert proc.returncode == 2
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("muse-wm:")]
    no_traceback(proc.stderr)
    assert len(err) == 1 and "--from-step 7" in err[0] and "available" in err[0], proc.stderr[-2000:]


@pytest.mark.slow
def test_disk_full_during_checkpoint_stops_with_one_line_and_keeps_the_last_step(tmp_path: Path) -> None:
    from fault_helpers import can_mount_private_fs, cli_on_small_fs, error_line

    if not can_mount_private_fs():
        pytest.skip("no user+mount namespaces here (unshare -rm)")
    mount, keep = tmp_path / "disk", tmp_path / "keep"
    proc = cli_on_small_fs("fill-after:run/checkpoints/50/muse_files.json", mount, keep, "muse-wm", "pretrain",
                           "--config", "smoke", *wm_set(), "--logdir", str(mount / "run"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = error_line(proc.stderr, "muse-wm")
    assert err.startswith("muse-wm: stopped: cannot write checkpoint step 100"), err
    assert "No space left on device" in err and "step 50" in err and "kept" in err and "free at least" in err, err
    from muse_jax.checkpoint import verify_integrity

    assert _steps(keep / "run" / "checkpoints") == [50]
    verify_integrity(keep / "run" / "checkpoints" / "50")  # the kept step is intact
    assert not [p for p in (keep / "run" / "checkpoints").iterdir() if "tmp" in p.name], "half-written step left"
    jsonl_lines(keep / "run" / "metrics.jsonl")  # every line parses


def test_partial_episodes_round_trip_whatever_keys_they_have() -> None:
    """The unfinished episodes saved with a checkpoint keep every key a step has (e.g. latents a
    replay may store), with time-to-success labels from the steps so far, and go into a Replay."""
    from muse_jax.loops.collect import Episode
    from muse_jax.loops.pretrain import partial_state
    from muse_jax.replay import Replay, unpack_episodes

    rng = np.random.default_rng(0)

    def episode(T: int, success_at: int | None) -> Episode:
        data = {"proprio": rng.normal(size=(T, 5)).astype(np.float32), "latent": rng.normal(size=(T, 3, 2)),
                "action": rng.normal(size=(T, 4)).astype(np.float32), "reward": np.zeros(T, np.float32),
                "is_first": np.eye(1, T, dtype=bool)[0], "is_terminal": np.zeros(T, bool),
                "task_id": np.ones(T, np.int32)}
        success = np.zeros(T, bool)
        if success_at is not None:
            success[success_at:] = True
        return Episode("reach-v3", data, success, np.zeros(T, np.float32), np.zeros(T, np.float32))

    eps = [episode(7, None), None, episode(4, 2)]
    state = partial_state(eps)
    assert state is not None and list(state["episode_lengths"]) == [7, 4]
    back = unpack_episodes(state)
    assert len(back) == 2
    for got, want in zip(back, [eps[0], eps[2]], strict=True):
        for k, v in want.data.items():
            np.testing.assert_array_equal(got[k], v)
    np.testing.assert_array_equal(back[0]["time_to_success"], -np.ones(7))
    np.testing.assert_array_equal(back[1]["time_to_success"], [2, 1, 0, 0])
    replay = Replay(100, 2)
    for ep in back:
        replay.add_episode(ep)
    assert len(replay) == 11 and replay.sample(3)["latent"].shape == (3, 2, 3, 2)
    assert partial_state([None, None]) is None
