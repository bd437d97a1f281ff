"""benchmarks/metaworld_learning.py: a tiny real run writes its curve (JSON lines + PNG) and a JSON summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "metaworld_learning.py"
POINT_KEYS = {"task", "agent", "env_steps", "success_rate", "episodes", "prefill", "train_steps", "device", "size",
              "train_ratio"}
SUMMARY_KEYS = {"task", "agent", "env_steps", "points", "final_success_rate", "final_episodes",
                "published_dreamerv3_100k", "random_policy_success_rate", "device", "accelerator", "size",
                "train_ratio", "wall_s", "curve", "plot"}


def _run(*flags: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)


@pytest.mark.slow
def test_tiny_learning_run_writes_curve_and_summary(tmp_path):
    out = tmp_path / "curve"
    proc = _run("--task", "coffee-button-v3", "--env-steps", "240", "--episode-steps", "40", "--num-envs", "2",
                "--size", "nano", "--batch", "4", "--seq", "8", "--train-ratio", "8", "--prefill", "80",
                "--log-every", "80", "--random-episodes", "2", "--set", "model.bins=31", "--set", "model.mlp_layers=1",
                "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    summary, points = lines[-1], lines[:-1]
    assert SUMMARY_KEYS <= set(summary), set(summary) ^ SUMMARY_KEYS
    assert summary["published_dreamerv3_100k"] == 0.98 and summary["size"] == "nano"
    assert summary["random_episodes"] == 2 and 0.0 <= summary["random_policy_success_rate"] <= 1.0
    assert points and all(POINT_KEYS <= set(p) for p in points)
    assert [p["env_steps"] for p in points] == sorted(p["env_steps"] for p in points)
    assert all(0.0 <= p["success_rate"] <= 1.0 and p["episodes"] >= 1 for p in points)
    assert any(not p["prefill"] and p["train_steps"] > 0 for p in points)  # the agent trained, not just prefill
    assert summary["points"] == len(points)
    assert [json.loads(x) for x in (out / "curve.jsonl").read_text().splitlines()] == points
    assert (out / "curve.png").stat().st_size > 1000


def test_bad_task_is_one_clear_line(tmp_path):
    proc = _run("--task", "coffee-buton-v3", "--env-steps", "10", "--out", str(tmp_path / "x"), timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "coffee-buton-v3" in proc.stderr and "coffee-button-v3" in proc.stderr  # names it and suggests the fix
