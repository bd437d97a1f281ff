"""benchmarks/adapt_tasks.py: tiny settings print one JSON line, and both task layouts run the same protocol."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from muse_common.files import read_jsonl

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "adapt_tasks.py"
COUNTERS = ("episode", "length", "env_step_start", "env_step_end", "train_step_start", "train_step_end")


@pytest.mark.slow
@pytest.mark.long  # test_pretrain_adapt.py adapts two tasks side by side, episode by episode
def test_vmapped_and_one_at_a_time_adapt_time_and_agree_on_the_protocol(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--pretrain-config", "smoke", "--tasks", "2",
                           "--episodes", "2", "--set", "env.max_episode_steps=20", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec["tasks"] == 2 and rec["episodes_per_task"] == 2
    assert rec["vmapped_s"] > 0 and rec["one_at_a_time_s"] > 0
    assert rec["speedup"] == pytest.approx(rec["one_at_a_time_s"] / rec["vmapped_s"], rel=0.01)
    runs = {}
    for name in ("vmapped", "one_at_a_time"):
        recs = sorted(read_jsonl(tmp_path / name / "episodes.jsonl"), key=lambda r: (r["task"], r["episode"]))
        runs[name] = [(r["task"], *(r[k] for k in COUNTERS)) for r in recs]
        assert len(recs) == 4
    # same per-task sequencing whether the tasks ran side by side or one after another
    assert runs["vmapped"] == runs["one_at_a_time"]
    layout = json.loads((tmp_path / "one_at_a_time" / "adapt.json").read_text())
    assert layout["parallel_tasks"] is False


def test_compare_overlap_compiles_first_then_alternates_the_order_by_round(tmp_path, monkeypatch):
    """`--compare overlap`: an untimed warm-up run per setting compiles (a changed setting recompiles), then each
    round times both settings, the order alternating so that a change of load hits both; the record's medians
    and speed-up follow the times."""
    import argparse

    sys.path.insert(0, str(REPO))
    from benchmarks import adapt_tasks

    calls = []
    seconds = {False: iter([9.0, 4.0, 5.0, 6.0]), True: iter([8.0, 2.0, 3.0, 4.0])}

    def fake_time_adapt(checkpoint, agent, out, tasks, episodes, parallel, overrides):
        on = overrides["adapt.overlap_collect"]
        calls.append((out.name, on, parallel, overrides["env.max_episode_steps"]))
        return next(seconds[on])

    monkeypatch.setattr(adapt_tasks, "time_adapt", fake_time_adapt)
    monkeypatch.setattr(adapt_tasks, "checkpoint_config", lambda checkpoint: "quickstart")
    args = argparse.Namespace(agent="muse", episodes=2, rounds=3, overrides=["env.max_episode_steps=20"])
    rec = adapt_tasks.compare_overlap("ck", args, ["a", "b"], {"env.max_episode_steps": 20}, tmp_path)
    assert calls == [("warmup", False, True, 20), ("warmup-overlap", True, True, 20),
                     ("serial-0", False, True, 20), ("overlap-0", True, True, 20),
                     ("overlap-1", True, True, 20), ("serial-1", False, True, 20),
                     ("serial-2", False, True, 20), ("overlap-2", True, True, 20)]
    assert rec["checkpoint_config"] == "quickstart" and rec["warmup_s"] == 17.0
    assert rec["serial_s"] == [4.0, 5.0, 6.0] and rec["overlap_s"] == [2.0, 3.0, 4.0]
    assert rec["serial_median_s"] == 5.0 and rec["overlap_median_s"] == 3.0
    assert rec["speedup"] == pytest.approx(5 / 3, rel=1e-3)
