"""Pins the current danijar/dreamerv3 settings: LaProp optimiser, folded loss with repval, init scales,
unclipped action samples, and replay context (stored posterior latents as chunk start states)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from muse_jax import agent as ag
from muse_jax import behavior, nets
from muse_jax.config import Config
from muse_jax.replay import Replay, latent_arrays

PROPRIO, ACT = 4, 2


def test_defaults_are_current_dreamerv3():
    c = Config()
    o, lw, b = c.optim, c.loss, c.behavior
    assert (o.lr, o.agc, o.eps, o.beta1, o.beta2, o.warmup) == (4e-5, 0.3, 1e-20, 0.9, 0.999, 1000)
    assert (lw.rep, lw.policy, lw.value, lw.repval) == (0.1, 1.0, 1.0, 0.3)
    assert (b.imag_horizon, b.horizon, b.lam, b.actent, b.slowreg, b.slow_rate) == (15, 333.0, 0.95, 3e-4, 1.0, 0.02)
    assert (b.retnorm_low, b.retnorm_high, b.retnorm_rate, b.retnorm_limit) == (5.0, 95.0, 0.01, 1.0)
    assert (b.min_std, b.max_std, b.policy_outscale) == (0.1, 1.0, 0.01)
    assert (c.model.bins, c.model.unimix, c.loss.free_nats) == (255, 0.01, 1.0)
    assert c.replay.context


def _laprop_by_hand(grads: list[np.ndarray], param: np.ndarray, lr: float, warmup: int, agc: float,
                    b1: float = 0.9, b2: float = 0.999, eps: float = 1e-20, pmin: float = 1e-3) -> np.ndarray:
    nu, mu, p = np.zeros_like(param), np.zeros_like(param), param.copy()
    for t, g in enumerate(grads, start=1):
        upper = agc * max(pmin, np.linalg.norm(p))
        u = g / max(1.0, np.linalg.norm(g) / upper)
        nu = b2 * nu + (1 - b2) * u * u
        u = u / (np.sqrt(nu / (1 - b2**t)) + eps)
        mu = b1 * mu + (1 - b1) * u
        u = mu / (1 - b1**t)
        p = p - lr * min(1.0, (t - 1) / warmup) * u
    return p


def test_optimiser_update_equals_hand_computation(make_config):
    cfg = make_config(optim={"lr": 0.01, "warmup": 2, "agc": 0.3})
    tx = ag.make_optimizer(cfg)
    p0 = np.array([1.0, -2.0, 0.5], np.float32)
    grads = [np.array([3.0, 0.1, -0.2], np.float32), np.array([0.05, -0.02, 0.01], np.float32),
             np.array([-1.0, 2.0, 0.0], np.float32), np.array([0.2, 0.2, -0.3], np.float32)]
    params = {"w": jnp.asarray(p0)}
    opt = tx.init(params)
    for g in grads:
        upd, opt = tx.update({"w": jnp.asarray(g)}, opt, params)
        params = jax.tree.map(lambda a, b: a + b, params, upd)
    want = _laprop_by_hand(grads, p0, lr=0.01, warmup=2, agc=0.3)
    np.testing.assert_allclose(np.asarray(params["w"]), want, rtol=1e-5, atol=1e-7)
    # the first gradient (norm 3.0 > 0.3 * |p0|) is clipped; the warm-up makes step 1 a no-op
    assert np.linalg.norm(grads[0]) > 0.3 * np.linalg.norm(p0)


def test_one_optimiser_state_covers_world_model_actor_and_critic(tiny_cfg):
    spec = ag.ObsSpec(image_shape=None, proprio_dim=PROPRIO, act_dim=ACT, num_tasks=1)
    tr = nnx.merge(*nnx.split(ag.Learner(tiny_cfg, spec, nnx.Rngs(params=0))))
    n_params = sum(x.size for m in (tr.agent.wm, tr.agent.actor, tr.agent.critic)
                   for x in jax.tree.leaves(nnx.state(m, nnx.Param)))
    n_nu = sum(x.size for x in jax.tree.leaves(tr.opt.get_value()[1].nu))  # scale_by_rms: nu per parameter
    assert n_nu == n_params
    assert not any(hasattr(tr, k) for k in ("model_opt", "actor_opt", "critic_opt"))


def test_folded_loss_has_repval_with_its_scale(trained, tiny_cfg):
    _, history, _ = trained
    m = history[-1]
    lw = tiny_cfg.loss
    assert lw.repval == 0.3 and float(m["loss/repval"]) > 0
    want = (float(m["loss/model"]) + lw.policy * float(m["loss/actor"]) + lw.value * float(m["loss/critic"])
            + lw.repval * float(m["loss/repval"]))
    np.testing.assert_allclose(float(m["loss/total"]), want, rtol=1e-5)


def test_replay_value_loss_uses_lambda_returns_along_replay_bootstrapped_by_imagination(tiny_cfg):
    spec_feat = 6
    critic = behavior.Critic(spec_feat, tiny_cfg, nnx.Rngs(0))
    B, T = 1, 3
    reward = jnp.array([[0.0, 1.0, 2.0]])
    term = jnp.array([[0.0, 0.0, 1.0]])
    boot = jnp.array([[5.0, 6.0, 7.0]])
    feat = jnp.zeros((B, T, spec_feat))
    _, ret = behavior.replay_value_loss(critic, critic, feat, reward, term, boot, tiny_cfg)
    g, lam = 1 - 1 / tiny_cfg.behavior.horizon, tiny_cfg.behavior.lam
    r1 = 2.0 + g * 0.0 * 7.0  # terminal at step 2: no bootstrap
    r0 = 1.0 + g * ((1 - lam) * 6.0 + lam * r1)
    np.testing.assert_allclose(np.asarray(ret), [[r0, r1]], rtol=1e-6)


def test_init_is_fan_in_truncated_normal_and_policy_output_is_scaled(tiny_cfg):
    w = nets.trunc_normal_in(1.0)(jax.random.key(0), (400, 300))
    np.testing.assert_allclose(float(w.std()), 1.0 / np.sqrt(400), rtol=0.05)  # fan-in, not fan-avg
    assert float(jnp.abs(w).max()) <= 2 * 1.1368 / np.sqrt(400) + 1e-6
    wb = nets.trunc_normal_in(1.0)(jax.random.key(1), (8, 50, 40))  # block kernel: fan-in = 8 * 50
    np.testing.assert_allclose(float(wb.std()), 1.0 / np.sqrt(400), rtol=0.05)
    actor = behavior.Actor(64, 3, tiny_cfg.replace({"model.units": 256}), nnx.Rngs(0))
    out_std = float(actor.net.out.kernel.get_value().std())  # fan-in 256, 6 outputs
    np.testing.assert_allclose(out_std, 0.01 / np.sqrt(256), rtol=0.1)


def test_split_policy_out_is_two_output_layers_computing_the_same_function(tiny_cfg):
    """`behavior.split_policy_out`: dreamerv3's `bounded_normal` head (separate `mean` and `stddev` Linear,
    so per-tensor AGC clips them apart); same parameter count, and with the one layer's halves copied in,
    the same mean and std."""
    cfg = tiny_cfg.replace({"model.units": 32})
    one = behavior.Actor(16, 3, cfg, nnx.Rngs(0))
    two = behavior.Actor(16, 3, cfg.replace({"behavior.split_policy_out": True}), nnx.Rngs(0))
    count = lambda m: sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))
    assert count(one) == count(two) and two.net.out is None
    assert two.mean_out.kernel.get_value().shape == two.std_out.kernel.get_value().shape == (32, 3)
    for part in ("hidden", "norms"):
        nnx.update(getattr(two.net, part), nnx.state(getattr(one.net, part)))
    k, b = one.net.out.kernel.get_value(), one.net.out.bias.get_value()
    for layer, cols in ((two.mean_out, slice(0, 3)), (two.std_out, slice(3, 6))):
        layer.kernel.set_value(k[:, cols])
        layer.bias.set_value(b[cols] + 0.5)  # nonzero: a swapped half would show
    one.net.out.bias.set_value(b + 0.5)
    feat = jax.random.normal(jax.random.key(1), (5, 16))
    for x, y in zip(one.dist(feat), two.dist(feat), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-6)


def test_imagined_actions_are_unclipped_and_their_logp_is_used(trained):
    learner, _, batches = trained
    agent = learner.agent()
    cfg = learner.cfg
    starts = dict(deter=jnp.zeros((256, cfg.model.deter)),
                  stoch=jnp.zeros((256, cfg.model.stoch, cfg.model.classes)), cont=jnp.ones(256))
    traj = behavior.imagine(agent.wm, agent.actor, starts, jax.random.key(0), 3)
    assert float(jnp.abs(traj["action"]).max()) > 1.0


def test_imagination_draws_the_policy_noise_before_its_loop_with_the_same_bits(trained):
    """`behavior.imagine` draws every step's action noise before the scan (`Actor.noise`, one batched
    draw) instead of inside it: the actions and states equal a rollout whose policy draws from each
    step's key (`Actor.sample`), bit for bit in the samples and to float32 reordering in the values."""
    learner, _, _ = trained
    agent, cfg = learner.agent(), learner.cfg
    n = 32
    starts = dict(deter=jax.random.normal(jax.random.key(1), (n, cfg.model.deter)),
                  stoch=jax.nn.one_hot(jax.random.randint(jax.random.key(2), (n, cfg.model.stoch), 0,
                                                          cfg.model.classes), cfg.model.classes),
                  cont=jnp.ones(n))
    key = jax.random.key(3)
    hoisted = jax.jit(lambda k: behavior.imagine(agent.wm, agent.actor, starts, k, 5))(key)
    in_loop = lambda s, k: agent.actor.sample(nets.feature(s["deter"], s["stoch"]), k, clip=False)
    start = dict(deter=starts["deter"], stoch=starts["stoch"])
    traj, act = jax.jit(lambda k: agent.wm.rssm.imagine(start, in_loop, 5, k))(key)
    np.testing.assert_allclose(hoisted["action"], act, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hoisted["feat"], nets.feature(traj["deter"], traj["stoch"]), rtol=1e-5, atol=1e-5)
    other = jax.jit(lambda k: behavior.imagine(agent.wm, agent.actor, starts, k, 5))(jax.random.key(4))
    assert float(jnp.abs(other["action"] - hoisted["action"]).max()) > 1e-2  # the noise is drawn from the key


# ----------------------------------------------------------------------------- replay context


def _episode(T: int, D: int = 6, S: int = 3, K: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    stoch = jax.nn.one_hot(rng.integers(0, K, (T, S)), K)
    deter, stoch_idx = latent_arrays(rng.normal(0, 0.5, (T, D)), np.asarray(stoch))
    return {"proprio": rng.normal(size=(T, PROPRIO)).astype(np.float32), "task_id": np.ones(T, np.int32),
            "action": rng.uniform(-1, 1, (T, ACT)).astype(np.float32), "reward": np.arange(T, dtype=np.float32),
            "is_first": np.arange(T) == 0, "is_terminal": np.zeros(T, bool), "deter": deter, "stoch": stoch_idx}


def test_stored_latents_round_trip_through_replay_and_state_dict():
    ep = _episode(20)
    rp = Replay(capacity=100, seq_len=5, seed=0)
    rp.add_episode(ep, success_T=np.zeros(20, bool))
    rp2 = Replay(capacity=100, seq_len=5, seed=0)
    rp2.load_state_dict(rp.state_dict())
    for replay in (rp, rp2):
        b = replay.sample(64)
        assert "deter" not in b and "stoch" not in b
        offs = b["reward"][:, 0].astype(int)  # reward[t] = t identifies the chunk's offset
        mid = offs > 0
        assert mid.any() and (~mid).any()
        np.testing.assert_array_equal(b["start_deter"][mid], ep["deter"][offs[mid] - 1])
        np.testing.assert_array_equal(b["start_stoch"][mid], ep["stoch"][offs[mid] - 1])
        assert not b["is_first"][mid, 0].any()  # mid-episode chunks continue the stored state
        assert b["is_first"][~mid, 0].all() and (b["start_deter"][~mid] == 0).all()
    off = Replay(capacity=100, seq_len=5, seed=0, context=False)
    off.add_episode(ep, success_T=np.zeros(20, bool))
    b = off.sample(8)
    assert "start_deter" not in b and b["is_first"][:, 0].all()


def test_world_model_loss_starts_from_the_given_latent(trained):
    learner, _, batches = trained
    wm = learner.agent().wm
    m = learner.cfg.model
    batch = dict(batches[0])
    B = batch["action"].shape[0]
    batch["is_first"] = np.zeros_like(batch["is_first"])
    rng = np.random.default_rng(0)
    batch["start_deter"] = rng.normal(0, 0.5, (B, m.deter)).astype(np.float16)
    batch["start_stoch"] = rng.integers(0, m.classes, (B, m.stoch)).astype(np.uint8)
    _, (_, post) = wm.loss(batch, jax.random.key(0))
    start = wm.start_state(batch)
    want = wm.rssm.core(start["deter"], start["stoch"].reshape(B, -1), jnp.asarray(batch["action"][:, 0]))
    np.testing.assert_allclose(np.asarray(post["deter"][:, 0]), np.asarray(want), rtol=1e-5, atol=1e-6)
    zero = wm.rssm.core(jnp.zeros_like(start["deter"]), jnp.zeros_like(start["stoch"]).reshape(B, -1),
                        jnp.asarray(batch["action"][:, 0]))
    assert float(jnp.abs(post["deter"][:, 0] - zero).max()) > 1e-3  # not the zero state


def _hidden_biases(learner: ag.SplitLearner) -> dict[str, np.ndarray]:
    """Every `bias` leaf of the trained modules that belongs to a hidden layer (not an output layer or
    the GRU's block-linear layers, which always have one)."""
    agent = learner.agent()
    out = {}
    for name, mod in (("wm", agent.wm), ("actor", agent.actor), ("critic", agent.critic)):
        for path, x in nnx.to_flat_state(nnx.state(mod, nnx.Param)):
            keys = [str(k) for k in path]
            if keys[-1] == "bias" and ("hidden" in keys or keys[-2].startswith("in_")):
                out["/".join([name, *keys])] = np.asarray(x.get_value())
    return out


def test_hidden_bias_adds_dreamerv3s_biases_and_they_train(make_config, make_batch):
    """`model.hidden_bias` (dreamerv3 3.3.1's `nets.Linear(bias=True)`): one zero-initialised bias per
    hidden layer of every MLP (encoder, decoder, reward/continue/competence heads, actor, critic, RSSM
    prior 2 and posterior 1) and per GRU input embedding (3); none without it; and they get gradients."""
    spec = ag.ObsSpec(image_shape=None, proprio_dim=PROPRIO, act_dim=ACT, num_tasks=1)
    off = make_config(**{"model.hidden_bias": False})
    on = make_config()
    assert on.model.hidden_bias is True  # the default since 2026-11-26 (difference 8, closed)
    assert _hidden_biases(ag.create_learner(off, spec, seed=0)) == {}
    learner = ag.create_learner(on, spec, seed=0)
    biases = _hidden_biases(learner)
    m = on.model
    mlp_hidden = 2 * m.mlp_layers + 3 * m.head_layers + 2 * m.mlp_layers  # wm vec enc/dec, 3 heads; actor, critic
    assert sum(b.size for b in biases.values()) == m.units * mlp_hidden + m.hidden * (3 + 2 + 1)
    assert all(not b.any() for b in biases.values())
    step = ag.make_train_step(on, learner.graphdef)
    state = learner.state
    for i in range(3):
        state, _ = step(state, make_batch(i), jax.random.key(i))
    moved = _hidden_biases(ag.SplitLearner(learner.graphdef, state))
    assert all(np.abs(moved[k]).max() > 0 for k in moved if not k.startswith("critic")), \
        [k for k in moved if not np.abs(moved[k]).any()]


def test_without_hidden_biases_the_dynamics_cannot_see_how_large_an_action_is():
    """Why difference 8 matters (reach-v3, docs/experiments/does-it-learn.md): with no bias before RMSNorm,
    which has no shift, a
    hidden layer's output is invariant to a positive scaling of its input, so the GRU's action embedding
    maps a and a/4 to the same next state: the world model sees only an action's direction. A trained
    bias breaks that (dreamerv3's `dynin2` has one, zero at init, which is why the runs part only after
    some thousand updates)."""
    k = jax.random.split(jax.random.key(0), 4)
    deter = jax.random.normal(k[0], (8, 64))
    stoch = jax.nn.one_hot(jax.random.randint(k[1], (8, 4), 0, 8), 8).reshape(8, -1)
    action = jax.random.uniform(k[2], (8, ACT), minval=-1.0, maxval=1.0)
    for bias in (False, True):
        core = nets.BlockGRU(64, 32, 32, ACT, 4, nnx.Rngs(0), input_bias=bias)
        if bias:
            core.in_action.bias.set_value(0.1 * jax.random.normal(k[3], (32,)))
        step = lambda a, core=core: core(deter, stoch, a)
        smaller = float(jnp.abs(step(action) - step(0.25 * action)).max())
        opposite = float(jnp.abs(step(action) - step(-action)).max())
        assert opposite > 0.05
        assert (smaller < 0.02 * opposite) is (not bias), (bias, smaller, opposite)
