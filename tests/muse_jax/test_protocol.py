"""MUSE §3.2 protocol pieces on the tiny synthetic learner: the Dreamer model kind, Algorithm 1's carried
ascended state (and the switch), MCTS selection by the self-awareness criterion, Dreamer's normalised
value signal, the paper's loss weights and agent-step competence labels."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from muse_jax import agent as ag
from muse_jax.competence import agent_steps_per_episode
from muse_jax.config import LossConfig, load_config
from muse_jax.regulation import gradient, mcts

PROPRIO, ACT = 4, 2  # the conftest's synthetic data
SPEC = ag.ObsSpec(image_shape=None, proprio_dim=PROPRIO, act_dim=ACT, num_tasks=1)


def _param_paths(learner) -> list[str]:
    params = nnx.state(nnx.merge(learner.graphdef, learner.state).agent, nnx.Param)
    return ["/".join(str(p) for p in path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]


def test_dreamer_model_has_no_competence_head_and_no_competence_loss(make_config, make_batch):
    muse = ag.create_learner(make_config(), SPEC, seed=0)
    dreamer = ag.create_learner(make_config(agent="dreamer"), SPEC, seed=0)
    assert any("competence_head" in p for p in _param_paths(muse))
    assert not any("competence" in p for p in _param_paths(dreamer))
    step = ag.make_train_step(dreamer.cfg, dreamer.graphdef)
    state, metrics = step(dreamer.state, make_batch(0), jax.random.key(0))
    assert float(metrics["loss/competence"]) == 0.0 and np.isfinite(float(metrics["loss/total"]))
    carry = ag.initial_carry(dreamer.graphdef, state, 2)
    obs = {"proprio": np.zeros((2, PROPRIO), np.float32), "task_id": np.ones(2, np.int32), "is_first": np.ones(2, bool)}
    with pytest.raises(ValueError, match="Dreamer model"):
        ag.policy_step(dreamer.graphdef, state, carry, obs, jax.random.key(0), "muse")


def test_paper_loss_weights_are_the_default():
    w = LossConfig()
    assert (w.dyn, w.rep) == (1.0, 0.1)  # MUSE eq. 2: L_pred + L_dyn + 0.1 L_rep
    assert (w.image, w.proprio, w.reward, w.cont, w.competence) == (1.0,) * 5  # eq. 3: plain NLL sum


def test_competence_labels_count_agent_steps():
    cfg = load_config("smoke", {"env.max_episode_steps": 50, "env.action_repeat": 2})
    assert agent_steps_per_episode(cfg.env) == 25
    assert agent_steps_per_episode(cfg.replace({"env.action_repeat": 3}).env) == 17


def _policy(trained, carry_switch: bool, mode: str = "muse"):
    learner = trained[0]
    cfg = learner.cfg.replace({"regulation.strategy": "gradient", "regulation.beta": 0.5,
                               "regulation.carry_regulated_state": carry_switch,
                               "regulation.z_source": "posterior" if carry_switch else "prior"})
    fresh = ag.create_learner(cfg, SPEC, seed=0)  # same graph structure, new static config
    return fresh.graphdef, learner.state, cfg


@pytest.mark.parametrize("switch", [True, False])
def test_ascended_state_is_carried_into_the_acting_chain_only_with_the_switch(trained, make_batch, switch):
    graphdef, state, cfg = _policy(trained, switch)
    B = 3
    obs = {"proprio": np.asarray(make_batch(1)["proprio"][:B, 0]), "task_id": np.ones(B, np.int32),
           "is_first": np.ones(B, bool)}
    carry0 = ag.initial_carry(graphdef, state, B)
    key = jax.random.key(3)
    _, carry_muse, _ = ag.policy_step(graphdef, state, carry0, obs, key, "muse")
    _, carry_post, _ = ag.policy_step(graphdef, state, carry0, obs, key, "dreamer")  # same posterior sample
    # the regulated state Algorithm 1 ends with, recomputed from the posterior with the same key
    agent = nnx.merge(graphdef, state).agent
    _, k_act = jax.random.split(key)
    action, info = gradient.regulate(agent, carry_post["deter"], carry_post["stoch"], k_act, cfg)
    np.testing.assert_allclose(carry_muse["action"], np.clip(action, -1, 1), atol=1e-5)
    # the filtering belief is never regulated, whatever the switch
    np.testing.assert_allclose(carry_muse["deter"], carry_post["deter"], atol=1e-6)
    np.testing.assert_allclose(carry_muse["stoch"], carry_post["stoch"], atol=1e-6)
    if switch:
        np.testing.assert_allclose(carry_muse["act_deter"], info["deter"], atol=1e-5)
        np.testing.assert_allclose(carry_muse["act_stoch"], info["stoch"], atol=1e-5)
        assert float(jnp.abs(carry_muse["act_deter"] - carry_post["deter"]).max()) > 1e-3
    else:
        np.testing.assert_allclose(carry_muse["act_deter"], carry_post["deter"], atol=1e-6)
    # next step: both chains take h_{t+1} = f(., a_t); the acting chain from the carried s (Algorithm 1)
    obs["is_first"] = np.zeros(B, bool)
    key2 = jax.random.key(4)
    action2, carry_next, info_next = ag.policy_step(graphdef, state, carry_muse, obs, key2, "muse")
    k_obs2, k_act2 = jax.random.split(key2)
    embed = agent.wm.encode(obs)
    honest, _ = agent.wm.rssm.obs_step(dict(deter=carry_post["deter"], stoch=carry_post["stoch"]),
                                       carry_muse["action"], embed, jnp.zeros(B, bool), k_obs2)
    s_h, s_z = (info["deter"], info["stoch"]) if switch else (carry_post["deter"], carry_post["stoch"])
    acting, _ = agent.wm.rssm.obs_step(dict(deter=s_h, stoch=s_z), carry_muse["action"], embed,
                                       jnp.zeros(B, bool), k_obs2)
    np.testing.assert_allclose(carry_next["deter"], honest["deter"], atol=1e-4)
    expected, _ = gradient.regulate(agent, acting["deter"], acting["stoch"], k_act2, cfg)
    np.testing.assert_allclose(action2, np.clip(expected, -1, 1), atol=1e-4)
    # the self-awareness signal scored in Table 1 comes from the honest belief, not the acting state
    honest_comp = agent.wm.competence_probs(jnp.concatenate([honest["deter"], honest["stoch"].reshape(B, -1)], -1))
    np.testing.assert_allclose(info_next["competence"], honest_comp.sum(-1), atol=1e-5)
    np.testing.assert_allclose(info_next["psi1"], honest_comp[:, 0], atol=1e-6)


def test_mcts_selects_by_the_criterion_not_ucb():
    q = jnp.array([0.2, 0.9, 0.5])
    visits = jnp.array([1.0, 50.0, 1.0])  # UCB would favour the rarely visited children
    np.testing.assert_array_equal(mcts.selection_score(q, jnp.float32(52.0), visits), q)
    assert int(jnp.argmax(mcts.selection_score(q, jnp.float32(52.0), visits))) == 1


def test_dreamer_signal_is_value_over_return_scale(trained):
    learner = trained[0]
    B = 2
    obs = {"proprio": np.zeros((B, PROPRIO), np.float32), "task_id": np.ones(B, np.int32),
           "is_first": np.ones(B, bool)}
    carry = ag.initial_carry(learner.graphdef, learner.state, B)
    _, _, info = ag.policy_step(learner.graphdef, learner.state, carry, obs, jax.random.key(0), "dreamer")
    tr = nnx.merge(learner.graphdef, learner.state)
    scale = max(learner.cfg.behavior.retnorm_limit, float(tr.ret_hi.get_value() - tr.ret_lo.get_value()))
    np.testing.assert_allclose(info["value_normalized"], np.asarray(info["value"]) / scale, rtol=1e-5)
    probs = np.asarray(info["competence_probs"])
    np.testing.assert_array_equal(info["quantile"], (probs > 0.5).sum(-1))
