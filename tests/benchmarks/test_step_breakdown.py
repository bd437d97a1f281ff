"""benchmarks/step_breakdown.py: a tiny run prints one JSON line with every part timed and a positive share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "step_breakdown.py"
PARTS = ("full", "wm_fwd", "wm_grad", "obs_fwd", "obs_grad", "imag_fwd", "ac_fwd", "ac_grad", "opt")


@pytest.mark.long  # a speed script's smoke run
def test_tiny_breakdown_prints_every_part_with_positive_shares():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--size", "nano", "--batch", "2", "--seq", "4", "--steps", "1"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert record["benchmark"] == "step_breakdown" and record["size"] == "nano" and record["steps"] == 1
    assert set(record["parts"]) == set(PARTS)
    for name, part in record["parts"].items():
        for key in ("wall_s", "cpu_s", "share_wall", "share_cpu"):
            assert part[key] > 0, (name, key, part[key])
    assert record["parts"]["full"]["share_cpu"] == 1.0
    assert record["sum_grad_parts_share"] > 0 and record["load"] >= 0
