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
def test_served_agent_steps_of_a_transformers_folder_time_the_agents_asked(tmp_path):
    """`--serve --engine transformers --model hf:DIR --agent-steps 1 --agents react`: a transformers folder (here the
    test model's unpacked copy, as a trained actor would be) is served by a real `muse-llm serve` the benchmark
    starts and stops, ReAct alone plays a step of a real ALFWorld game through it, and the record is appended."""
    from llm_side.backends.local import unpacked_packaged
    from llm_side.backends.models import MODELS

    folder = unpacked_packaged(MODELS["smollm2"])
    out = tmp_path / "steps.jsonl"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--serve", "--engine", "transformers", "--threads", "1",
                           "--model", f"hf:{folder}", "--agent-steps", "1", "--agents", "react", "--repeats", "1",
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert json.loads(out.read_text().splitlines()[-1]) == record
    assert record["backend"] == "openai-server (muse-llm serve --engine transformers)"
    assert record["model"] == f"hf:{folder}" and record["server_threads"] == 1 and record["agents"] == ["react"]
    assert len(record["react_steps_s"]) == 1 and record["react_s_per_step"] > 0
    assert record["react_mean_s_per_step"] == record["react_s_per_step"]
    assert record["react_won"] in ([False], [True])
    assert record["muse_steps_s"] == [] and record["muse_s_per_step"] is None and record["muse_over_react"] is None


def test_serve_with_a_running_server_is_one_line_saying_what_to_pass():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--serve", "--model", "openai:http://127.0.0.1:9:m"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "drop --serve" in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2


@pytest.mark.parametrize("agents", ["", "react,reflexion"])
def test_agents_other_than_react_and_muse_are_one_line(agents):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--agent-steps", "1", "--agents", agents],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--agents takes react, muse or react,muse" in proc.stderr
