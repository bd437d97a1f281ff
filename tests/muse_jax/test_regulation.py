"""Self-regulation on a briefly trained model: competence rises under Algorithm 1; all strategies act."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from muse_jax import regulation
from muse_jax.regulation import gradient


def _failing_states(learner, make_batch):
    """Posterior states of the never-succeeding (g < 0) synthetic sequences, where competence is low."""
    agent = learner.agent()
    batch = make_batch(123, B=16, T=8)
    _, (_, starts) = agent.wm.loss(batch, jax.random.key(0))
    fail = np.asarray(batch["proprio"][:, 0, 0] < 0)
    return agent, starts["deter"][fail, -1], starts["stoch"][fail, -1], batch, starts


def test_competence_head_separates_success_from_failure(trained, make_batch):
    learner, _, _ = trained
    agent = learner.agent()
    batch = make_batch(321, B=16, T=8)
    _, (_, starts) = agent.wm.loss(batch, jax.random.key(0))
    feat = jnp.concatenate([starts["deter"], starts["stoch"].reshape(16, 8, -1)], -1)
    comp = agent.wm.competence_probs(feat).sum(-1)[:, -1]
    good = batch["proprio"][:, 0, 0] > 0
    assert float(comp[good].mean()) > float(comp[~good].mean()) + 1.0


@pytest.mark.parametrize("jit", [False, True])
def test_gradient_ascent_raises_predicted_competence(trained, make_batch, jit):
    learner, _, _ = trained
    agent, h, z, _, _ = _failing_states(learner, make_batch)
    cfg = agent.cfg.replace({"regulation.horizon": 10, "regulation.beta": 0.02})
    f = lambda h, z, k: gradient.regulate(agent, h, z, k, cfg)
    f = jax.jit(f) if jit else f
    action, info = f(h, z, jax.random.key(0))
    before, after = np.asarray(info["competence_before"]), np.asarray(info["competence_after"])
    assert before.shape == (h.shape[0], 10)
    assert (after >= before - 1e-6).all()
    assert (after - before).mean() > 0
    # the rise comes from the ascent step: ten times beta gives several times the rise (linear regime)
    big = agent.cfg.replace({"regulation.horizon": 10, "regulation.beta": 0.2})
    _, info_big = gradient.regulate(agent, h, z, jax.random.key(0), big)
    rise_big = float((info_big["competence_after"] - info_big["competence_before"]).mean())
    assert rise_big > 3.0 * float((after - before).mean())
    assert action.shape == (h.shape[0], 2)


@pytest.mark.parametrize("strategy", ["gradient", "rollouts", "mcts"])
@pytest.mark.parametrize("jit", [False, True])
def test_every_strategy_returns_valid_batched_actions(trained, make_batch, strategy, jit):
    learner, _, _ = trained
    agent, h, z, _, _ = _failing_states(learner, make_batch)
    fn = regulation.get_strategy(strategy)
    f = lambda h, z, k: fn(agent, h, z, k, agent.cfg)
    f = jax.jit(f) if jit else f
    action, info = f(h, z, jax.random.key(1))
    assert action.shape == (h.shape[0], 2)
    assert np.isfinite(np.asarray(action)).all()
    assert float(action.min()) >= -1.0 and float(action.max()) <= 1.0
    assert info["competence_final"].shape == (h.shape[0],)
    if strategy == "mcts":
        n = agent.cfg.regulation
        assert int(info["tree_size"].max()) <= 1 + n.mcts_simulations * n.mcts_branching
        assert float(info["root_visits"].sum(-1).min()) >= n.mcts_simulations  # every sim passes the root


def test_rollouts_pick_the_best_scored_rollout(trained, make_batch):
    learner, _, _ = trained
    agent, h, z, _, _ = _failing_states(learner, make_batch)
    _, info = regulation.get_strategy("rollouts")(agent, h, z, jax.random.key(2), agent.cfg)
    np.testing.assert_allclose(info["competence_final"], info["scores"].max(-1))


def test_rollouts_draw_the_same_actions_as_sampling_inside_the_loop(trained, make_batch):
    """Option (a) draws the actor's noise for all steps before its loop: the same actions and scores as
    `actor.sample` called with each step's key inside it."""
    from muse_jax.competence import competence
    from muse_jax.nets import feature
    from muse_jax.regulation import rollouts

    learner, _, _ = trained
    agent, h, z, _, _ = _failing_states(learner, make_batch)
    cfg, key = agent.cfg, jax.random.key(4)
    action, info = rollouts.regulate_one(agent, h[0], z[0], key, cfg)
    R = cfg.regulation.num_rollouts
    start = dict(deter=jnp.broadcast_to(h[0], (R, *h[0].shape)), stoch=jnp.broadcast_to(z[0], (R, *z[0].shape)))
    in_loop = lambda s, k: agent.actor.sample(feature(s["deter"], s["stoch"]), k)
    traj, act = agent.wm.rssm.imagine(start, in_loop, cfg.regulation.horizon, key)
    scores = competence(agent.wm.competence_probs(feature(traj["deter"], traj["stoch"])))[:, 1:].mean(-1)
    np.testing.assert_allclose(info["scores"], scores, rtol=1e-6)
    np.testing.assert_array_equal(action, act[jnp.argmax(scores), 0])


def test_unknown_strategy_is_named():
    with pytest.raises(ValueError, match="gradient"):
        regulation.get_strategy("beam")


def test_algorithm1_draws_z_from_the_prior_by_default(trained, make_batch):
    """Algorithm 1 writes z_t ~ p(z_t | h_t); the posterior start is the named option."""
    learner, _, _ = trained
    agent, h, z, _, _ = _failing_states(learner, make_batch)
    assert agent.cfg.regulation.z_source == "prior"
    base = {"regulation.beta": 0.0, "regulation.rollout": "in_place"}
    # beta 0 in place: the acting state is the start state, so only the start z differs
    _, post = gradient.regulate(agent, h, z, jax.random.key(1), agent.cfg.replace({**base,
                                                                                   "regulation.z_source": "posterior"}))
    np.testing.assert_allclose(post["stoch"], z, atol=0)
    np.testing.assert_allclose(post["state_change"], 0.0, atol=0)
    np.testing.assert_allclose(post["action_change"], 0.0, atol=0)  # same state, same noise: the plain action
    _, prior = gradient.regulate(agent, h, z, jax.random.key(1), agent.cfg.replace(base))
    stoch = np.asarray(prior["stoch"])
    np.testing.assert_allclose(stoch.sum(-1), 1.0, atol=1e-6)  # a one-hot sample
    k_z = jax.random.split(jax.random.split(jax.random.key(1), h.shape[0])[0], 3)[0]
    from muse_jax import dists

    expected = dists.categorical_sample_st(k_z, agent.wm.rssm.prior_logits(h[:1].astype(jnp.float32)))
    np.testing.assert_allclose(stoch[0], np.asarray(expected)[0], atol=1e-6)
    assert float(np.asarray(prior["state_change"]).max()) > 0  # the prior sample is not the posterior


def test_effect_sizes_separate_the_ascent_from_rolling_forward(trained, make_batch):
    learner, _, _ = trained
    agent, h, z, _, _ = _failing_states(learner, make_batch)
    zero = agent.cfg.replace({"regulation.beta": 0.0, "regulation.rollout": "forward"})
    _, info0 = gradient.regulate(agent, h, z, jax.random.key(2), zero)
    np.testing.assert_allclose(info0["ascent_state_change"], 0.0, atol=0)  # no gradient: nothing from the ascent
    np.testing.assert_allclose(info0["ascent_action_change"], 0.0, atol=0)
    assert float(np.asarray(info0["state_change"]).min()) > 0  # but 10 imagined steps ahead of the posterior
    big = agent.cfg.replace({"regulation.beta": 0.5, "regulation.rollout": "forward"})
    _, info = gradient.regulate(agent, h, z, jax.random.key(2), big)
    assert float(np.asarray(info["ascent_state_change"]).min()) > 0


def test_normalized_step_has_length_beta_and_in_place_stays_at_the_current_step(trained, make_batch):
    gh, gz = jnp.array([3.0, 0.0]), jnp.array([[0.0, 4.0]])
    dh, dz = gradient.ascent_step(gh, gz, 0.5, "normalized")
    assert float(jnp.sqrt((dh ** 2).sum() + (dz ** 2).sum())) == pytest.approx(0.5)
    dh, dz = gradient.ascent_step(gh, gz, 0.5, "fixed")
    np.testing.assert_allclose(dh, [1.5, 0.0])
    learner, _, _ = trained
    agent, h, z, _, _ = _failing_states(learner, make_batch)
    cfg = agent.cfg.replace({"regulation.beta": 0.05, "regulation.step": "normalized",
                             "regulation.rollout": "in_place", "regulation.z_source": "posterior",
                             "regulation.horizon": 4})
    _, info = gradient.regulate(agent, h, z, jax.random.key(3), cfg)
    # four steps of length 0.05 from the posterior state, no model step in between
    assert float(np.asarray(info["state_change"]).max()) <= 4 * 0.05 + 1e-5
    assert (np.asarray(info["competence_after"])[:, -1] >= np.asarray(info["competence_before"])[:, 0] - 1e-6).all()


def test_effect_diagnostics_off_skips_them_and_changes_no_action(trained, make_batch):
    """`regulation.effect_diagnostics: false` drops the diagnostic keys and the work behind them (no second
    loop in the program), and the decision is the same: same actions, same ascended state."""
    learner, _, _ = trained
    agent, h, z, _, _ = _failing_states(learner, make_batch)
    on = agent.cfg.replace({"regulation.beta": 0.5})
    off = on.replace({"regulation.effect_diagnostics": False})
    act_on, info_on = jax.jit(lambda h_, z_: gradient.regulate(agent, h_, z_, jax.random.key(5), on))(h, z)
    act_off, info_off = jax.jit(lambda h_, z_: gradient.regulate(agent, h_, z_, jax.random.key(5), off))(h, z)
    np.testing.assert_allclose(act_off, act_on, atol=1e-6)
    np.testing.assert_allclose(info_off["deter"], info_on["deter"], atol=1e-6)
    diagnostics = {"ascent_state_change", "ascent_action_change", "grad_norm", "actor_jacobian_norm",
                   "actor_mean_abs"}
    assert diagnostics <= set(info_on) and not diagnostics & set(info_off)
    assert {"state_change", "action_change", "competence_final"} <= set(info_off)
    count = lambda cfg: str(jax.jit(lambda h_, z_: gradient.regulate(agent, h_, z_, jax.random.key(5), cfg))
                            .lower(h, z).as_text()).count("stablehlo.while")
    assert count(off) < count(on)
