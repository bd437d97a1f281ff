"""benchmarks/regulation_scaling.py and collect_overhead.py at tiny settings print one complete JSON line;
every speed benchmark in benchmarks/ documents its flags in --help.

llm_sampling.py and adapt_tasks.py have their own tiny runs (tests/llm_side/test_llm_sampling_benchmark.py,
tests/muse_jax/test_adapt_tasks_benchmark.py); only their --help is checked here.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


def _run(script: str, *flags: str, timeout: int = 600, **env_vars: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), **env_vars)
    return subprocess.run([sys.executable, str(BENCH / script), *flags], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)


def _last_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("script, flag", [("regulation_scaling.py", "--strategies"), ("collect_overhead.py", "--mode"),
                                          ("llm_sampling.py", "--rollouts"), ("adapt_tasks.py", "--tasks")])
def test_every_speed_benchmark_documents_its_flags(script, flag):
    proc = _run(script, "--help", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert flag in proc.stdout


@pytest.mark.long  # a speed script's smoke run; test_regulation.py pins the strategies
def test_regulation_scaling_times_every_strategy_at_every_env_count():
    rec = _last_json(_run("regulation_scaling.py", "--size", "nano", "--envs", "1", "16", "--steps", "2",
                          "--set", "regulation.horizon=2", "--set", "regulation.num_rollouts=2",
                          "--set", "regulation.mcts_simulations=2", "--set", "regulation.mcts_branching=2"))
    assert rec["benchmark"] == "regulation_scaling" and rec["envs"] == [1, 16]
    assert set(rec["strategies"]) == {"gradient", "rollouts", "mcts"}
    for s, r in rec["strategies"].items():
        assert set(r["latency_s"]) == {"1", "16"}, s
        assert all(math.isfinite(v) and v > 0 for v in r["latency_s"].values()), (s, r)
        assert r["decisions_per_s"]["16"] == pytest.approx(16 / r["latency_s"]["16"])
        assert r["ratio_16_vs_1"] == pytest.approx(r["latency_s"]["16"] / r["latency_s"]["1"])
        assert r["horizon"] == 2


def test_regulation_scaling_rejects_bad_env_counts():
    proc = _run("regulation_scaling.py", "--envs", "0", timeout=300)
    assert proc.returncode != 0 and "--envs must all be >= 1" in proc.stderr


@pytest.mark.slow
def test_collect_overhead_compares_collector_and_raw_env_on_the_same_envs():
    rec = _last_json(_run("collect_overhead.py", "--config", "smoke", "--steps", "5", "--mode", "muse"))
    assert rec["benchmark"] == "collect_overhead" and rec["num_envs"] == 2 and rec["env_steps"] == 10
    assert rec["raw_env_steps_per_s"] > 0 and rec["collector_env_steps_per_s"] > 0
    assert rec["raw_env_steps_per_s"] == pytest.approx(10 / rec["raw_s"])
    assert rec["overhead"] == pytest.approx(rec["raw_env_steps_per_s"] / rec["collector_env_steps_per_s"] - 1)


@pytest.mark.slow
@pytest.mark.long  # a speed script's smoke run
def test_collect_overhead_loop_times_a_learning_run_with_and_without_overlap(tmp_path):
    proc = _run("collect_overhead.py", "--loop", "--config", "smoke", "--updates", "3", "--warmup-updates", "1",
                TMPDIR=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not list(tmp_path.glob("collect_overhead_loop_*"))  # each run's temporary folder is removed
    lines = [json.loads(x) for x in proc.stdout.strip().splitlines() if x.startswith("{")]
    runs, rec = lines[:-1], lines[-1]
    assert [r["overlap_collect"] for r in runs] == [False, True]
    for r in runs:
        assert r["updates"] >= 3 and r["loop_updates_per_s"] == pytest.approx(r["updates"] / r["loop_s"])
        assert r["ratio"] == pytest.approx(r["loop_updates_per_s"] / r["bench_updates_per_s"])
        assert all(math.isfinite(v) for v in r["per_update_s"].values())
    assert r["per_update_s"]["prefetch"] > 0 and runs[0]["per_update_s"]["prefetch"] == 0
    assert rec["summary"] and rec["ratio"] == rec["overlap_ratio"] == runs[1]["ratio"]
    assert rec["overlap_speedup"] == pytest.approx(runs[1]["loop_updates_per_s"] / runs[0]["loop_updates_per_s"])
    assert all(0 < r["per_update_s"]["env"] < r["loop_s"] / r["updates"] for r in runs)  # Collector.env_s


def test_collect_overhead_loop_closes_the_run_and_removes_its_folder_on_an_error(tmp_path, monkeypatch):
    """A run that fails mid-loop still closes its logger and envs (in that order) and leaves no temporary
    folder behind."""
    import tempfile
    import types

    sys.path.insert(0, str(REPO))
    from benchmarks import collect_overhead
    from muse_jax.config import load_config
    from muse_jax.loops import pretrain

    closed, made = [], []

    class FailingRun:
        def __init__(self, cfg, logdir, ckpt, total, echo, desc):
            made.append(logdir)
            (logdir / "metrics.jsonl").write_text("{}\n")
            noop = lambda *a, **k: None  # noqa: E731
            self.collector = types.SimpleNamespace(step=noop, prefetch=noop, env_s=0.0,
                                                   close=lambda: closed.append("envs"))
            self.logger = types.SimpleNamespace(close=lambda: closed.append("logger"))
            self.driver = types.SimpleNamespace(train_steps=0, flush_context=noop, state=None)
            self.replay = types.SimpleNamespace(sample=noop)
            self.train = self.log = noop

        def loop(self, mode):
            raise RuntimeError("the envs failed")

    monkeypatch.setattr(pretrain, "PretrainingRun", FailingRun)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError, match="the envs failed"):
        collect_overhead.time_loop(load_config("smoke"), False, 1, 1, "dreamer")
    assert closed == ["logger", "envs"] and len(made) == 1 and made[0].parent == tmp_path
    assert not list(tmp_path.glob("collect_overhead_loop_*"))


def test_collect_overhead_bad_config_is_one_line():
    proc = _run("collect_overhead.py", "--config", "no-such-config", timeout=300)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "collect_overhead:" in proc.stderr


@pytest.mark.long  # a speed script's smoke run
def test_official_speed_ours_only_records_startup_and_step_times():
    """benchmarks/official/speed.py --ours-only (a machine without the official code, e.g. a GPU lease):
    one record per size with the time to the first update, then the summary."""
    proc = _run("official/speed.py", "--ours-only", "--size", "nano", "--batch", "2", "--seq", "4", "--rounds", "1",
                "--steps", "1", "--dtype", "bfloat16")
    summary = _last_json(proc)
    rec = json.loads(proc.stdout.strip().splitlines()[-2])
    assert rec["order"] == "ours only" and rec["dtype"] == "bfloat16" and rec["platform"] == "cpu"
    assert 0 < rec["ours_init_s"] < rec["ours_ready_s"] and rec["ours_compile_s"] < rec["ours_ready_s"]
    assert "official_train_step_median_s" not in rec
    assert summary["ratios_official_over_ours"] == {"nano": None}


def _official_worker_module():
    """benchmarks/official/official_speed_worker.py, which runs as a script in the official's venv."""
    sys.path.insert(0, str(BENCH / "official"))
    try:
        import official_speed_worker
    finally:
        sys.path.pop(0)
    return official_speed_worker


def test_official_worker_passes_positional_jit_options_as_keywords():
    """jax >= 0.5 takes jax.jit's options as keywords only; dreamer 3.3.1 passes them positionally."""
    import types

    worker = _official_worker_module()
    calls = []
    fake = types.SimpleNamespace(jit=lambda fun, **kw: calls.append((fun, kw)) or fun)
    worker._keyword_jit(fake)
    worker._keyword_jit(fake)  # idempotent
    fn = lambda x: x  # noqa: E731
    assert fake.jit(fn, None, None, (1,)) is fn
    assert calls[-1] == (fn, {"in_shardings": None, "out_shardings": None, "static_argnums": (1,)})
    assert fake.jit(static_argnums=0)(fn) is fn  # the decorator form
    assert calls[-1] == (fn, {"static_argnums": 0})


def test_official_worker_turns_the_officials_deterministic_ops_off_only_when_asked():
    """configs.yaml has no key for it: the setting reaches the official's `internal.setup` through a wrapper."""
    import types

    worker = _official_worker_module()
    seen = []

    def setup(platform=None, deterministic=True, **kw):  # the official's signature, in short
        seen.append(deterministic)

    internal = types.SimpleNamespace(setup=setup)
    worker._deterministic_ops(internal, True)
    assert internal.setup is setup  # the default leaves the official untouched
    worker._deterministic_ops(internal, False)
    internal.setup(platform="cuda")
    internal.setup(platform="cuda", deterministic=True)  # whatever the caller passes
    assert seen == [False, False]
