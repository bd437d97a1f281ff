"""Train metrics kept on the device: window means, and NaN/inf named with the first step it appeared at."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from muse_jax.errors import NonFiniteLossError
from muse_jax.loops.train_driver import DeviceMetrics


def test_read_gives_window_means_and_starts_a_new_window():
    m = DeviceMetrics()
    assert m.read() == {}
    for step, x in enumerate((1.0, 2.0, 6.0)):
        m.add({"loss/a": jnp.float32(x), "grad_norm/b": jnp.float32(10 * x)}, step)
    m.check()  # all finite: no error, and the window is kept
    assert m.read() == pytest.approx({"loss/a": 3.0, "grad_norm/b": 30.0})
    m.add({"loss/a": jnp.float32(5.0), "grad_norm/b": jnp.float32(0.0)}, 3)
    assert m.read() == pytest.approx({"loss/a": 5.0, "grad_norm/b": 0.0})


def test_per_task_metrics_are_averaged_over_tasks():
    m = DeviceMetrics()
    m.add({"loss/a": jnp.array([1.0, 3.0])}, 0)
    m.add({"loss/a": jnp.array([5.0, 7.0])}, 1)
    assert m.read() == pytest.approx({"loss/a": 4.0})


def test_first_non_finite_step_is_named_loss_first():
    m = DeviceMetrics()
    m.add({"loss/a": jnp.float32(1.0), "grad_norm/b": jnp.float32(1.0)}, 40)
    m.add({"loss/a": jnp.float32(1.0), "grad_norm/b": jnp.float32(jnp.inf)}, 41)
    m.add({"loss/a": jnp.float32(jnp.nan), "grad_norm/b": jnp.float32(jnp.nan)}, 42)
    with pytest.raises(NonFiniteLossError, match=r"^grad_norm/b is inf at train step 41;"):
        m.check()
    m2 = DeviceMetrics()
    m2.add({"loss/z": jnp.array([1.0, -jnp.inf]), "grad_norm/a": jnp.float32(jnp.inf)}, 7)
    with pytest.raises(NonFiniteLossError, match=r"^loss/z is -inf at train step 7;"):
        m2.read()
