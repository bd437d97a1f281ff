"""Multi-host for real: two processes on this machine (loopback only), each with 2 forced CPU devices,
join one `jax.distributed` job (Gloo CPU collectives) and run the sharded train step over the 4-device
global mesh. (Wiring `parallel.distributed` into `muse-wm pretrain` is still open: issue 13.)

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
    state, metrics = make_train_step(cfg, learner.graphdef, mesh)(state, parallel.shard_batch(mine, mesh),
                                                                  jax.random.key(3))
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


def _two_processes(argv: list[str], timeout: int) -> list[subprocess.CompletedProcess]:
    """Run `argv` as processes 0 and 1 of one job; both must finish."""
    address = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen(argv, env=_env(2, JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES="2",
                                             JAX_PROCESS_ID=str(i)),
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
