"""Mesh, batch sharding and the sharded train step on 4 forced CPU devices.

The device count is fixed when jax starts, so the 4-device checks run in a fresh interpreter with
XLA_FLAGS=--xla_force_host_platform_device_count=4.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from muse_jax import parallel
from muse_jax.config import load_config

REPO = Path(__file__).resolve().parents[2]


def _run_on_4_devices(code: str, timeout: int = 600) -> dict:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
               PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_fsdp_spec_splits_largest_divisible_axis():
    assert parallel.fsdp_spec((64, 256), 4) == PartitionSpec(None, "data")
    assert parallel.fsdp_spec((256, 64), 4) == PartitionSpec("data")
    assert parallel.fsdp_spec((255, 63), 4) == PartitionSpec()  # nothing divisible: replicate
    assert parallel.fsdp_spec((8,), 4) == PartitionSpec()  # too small to bother
    assert parallel.fsdp_spec((64, 256), 1) == PartitionSpec()


def test_single_device_mesh_and_batch():
    mesh = parallel.make_mesh()
    assert mesh.axis_names == ("data",) and mesh.devices.size == jax.device_count()
    batch = {"x": np.arange(8 * 3, dtype=np.float32).reshape(8, 3)}
    out = parallel.shard_batch(batch, mesh)
    np.testing.assert_array_equal(np.asarray(out["x"]), batch["x"])
    assert out["x"].sharding == parallel.data_sharding(mesh)


def test_init_distributed_off_is_a_no_op():
    cfg = load_config("smoke")
    assert parallel.init_distributed(cfg) is False


def test_bad_param_sharding_mode_is_named():
    with pytest.raises(ValueError, match="parallel.param_sharding"):
        parallel.state_shardings({"w": np.zeros(3)}, parallel.make_mesh(), "zero3")


@pytest.mark.slow
def test_batch_not_divisible_by_devices_names_the_setting():
    out = _run_on_4_devices("""
        import json, numpy as np
        from muse_jax import parallel
        mesh = parallel.make_mesh()
        try:
            parallel.shard_batch({"reward": np.zeros((6, 5), np.float32)}, mesh)
            msg = ""
        except ValueError as e:
            msg = str(e)
        print(json.dumps({"devices": mesh.devices.size, "msg": msg}))
    """)
    assert out["devices"] == 4
    assert "replay.batch_size=6" in out["msg"] and "4 devices" in out["msg"]


SHARDED_EQUALS_SINGLE = """
    import json
    import jax, jax.numpy as jnp, numpy as np, optax
    from flax import nnx
    from muse_jax import parallel

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(8, 256, rngs=rngs)
            self.l2 = nnx.Linear(256, 1, rngs=rngs)
        def __call__(self, x):
            return self.l2(jax.nn.silu(self.l1(x)))[..., 0]

    model = Net(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    graphdef, state = nnx.split((model, opt))

    def step(state, batch, key):
        model, opt = nnx.merge(graphdef, state)
        noise = 0.01 * jax.random.normal(key, batch["y"].shape)
        def loss_fn(m):
            return jnp.mean((m(batch["x"]) - batch["y"] - noise) ** 2)
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return nnx.state((model, opt)), {"loss": loss}

    rng = np.random.default_rng(0)
    batch = {"x": rng.normal(size=(16, 8)).astype(np.float32), "y": rng.normal(size=(16,)).astype(np.float32)}
    key = jax.random.key(1)

    single = jax.jit(step)
    s1, m1 = single(jax.device_put(state, jax.devices()[0]), batch, key)

    results = {"devices": jax.device_count()}
    mesh = parallel.make_mesh()
    for mode in ("replicated", "fsdp"):
        sharded_state = parallel.shard_state(state, mesh, mode)
        step_fn = parallel.jit_sharded_step(step, sharded_state, mesh, mode, donate=False)
        s4, m4 = step_fn(sharded_state, parallel.shard_batch(batch, mesh), key)
        p1 = [np.asarray(x) for x in jax.tree.leaves(nnx.state(nnx.merge(graphdef, s1)[0], nnx.Param))]
        p4 = [np.asarray(x) for x in jax.tree.leaves(nnx.state(nnx.merge(graphdef, s4)[0], nnx.Param))]
        kernel = nnx.merge(graphdef, s4)[0].l1.kernel[...]
        results[mode] = {
            "loss_close": bool(np.allclose(m1["loss"], m4["loss"], rtol=1e-5, atol=1e-6)),
            "params_close": all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(p1, p4)),
            "params_changed": not np.allclose(p1[0], np.asarray(jax.tree.leaves(state)[0])),
            "kernel_spec": [str(a) for a in kernel.sharding.spec],
            "batch_shards": len(parallel.shard_batch(batch, mesh)["x"].addressable_shards),
        }
    print(json.dumps(results))
"""


@pytest.mark.slow
def test_sharded_step_equals_single_device_step():
    out = _run_on_4_devices(SHARDED_EQUALS_SINGLE)
    assert out["devices"] == 4
    for mode in ("replicated", "fsdp"):
        r = out[mode]
        assert r["loss_close"] and r["params_close"], (mode, r)
        assert r["batch_shards"] == 4 and r["params_changed"]
    assert "data" not in out["replicated"]["kernel_spec"]
    assert out["fsdp"]["kernel_spec"] == ["None", "data"]  # the 8x256 kernel is really split on its 256 axis


AGENT_SHARDED_EQUALS_SINGLE = """
    import json
    import jax, jax.numpy as jnp, numpy as np
    from flax import nnx
    from benchmarks.wm_throughput import synthetic_batch
    from muse_jax import parallel
    from muse_jax.agent import ObsSpec, create_learner, make_train_step
    from muse_jax.config import load_config

    cfg = load_config("smoke", {"replay.batch_size": 4, "replay.seq_len": 8, "behavior.imag_horizon": 3,
                               "optim.warmup": 0})  # the warm-up makes the first update exactly zero
    spec = ObsSpec.from_config(cfg, proprio_dim=7, act_dim=3)
    learner = create_learner(cfg, spec, seed=0)
    g = learner.graphdef
    batch = synthetic_batch(spec, 4, 8)
    key = jax.random.key(3)
    mesh = parallel.make_mesh()

    def params(state):
        return [np.asarray(x) for x in jax.tree.leaves(nnx.state(nnx.merge(g, state).agent, nnx.Param))]

    results = {"devices": jax.device_count()}
    runs = {
        "agent_mesh": lambda s: make_train_step(cfg, g, mesh)(
            parallel.shard_state(s, mesh), parallel.shard_batch(batch, mesh), key),
    }
    outs = {name: fn(jax.tree.map(jnp.copy, learner.state)) for name, fn in runs.items()}
    ref_state, ref_m = make_train_step(cfg, g)(jax.tree.map(jnp.copy, learner.state), batch, key)
    p_ref, p_init = params(ref_state), params(learner.state)
    for name, (s, m) in outs.items():
        p = params(s)
        results[name] = {
            "loss": [float(ref_m["loss/total"]), float(m["loss/total"])],
            "loss_close": bool(np.allclose(ref_m["loss/total"], m["loss/total"], rtol=1e-4, atol=1e-5)),
            "params_close": all(np.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(p_ref, p)),
            "max_abs_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(p_ref, p)),
            "params_changed": any(not np.allclose(a, b) for a, b in zip(p_init, p)),
        }
    print(json.dumps(results))
"""


@pytest.mark.slow
def test_agent_train_step_sharded_equals_single_device():
    """The real MUSE train step (world model + actor-critic) on 4 devices matches 1 device."""
    out = _run_on_4_devices(AGENT_SHARDED_EQUALS_SINGLE)
    assert out["devices"] == 4
    for name in ("agent_mesh",):
        r = out[name]
        assert r["params_changed"], (name, r)
        assert r["loss_close"] and r["params_close"], (name, r)


def test_compilation_cache_is_configured(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    try:
        path = parallel.enable_compilation_cache(tmp_path / "xla")
        assert path.is_dir() and jax.config.jax_compilation_cache_dir == str(path)
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


@pytest.mark.parametrize("env,flag,expected", [
    ({}, False, "XDG/muse-jax/xla"),
    ({"XDG_CACHE_HOME": ""}, False, "HOME/.cache/muse-jax/xla"),
    ({"JAX_COMPILATION_CACHE_DIR": "JAXDIR"}, False, "JAXDIR"),
    ({"MUSE_JAX_COMPILATION_CACHE": "MINE", "JAX_COMPILATION_CACHE_DIR": "JAXDIR"}, False, "MINE"),
    ({"MUSE_JAX_COMPILATION_CACHE": "0"}, False, None),
    ({"MUSE_JAX_COMPILATION_CACHE": "off"}, False, None),
    ({}, True, None),
])
def test_cli_cache_dir_default_and_off_switches(tmp_path, monkeypatch, env, flag, expected):
    """The CLI's persistent cache: on by default under the user's cache folder; --no-compile-cache or
    MUSE_JAX_COMPILATION_CACHE=0 turn it off; a path in either variable moves it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for name in ("MUSE_JAX_COMPILATION_CACHE", "JAX_COMPILATION_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value.replace("JAXDIR", str(tmp_path / "j")).replace("MINE", str(tmp_path / "m")))
    got = parallel.cli_cache_dir(disabled=flag)
    names = {"XDG": tmp_path / "xdg", "HOME": tmp_path / "home", "JAXDIR": tmp_path / "j", "MINE": tmp_path / "m"}
    if expected is None:
        assert got is None
    else:
        head, *rest = expected.split("/")
        assert got == names[head].joinpath(*rest)


def test_jit_sharded_step_without_state_needs_replicated():
    mesh = parallel.make_mesh()
    step = parallel.jit_sharded_step(lambda s, b, k: (s, {"n": b["x"].sum()}), None, mesh, donate=False)
    state, metrics = step({"w": np.ones(3, np.float32)}, {"x": np.ones((2, 3), np.float32)}, jax.random.key(0))
    assert float(metrics["n"]) == 6.0 and state["w"].sharding.is_fully_replicated
    with pytest.raises(ValueError, match="needs the learner state"):
        parallel.jit_sharded_step(lambda s, b, k: (s, {}), None, mesh, "fsdp")


@pytest.mark.parametrize("n", [0, -1, 65, 10**6, 2.5, True, "2", None])
def test_set_host_devices_refuses_nonsense_in_one_line(n, monkeypatch):
    """Checked before jax's config is touched: nothing changes, one line names the range and the value."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # the cap is 64 on a small machine
    before = jax.config.jax_num_cpu_devices
    with pytest.raises(ValueError) as err:
        parallel.set_host_devices(n)
    message = str(err.value)
    assert "\n" not in message and "from 1 to 64" in message and f"got {n!r}" in message, message
    assert jax.config.jax_num_cpu_devices == before


def test_host_device_cap_follows_a_big_machine(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 192)
    assert parallel.max_host_devices() == 192
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert parallel.max_host_devices() == 64


def test_set_host_devices_after_jax_started_is_one_line():
    jax.devices()  # the CPU backend is up: too late to split it
    with pytest.raises(RuntimeError) as err:
        parallel.set_host_devices(2)
    message = str(err.value)
    assert "\n" not in message and "cannot split the host into 2 devices" in message, message
    assert "before anything touches a device" in message, message
