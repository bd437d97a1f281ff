"""benchmarks/wm_throughput.py: the tiny documented command prints one complete JSON line, fast enough."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "wm_throughput.py"

REQUIRED = ("train_steps_per_s", "frames_per_s", "policy_steps_per_s", "regulation_decisions_per_s",
            "model_gflops_per_step", "achieved_gflops_per_s", "peak_matmul_gflops_per_s",
            "train_step_median_s", "compile_s")


def _run(*flags: str, timeout: int = 290) -> tuple[dict, float]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


@pytest.mark.slow
def test_tiny_benchmark_prints_json_line_with_positive_finite_figures(tmp_path):
    out_file = tmp_path / "bench.jsonl"
    record, wall = _run("--size", "tiny", "--batch", "4", "--seq", "16", "--steps", "3", "--json",
                        "--out", str(out_file))
    assert wall < 300, f"took {wall:.0f}s; the target is under 5 minutes on CPU"
    for key in REQUIRED:
        assert key in record, key
        assert isinstance(record[key], float) and math.isfinite(record[key]) and record[key] > 0, (key, record[key])
    assert record["size"] == "tiny" and record["batch"] == 4 and record["seq"] == 16
    assert len(record["train_step_times_s"]) == 3
    assert record["frames_per_s"] == pytest.approx(4 * 16 * record["train_steps_per_s"])
    assert record["achieved_gflops_per_s"] == pytest.approx(
        record["model_gflops_per_step"] * record["train_steps_per_s"])
    assert record["train_step_median_s"] == pytest.approx(float(np.median(record["train_step_times_s"])))
    assert math.isfinite(record["final_loss"])
    assert json.loads(out_file.read_text().strip().splitlines()[-1])["frames_per_s"] == record["frames_per_s"]


def test_synthetic_batch_matches_the_batch_contract():
    sys.path.insert(0, str(REPO))
    from benchmarks.wm_throughput import synthetic_batch, synthetic_obs
    from muse_jax.agent import ObsSpec

    spec = ObsSpec(image_shape=(16, 16, 3), proprio_dim=24, act_dim=6, num_tasks=3)
    b = synthetic_batch(spec, 2, 5)
    assert b["image"].shape == (2, 5, 16, 16, 3) and b["image"].dtype == np.uint8
    assert b["proprio"].shape == (2, 5, 24) and b["proprio"].dtype == np.float32
    assert b["action"].shape == (2, 5, 6) and np.all(np.abs(b["action"]) <= 1)
    assert b["is_first"][:, 0].all() and not b["is_first"][:, 1:].any()
    assert np.all(b["action"][:, 0] == 0)  # action before the first observation is zero
    assert b["task_id"].dtype == np.int32 and b["task_id"].min() >= 1 and b["task_id"].max() <= 3
    assert b["time_to_success"].min() >= -1
    obs = synthetic_obs(spec, 3)
    assert obs["proprio"].shape == (3, 24) and obs["is_first"].shape == (3,)


def test_bad_flags_are_rejected(capsys):
    sys.path.insert(0, str(REPO))
    from benchmarks.wm_throughput import build_config, parse_args

    with pytest.raises(SystemExit):
        parse_args(["--batch", "0"])
    assert "--batch must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="not a preset"):
        build_config("size3m", 24, False, 64, 16, 64)
    with pytest.raises(SystemExit, match="--obs-dim"):
        build_config("tiny", 0, False, 64, 16, 64)
    cfg = build_config("size12m", 24, False, 64, 16, 64, ["model.compute_dtype=bfloat16"])
    assert (cfg.model.deter, cfg.model.units, cfg.model.compute_dtype) == (2048, 256, "bfloat16")
    assert not cfg.env.image and cfg.env.proprio and cfg.regulation.strategy == "gradient"


@pytest.mark.slow
@pytest.mark.long  # test_seeds.py pins the vmapped seeds against one-seed runs
def test_seeds_flag_times_n_seeds_in_one_vmapped_step_beside_one_seed():
    record, _ = _run("--size", "tiny", "--batch", "4", "--seq", "16", "--steps", "2", "--seeds", "3", "--json")
    assert record["seeds"] == 3 and len(record["seeds_train_step_times_s"]) == 2
    for key in ("seeds_train_step_median_s", "seeds_ratio", "seeds_per_seed_s", "seeds_compile_s"):
        assert isinstance(record[key], float) and math.isfinite(record[key]) and record[key] > 0, key
    assert record["seeds_ratio"] == pytest.approx(record["seeds_train_step_median_s"] / record["train_step_median_s"])


@pytest.mark.slow
@pytest.mark.long  # test_parallel.py pins the sharded step against one device
def test_host_devices_flag_shards_the_step_over_host_devices_with_the_one_device_loss():
    """`--host-devices 2` (docs/speed.md: data parallel over the CPU's cores) trains on 2 host devices and ends
    with the 1-device run's loss up to float32 reordering (the warm-up step and the timed step alike)."""
    flags = ("--size", "tiny", "--batch", "4", "--seq", "8", "--steps", "1", "--matmul-n", "64", "--json")
    one, _ = _run(*flags)
    two, _ = _run(*flags, "--host-devices", "2")
    assert one["devices"] == 1 and two["devices"] == 2
    assert two["final_loss"] == pytest.approx(one["final_loss"], rel=1e-5)


def test_host_devices_flag_is_checked(capsys):
    sys.path.insert(0, str(REPO))
    from benchmarks.wm_throughput import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--batch", "6", "--host-devices", "4"])
    assert "--batch 6 must be a multiple of --host-devices 4" in capsys.readouterr().err
    for n in ("-1", "100000"):  # no upper bound used to set up 100000 devices before the first step
        with pytest.raises(SystemExit) as exit_:
            parse_args(["--batch", "100000", "--host-devices", n])
        assert exit_.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
        assert f"--host-devices {n}: give 1 to " in line and "or 0 for jax's default" in line, line
        assert "Traceback" not in line
    assert parse_args(["--batch", "8", "--host-devices", "8"]).host_devices == 8
