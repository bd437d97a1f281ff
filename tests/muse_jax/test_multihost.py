"""Multi-host for real: two processes on this machine (loopback only), each with 2 forced CPU devices,
join one `jax.distributed` job (Gloo CPU collectives): the sharded train step over the 4-device global
mesh equals the single-process step, and `muse-wm pretrain --set parallel.distributed=true` trains,
checkpoints, exits cleanly and resumes on both processes.

The device count and the distributed client are fixed when jax starts, so every process here is a
fresh interpreter; the coordinator listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

TRAIN_STEP = """
    import json, os
    import jax, numpy as np
    from flax import nnx
    from benchmarks.wm_throughput import synthetic_batch
    from muse_jax import parallel
    from muse_jax.agent import ObsSpec, create_learner, make_train_step
    from muse_jax.config import load_config

    cfg = load_config("smoke", {"replay.batch_size": 4, "replay.seq_len": 8, "behavior.imag_horizon": 3,
                                "parallel.distributed": os.environ.get("JAX_NUM_PROCESSES") is not None})
    parallel.init_distributed(cfg)
    spec = ObsSpec.from_config(cfg, proprio_dim=7, act_dim=3)
    learner = create_learner(cfg, spec, seed=0)
    batch = synthetic_batch(spec, 4, 8)                      # the global batch; each process feeds its rows
    mesh = parallel.make_mesh()
    rows = parallel.local_batch_size(4, mesh)
    mine = {k: v[jax.process_index() * rows:(jax.process_index() + 1) * rows] for k, v in batch.items()}
    state = parallel.shard_state(learner.state, mesh)
    args = (state, parallel.shard_batch(mine, mesh), jax.random.key(3))
    # as TrainDriver does: both processes start the first (collective) run together, however long each compiles
    step = parallel.compile_then_meet(make_train_step(cfg, learner.graphdef, mesh), *args)
    state, metrics = step(*args)
    params = parallel.host_local(nnx.state(nnx.merge(learner.graphdef, state).agent, nnx.Param))
    leaves = [np.asarray(x) for x in jax.tree.leaves(params)]
    print(json.dumps({"process": jax.process_index(), "processes": jax.process_count(),
                      "devices": jax.device_count(), "local_devices": jax.local_device_count(),
                      "loss": float(np.asarray(parallel.host_local(metrics["loss/total"]))),
                      "params": [float(np.abs(x).sum()) for x in leaves],
                      "first": leaves[0].ravel()[:8].tolist()}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(devices: int, **extra: str) -> dict[str, str]:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu",
               PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        env.pop(k, None)
    env.update(extra)
    return env


def _two_processes(argv: list[str], timeout: int, **extra: str) -> list[subprocess.CompletedProcess]:
    """Run `argv` as processes 0 and 1 of one job; both must finish."""
    address = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen(argv, env=_env(2, JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES="2",
                                             JAX_PROCESS_ID=str(i), **extra),
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out.append(subprocess.CompletedProcess(argv, p.returncode, stdout, stderr))
    finally:
        for p in procs:
            p.kill()
    for i, r in enumerate(out):
        assert r.returncode == 0, f"process {i}: {r.stderr[-3000:]}"
    return out


@pytest.mark.slow
def test_two_process_train_step_equals_single_process_step():
    code = textwrap.dedent(TRAIN_STEP)
    multi = [json.loads(r.stdout.strip().splitlines()[-1])
             for r in _two_processes([sys.executable, "-c", code], timeout=600)]
    single = subprocess.run([sys.executable, "-c", code], env=_env(4), cwd=REPO, capture_output=True, text=True,
                            timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    ref = json.loads(single.stdout.strip().splitlines()[-1])
    assert ref["processes"] == 1 and ref["devices"] == 4
    for m in multi:
        assert m["processes"] == 2 and m["devices"] == 4 and m["local_devices"] == 2
        np.testing.assert_allclose(m["loss"], ref["loss"], rtol=1e-5)
        np.testing.assert_allclose(m["params"], ref["params"], rtol=1e-5)
        np.testing.assert_allclose(m["first"], ref["first"], rtol=1e-5, atol=1e-7)
    assert multi[0]["process"] == 0 and multi[1]["process"] == 1


TINY_RUN = ("train.prefill=30", "train.log_every=40", "train.save_every=40", "train.train_ratio=16",
            "replay.capacity=2000", "replay.seq_len=8", "env.max_episode_steps=20", "parallel.distributed=true")
# seq_len 8: training starts once B * T = 32 env steps are collected and the first (21-step) episodes can be
# sampled, at env step 42, and then runs 16 / 32 = 0.5 steps per env step (train_driver.TrainRatio)


def _pretrain_two_processes(logdir: Path, env_steps: int) -> list[list[dict]]:
    """`muse-wm pretrain --config smoke` as a 2-process job; returns each process's metrics rows."""
    sets = [a for kv in (*TINY_RUN, f"train.env_steps={env_steps}") for a in ("--set", kv)]
    argv = [str(Path(sys.executable).parent / "muse-wm"), "pretrain", "--config", "smoke", *sets,
            "--logdir", str(logdir)]
    runs = _two_processes(argv, timeout=600, TQDM_DISABLE="1")
    for i, r in enumerate(runs):
        assert f"pretrain done: {{'env_steps': {env_steps}" in r.stdout, f"process {i}: {r.stdout[-2000:]}"
        assert ("resuming" in r.stdout) == (env_steps > 80), f"process {i}: {r.stdout[-2000:]}"
    folders = [logdir, logdir / "process-1"]  # parallel.process_logdir
    return [[json.loads(line) for line in (f / "metrics.jsonl").read_text().splitlines()] for f in folders]


@pytest.mark.slow
@pytest.mark.long  # the two-process train step test below runs in CI
def test_muse_wm_pretrain_on_two_processes_trains_exits_and_resumes(tmp_path: Path):
    logdir = tmp_path / "run"
    first = _pretrain_two_processes(logdir, 80)
    for rows in first:
        assert [r["env_steps"] for r in rows] == [40, 80] and rows[-1]["train_steps"] == 1 + int((80 - 42) * 0.5)
    # one global train step: the losses agree on both hosts, while each host collects its own episodes
    assert first[0][-1]["loss/total"] == first[1][-1]["loss/total"]
    for folder in (logdir, logdir / "process-1"):
        assert sorted(int(p.name) for p in (folder / "checkpoints").iterdir() if p.name.isdigit()) == [40, 80]
    resumed = _pretrain_two_processes(logdir, 120)
    for rows in resumed:
        assert [r["env_steps"] for r in rows] == [40, 80, 120] and rows[-1]["train_steps"] == 1 + int((120 - 42) * 0.5)
    assert resumed[0][-1]["loss/total"] == resumed[1][-1]["loss/total"]
    # both hosts saved the same parameters, and process 0's folder reads as a one-host run (what adapt does)
    import jax

    from muse_jax.checkpoint import Checkpointer
    from muse_jax.loops.restore import load_agent

    states = []
    for folder in (logdir, logdir / "process-1"):
        with Checkpointer(folder / "checkpoints", read_only=True) as ck:
            states.append(jax.tree.leaves(ck.restore(with_replay=False)[0]))
    assert len(states[0]) == len(states[1]) > 0
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(*states, strict=True))
    cfg, _, _ = load_agent(logdir)
    assert cfg.parallel.distributed and cfg.train.env_steps == 120


@pytest.mark.slow
@pytest.mark.parametrize(("env", "words"), [({}, "Set JAX_COORDINATOR_ADDRESS"),
                                            ({"JAX_PROCESS_ID": "abc"}, "JAX_PROCESS_ID='abc' must be an integer")])
def test_distributed_without_a_job_is_one_line_before_any_work(tmp_path: Path, env: dict, words: str):
    argv = [str(Path(sys.executable).parent / "muse-wm"), "pretrain", "--config", "smoke",
            "--set", "parallel.distributed=true", "--logdir", str(tmp_path / "run")]
    proc = subprocess.run(argv, env=_env(1, **env), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("muse-wm: error: ") and words in line, line
    assert not (tmp_path / "run").exists()
