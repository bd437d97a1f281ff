"""benchmarks/host_memory.py: each variant is its own benchmark process under exactly its own malloc
environment, and its records say which variant they were made under."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import host_memory
from benchmarks.report import HOST_MALLOC_VARIABLES

REPO = Path(__file__).resolve().parents[2]


def test_a_variant_replaces_every_inherited_malloc_setting(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    defaults = host_memory.variant_env("defaults")
    assert not any(k in defaults for k in HOST_MALLOC_VARIABLES)
    assert defaults["PATH"] == os.environ["PATH"]  # everything else is inherited
    kept = host_memory.variant_env("kept_arenas")
    assert "MALLOC_ARENA_MAX" not in kept and "GLIBC_TUNABLES" not in kept
    assert kept["MALLOC_MMAP_MAX_"] == "0"


def test_arguments_after_the_separator_go_to_the_benchmark():
    args, rest = host_memory.parse_args(["--variants", "defaults", "hugetlb", "--rounds", "3", "--", "--size", "x"])
    assert args.variants == ["defaults", "hugetlb"] and args.rounds == 3 and rest == ["--size", "x"]
    args, rest = host_memory.parse_args(["--bench", "loop", "--", "--loop", "--updates", "2"])
    assert rest == ["--updates", "2"]  # --loop is the bench's own fixed flag
    with pytest.raises(SystemExit):
        host_memory.parse_args(["--", "--out", "x.jsonl"])
    with pytest.raises(SystemExit):
        host_memory.parse_args(["--rounds", "0"])


def test_each_round_runs_every_variant_in_its_own_process_and_tags_its_records(monkeypatch, tmp_path):
    calls = []

    def fake_run(cmd, env, capture_output, text):
        calls.append((cmd, {k: env[k] for k in HOST_MALLOC_VARIABLES if k in env}))
        lines = [{"benchmark": "collect_overhead_loop", "summary": False, "ratio": 0.5},
                 {"benchmark": "collect_overhead_loop", "summary": True, "ratio": len(calls)},
                 {"benchmark": "official_speed", "size": "nano"}]
        return subprocess.CompletedProcess(cmd, 0, stdout="banner\n" + "\n".join(map(json.dumps, lines)), stderr="")

    monkeypatch.setattr(host_memory.subprocess, "run", fake_run)
    out = tmp_path / "r.jsonl"
    records = host_memory.main(["--bench", "loop", "--variants", "defaults", "hugetlb", "--rounds", "2",
                                "--out", str(out), "--", "--updates", "4"])
    assert [(r["variant"], r["round"], r["ratio"]) for r in records] == [
        ("defaults", 1, 1), ("hugetlb", 1, 2), ("defaults", 2, 3), ("hugetlb", 2, 4)]
    assert [c[1] for c in calls] == [{}, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}] * 2
    assert all(c[0][-3:] == ["--loop", "--updates", "4"] and c[0][-4].endswith("collect_overhead.py") for c in calls)
    assert [json.loads(line) for line in out.read_text().splitlines()] == records


def test_a_failed_benchmark_run_is_one_line(monkeypatch):
    monkeypatch.setattr(host_memory.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 2, stdout="", stderr="Traceback ...\nValueError: bad size\n"))
    with pytest.raises(SystemExit, match=r"speed.py under 'kept' exited 2: ValueError: bad size"):
        host_memory.main(["--variants", "kept", "--rounds", "1"])


@pytest.mark.long  # two real train-step benchmark processes
def test_the_train_step_is_timed_under_each_variant_with_its_page_faults():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "host_memory.py"), "--variants", "defaults",
                           "kept", "--rounds", "1", "--", "--ours-only", "--size", "nano", "--batch", "2", "--seq", "4",
                           "--rounds", "1", "--steps", "2"], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    defaults, kept = (json.loads(line) for line in proc.stdout.splitlines())
    assert defaults["variant"] == "defaults" and "host_malloc" not in defaults
    assert kept["variant"] == "kept" and kept["host_malloc"]["MALLOC_MMAP_MAX_"] == "0"
    assert all(isinstance(r["ours_minor_faults_per_step"], (int, float)) and r["ours_minor_faults_per_step"] >= 0
               for r in (defaults, kept))
