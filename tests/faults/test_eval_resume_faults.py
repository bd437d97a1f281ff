"""Fault 6: an evaluation killed mid-way and started again with the same output folder finishes
with every episode exactly once.

`muse-wm adapt` is SIGKILLed right after a round's task checkpoint is written (before its records
reach episodes.jsonl: the hardest moment). `muse-llm run` is SIGKILLed mid-run on the real Minecraft
env, then a torn half line is appended to episodes.jsonl as a kill mid-write would leave it.
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fault_helpers import BIN, ROOT, cli, jsonl_lines, kill_when

HERE = Path(__file__).resolve().parent


def _counts(path: Path) -> collections.Counter:
    return collections.Counter((str(r["task"]), int(r["episode"])) for r in jsonl_lines(path))


@pytest.mark.slow
def test_adapt_killed_after_checkpoint_resumes_exactly_once(tmp_path: Path, pretrained_run: Path) -> None:
    out, task = tmp_path / "adapt", "coffee-button-v3"
    cmd = [str(BIN / "muse-wm"), "adapt", "--checkpoint", str(pretrained_run), "--agent", "muse",
           "--tasks", task, "--episodes", "4", "--logdir", str(out)]
    task_ck = out / "tasks" / task / "checkpoints"

    def first_round_saved() -> bool:
        return task_ck.exists() and any(p.name.isdigit() for p in task_ck.iterdir())

    rc = kill_when(cmd, first_round_saved, log=tmp_path / "adapt.log", poll=0.005)
    assert rc is None, "adapt ended before the kill point"
    proc = cli("muse-wm", *cmd[1:], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = _counts(out / "episodes.jsonl")
    assert counts == {(task, e): 1 for e in range(4)}, counts
    assert (out / "results.json").exists()


def _after_lines(path: Path, n: int, delay_s: float) -> Callable[[], bool]:
    hit: list[float] = []

    def ready() -> bool:
        if not hit and path.exists() and len(path.read_text().splitlines()) >= n:
            hit.append(time.monotonic())
        return bool(hit) and time.monotonic() - hit[0] >= delay_s
    return ready


@pytest.mark.slow
def test_muse_llm_run_killed_twice_then_torn_line_resumes_exactly_once(tmp_path: Path) -> None:
    out = tmp_path / "llm"
    tasks, episodes = ["mine_log", "mine_sand", "craft_planks"], 3
    args = ["run", "--env", "minecraft", "--agent", "scripted-test", "--model", "smollm2",
            "--tasks", ",".join(tasks), "--episodes", str(episodes), "--max-steps", "6", "--out", str(out),
            "--no-progress"]
    cmd = [str(BIN / "muse-llm"), *args]
    rng = random.Random(3)
    path = out / "episodes.jsonl"
    env = {"PYTHONPATH": f"{HERE}:{ROOT}"}
    for n in (1, 4):
        rc = kill_when(cmd, _after_lines(path, n, rng.uniform(0.0, 0.3)), log=tmp_path / "llm.log", timeout=300,
                       env=env)
        assert rc is None, (tmp_path / "llm.log").read_text()[-3000:]
    assert 1 <= len(jsonl_lines(path)) < len(tasks) * episodes
    with open(path, "a") as f:  # a kill in the middle of a write
        f.write('{"env": "minecraft", "task": "mine_sand", "agent": "scripted-te')
    proc = cli("muse-llm", *args, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = _counts(path)
    assert counts == {(t, e): 1 for t in tasks for e in range(episodes)}, counts
    # the scripted replies include empty, overlong, JSON and wordless output: invalid actions, not errors
    assert all(r["reason"] is None and r["steps"] >= 1 for r in jsonl_lines(path)), \
        [r["reason"] for r in jsonl_lines(path)]
