"""benchmarks/llm_sampling.py: tiny settings print one JSON line with both timings and their ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "llm_sampling.py"


@pytest.mark.slow
def test_tiny_sampling_benchmark_reports_both_sides_and_their_ratio():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--rollouts", "3", "--max-tokens", "4",
                           "--prompt-steps", "2", "--repeats", "1"], capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert record["rollouts"] == 3 and record["max_tokens"] == 4
    assert record["batched_s"] > 0 and record["sequential_s"] > 0
    assert record["speedup"] == pytest.approx(record["sequential_s"] / record["batched_s"], rel=0.01)
    assert record["prompt_tokens"] > 50


def test_bad_flag_is_one_line_naming_it():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--rollouts", "0"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert "--rollouts must be >= 1" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_served_sampling_benchmark_starts_muse_llm_serve_with_the_engine_asked():
    """`--serve --engine transformers`: the benchmark measures through a real `muse-llm serve` it starts and stops."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--serve", "--engine", "transformers", "--threads", "1",
                           "--rollouts", "2", "--max-tokens", "4", "--prompt-steps", "2", "--repeats", "1"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert record["backend"] == "openai-server (muse-llm serve --engine transformers)"
    assert record["batched_s"] > 0 and record["sequential_s"] > 0 and record["prompt_tokens"] is None
