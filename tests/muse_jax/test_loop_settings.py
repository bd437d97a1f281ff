"""`auto` loop settings (muse_jax/config/loops.py): each backend gets its measured setting, read where the
train step is traced; a given value is kept everywhere."""

from __future__ import annotations

import jax
import pytest

from muse_jax import agent as ag
from muse_jax.config import ConfigError
from muse_jax.config.loops import Loops, loops_for, with_loops_for
from tests.muse_jax.conftest import ACT, PROPRIO, synthetic_batch, tiny_config

ROLLED = {"model.observe_unroll": 1, "behavior.imag_unroll": 1, "model.observe_remat": "none",
          "model.observe_param_grads": "in_loop"}


def test_auto_is_rolled_off_the_gpu_and_unrolled_with_remat_on_it():
    cfg = tiny_config()
    m = cfg.model
    assert (m.observe_unroll, cfg.behavior.imag_unroll, m.observe_remat, m.observe_param_grads) == ("auto",) * 4
    for backend in ("cpu", "tpu"):  # TPU: not measured, so not changed
        assert loops_for(cfg, backend) == Loops(1, 1, "none", "in_loop")
    horizon = cfg.behavior.imag_horizon
    for backend in ("gpu", "cuda", "ROCM"):
        assert loops_for(cfg, backend) == Loops(8, horizon, "dots", "after_loop")
    assert loops_for(tiny_config(**{"behavior.imag_horizon": 9}), "gpu").imag_unroll == 9  # the whole horizon


def test_given_values_are_kept_on_every_backend():
    given = tiny_config(**{"model.observe_unroll": 2, "behavior.imag_unroll": 3, "model.observe_remat": "nothing",
                           "model.observe_param_grads": "after_loop"})
    for backend in ("cpu", "gpu"):
        assert loops_for(given, backend) == Loops(2, 3, "nothing", "after_loop")
    written = with_loops_for(tiny_config(), "gpu")  # for a step compiled ahead of time for another platform
    m = written.model
    assert (m.observe_unroll, written.behavior.imag_unroll, m.observe_remat, m.observe_param_grads) == (
        8, 5, "dots", "after_loop")


@pytest.mark.parametrize("key,value,words", [
    ("model.observe_unroll", 0, "auto or an integer >= 1"),
    ("model.observe_unroll", "fast", "give int or auto"),
    ("behavior.imag_unroll", -3, "auto or an integer >= 1"),
    ("model.observe_remat", "auto2", "choose one of"),
    ("model.observe_param_grads", "later", "choose one of"),
])
def test_a_bad_value_is_one_line_naming_the_key(key, value, words):
    with pytest.raises(ConfigError, match=words) as e:
        tiny_config(**{key: value})
    assert key in str(e.value) and "\n" not in str(e.value)


def _lowered(cfg) -> str:
    spec = ag.ObsSpec(image_shape=None, proprio_dim=PROPRIO, act_dim=ACT, num_tasks=1)
    learner = ag.create_learner(cfg, spec, seed=0)
    return ag.make_train_step(cfg, learner.graphdef).lower(
        learner.state, synthetic_batch(0), jax.random.key(0)).as_text()


def test_the_train_step_compiles_the_setting_of_the_backend_it_runs_on(monkeypatch):
    """The same program as the explicit rolled settings here (a CPU), and as the explicit GPU settings when
    the backend says GPU: the step reads `auto` for the backend at trace time, not once at config load."""
    auto = tiny_config()
    assert _lowered(auto) == _lowered(tiny_config(**ROLLED))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    on_gpu = _lowered(auto)
    assert on_gpu == _lowered(with_loops_for(auto, "gpu"))
    assert on_gpu != _lowered(tiny_config(**ROLLED))  # and that program is another one
