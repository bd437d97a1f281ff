"""The agent API everyone codes against: create_learner, train_step, initial_carry, policy_step."""

import jax
import numpy as np
import pytest

from muse_jax import agent as ag

REQUIRED = ["loss/total", "loss/image", "loss/proprio", "loss/reward", "loss/cont", "loss/competence",
            "loss/dyn", "loss/rep", "loss/actor", "loss/critic", "kl", "entropy", "grad_norm/model"]


def test_train_step_metrics_and_step_counter(trained):
    learner, history, _ = trained
    for k in REQUIRED:
        assert k in history[-1] and np.ndim(history[-1][k]) == 0, k
    tr = ag.nnx.merge(learner.graphdef, learner.state)
    assert int(tr.step.get_value()) == len(history)
    assert np.isfinite(float(history[-1]["loss/total"]))


def test_obs_spec_from_config(make_config):
    cfg = make_config()
    spec = ag.ObsSpec.from_config(cfg, proprio_dim=39, act_dim=4)
    assert spec == ag.ObsSpec(image_shape=None, proprio_dim=39, act_dim=4, num_tasks=1)


@pytest.mark.parametrize("mode,strategy", [("random", "gradient"), ("dreamer", "gradient"), ("muse", "gradient"),
                                           ("muse", "mcts")])
def test_policy_step_shapes_all_modes(trained, mode, strategy):
    learner, _, _ = trained
    cfg = learner.cfg.replace({"regulation.strategy": strategy})
    # same parameters, different static config: rebuild the graph with the new strategy
    fresh = ag.create_learner(cfg, learner.agent().spec, seed=0)
    state = learner.state
    B = 3
    carry = ag.initial_carry(fresh.graphdef, state, B)
    obs = {"proprio": np.zeros((B, 4), np.float32), "task_id": np.ones(B, np.int32), "is_first": np.ones(B, bool)}
    step = ag.make_policy_step(fresh.graphdef, mode)
    action, carry, info = step(state, carry, obs, jax.random.key(0))
    obs["is_first"] = np.zeros(B, bool)
    action, carry, info = step(state, carry, obs, jax.random.key(1))
    assert action.shape == (B, 2) and action.dtype == np.float32
    assert float(np.abs(action).max()) <= 1.0
    assert carry["deter"].shape == (B, cfg.model.deter) and carry["action"].shape == (B, 2)
    assert info["competence"].shape == (B,) and info["value"].shape == (B,)
    assert info["competence_probs"].shape == (B, cfg.model.competence_quantiles)
    np.testing.assert_allclose(info["competence"], np.asarray(info["competence_probs"]).sum(-1), rtol=1e-5)
    assert 0.0 <= float(info["competence"].min()) and float(info["competence"].max()) <= 5.0


def test_bad_mode_is_named(trained):
    learner, _, _ = trained
    with pytest.raises(ValueError, match="dreamer"):
        ag.policy_step(learner.graphdef, learner.state, {}, {}, jax.random.key(0), "greedy")


def test_create_learner_is_one_program_with_the_eager_values(make_config):
    """create_learner initialises under one jit (89 tiny eager compilations before): the same values
    as building the Learner eagerly (bit for bit at XLA's default level, within a few ulps under the
    suite's O0), with a distinct buffer per leaf (donation)."""
    from jax import monitoring

    cfg = make_config(**{"model.units": 24})  # a shape no other test builds: nothing is in jit's cache
    spec = ag.ObsSpec(image_shape=None, proprio_dim=5, act_dim=3, num_tasks=1)
    compiles = []

    def count(event: str, duration: float, **_) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(duration)

    monitoring.register_event_duration_secs_listener(count)
    try:
        learner = ag.create_learner(cfg, spec, seed=7)
        jax.block_until_ready(learner.state)
    finally:
        monitoring.unregister_event_duration_listener(count)
    assert len(compiles) <= 3, len(compiles)  # the key, the init program (eagerly: ~90)
    _, eager = ag.nnx.split(ag.Learner(cfg, spec, ag.nnx.Rngs(params=7)))
    assert jax.tree.structure(learner.state) == jax.tree.structure(eager)
    for a, b in zip(jax.tree.leaves(learner.state), jax.tree.leaves(eager), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if np.issubdtype(a.dtype, np.floating):  # bit for bit at XLA's default level; the suite's O0 rounds the
            np.testing.assert_array_max_ulp(a, b, maxulp=4)  # fused and unfused programs an ulp apart
        else:
            np.testing.assert_array_equal(a, b)
    pointers = [x.unsafe_buffer_pointer() for x in jax.tree.leaves(learner.state) if x.size]
    assert len(set(pointers)) == len(pointers)

