"""RSSM shapes, is_first resets and imagination."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from muse_jax.rssm import RSSM

B, T, A, E = 3, 6, 2, 10


def make():
    return RSSM(deter=16, hidden=8, stoch=4, classes=5, blocks=4, act_dim=A, embed_dim=E, unimix=0.01,
                rngs=nnx.Rngs(0))


def test_observe_shapes_and_one_hot():
    rssm = make()
    key = jax.random.key(0)
    act = jax.random.uniform(key, (B, T, A))
    emb = jax.random.normal(key, (B, T, E))
    last, out = jax.jit(lambda a, e: rssm.observe(rssm.initial(B), a, e, jnp.zeros((B, T), bool), key))(act, emb)
    chex.assert_shape(out["deter"], (B, T, 16))
    chex.assert_shape([out["stoch"], out["post"], out["prior"]], (B, T, 4, 5))
    chex.assert_shape(last["deter"], (B, 16))
    np.testing.assert_allclose(out["stoch"].sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(jnp.exp(out["prior"]).sum(-1), 1.0, rtol=1e-5)


def test_is_first_resets_state():
    """After a reset at t=k, everything from k on is independent of the inputs before k."""
    rssm = make()
    key = jax.random.key(1)
    emb = jax.random.normal(key, (B, T, E))
    act = jax.random.uniform(jax.random.key(2), (B, T, A))
    first = jnp.zeros((B, T), bool).at[:, 3].set(True)
    emb2 = emb.at[:, :3].set(jax.random.normal(jax.random.key(3), (B, 3, E)))
    act2 = act.at[:, :4].set(-act[:, :4])  # action[3] is masked by the reset too
    _, a = rssm.observe(rssm.initial(B), act, emb, first, key)
    _, b = rssm.observe(rssm.initial(B), act2, emb2, first, key)
    np.testing.assert_allclose(a["deter"][:, 3:], b["deter"][:, 3:], atol=1e-6)
    assert float(jnp.abs(a["deter"][:, 2] - b["deter"][:, 2]).max()) > 1e-3
    # the reset step equals a fresh start from the zero state
    _, c = rssm.observe(rssm.initial(B), act[:, 3:], emb[:, 3:], first[:, 3:], key)
    np.testing.assert_allclose(a["deter"][:, 3], c["deter"][:, 0], atol=1e-6)


def test_imagine_shapes():
    rssm = make()
    start = rssm.initial(B)
    policy = lambda s, k: jnp.tanh(s["deter"][:, :A]) + 0.0 * jax.random.normal(k, (B, A))
    traj, act = jax.jit(lambda s: rssm.imagine(s, policy, 7, jax.random.key(0)))(start)
    chex.assert_shape(traj["deter"], (B, 8, 16))
    chex.assert_shape(traj["stoch"], (B, 8, 4, 5))
    chex.assert_shape(act, (B, 8, A))
    np.testing.assert_array_equal(traj["deter"][:, 0], 0.0)


def test_unrolled_scans_compute_the_rolled_numbers():
    """`unroll` (model.observe_unroll, behavior.imag_unroll) changes how the observe and imagine
    loops compile, not what they compute: in float32 the values match the rolled loops to 1e-6 and the
    gradients through the whole chain to 1e-4 relative (XLA fuses the unrolled body differently, so the
    float32 roundings differ; measured: at most 3e-5)."""
    rssm = make()
    key = jax.random.key(4)
    act = jax.random.uniform(key, (B, T, A), minval=-1.0)
    emb = jax.random.normal(jax.random.key(5), (B, T, E))
    first = jnp.zeros((B, T), bool).at[:, 0].set(True).at[1, 3].set(True)
    policy = lambda s, k: jnp.tanh(s["deter"][:, :A]) + 0.1 * jax.random.normal(k, (s["deter"].shape[0], A))

    def run(a, unroll):
        last, out = rssm.observe(rssm.initial(B), a, emb, first, key, unroll=unroll)
        traj, acts = rssm.imagine(last, policy, 5, jax.random.key(6), unroll=unroll)
        loss = out["deter"].sum() + (out["post"] * out["prior"]).sum() + traj["deter"].sum() + acts.sum()
        return loss, (out, traj, acts)

    rolled = jax.jit(jax.value_and_grad(lambda a: run(a, 1), has_aux=True))(act)
    for unroll in (2, 64):  # part of the loop, and all of it
        got = jax.jit(jax.value_and_grad(lambda a, u=unroll: run(a, u), has_aux=True))(act)
        (loss, aux), grad = got
        for x, y in zip(jax.tree.leaves((loss, aux)), jax.tree.leaves(rolled[0]), strict=True):
            np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(grad, rolled[1], rtol=1e-4, atol=1e-5)


def test_observe_remat_recomputes_instead_of_storing_and_computes_the_same():
    """`remat` (model.observe_remat) changes what the observe scan stores for its backward pass, not what
    it computes: values equal, gradients to float32 reordering; and the compiled forward loop writes fewer
    per-step buffers ("dots": only the matmul outputs; "nothing": none but the scan's own outputs)."""
    rssm = make()
    key = jax.random.key(4)
    act = jax.random.uniform(key, (B, T, A), minval=-1.0)
    emb = jax.random.normal(jax.random.key(5), (B, T, E))
    first = jnp.zeros((B, T), bool).at[:, 0].set(True).at[1, 3].set(True)

    def loss(a, remat):
        _, out = rssm.observe(rssm.initial(B), a, emb, first, key, remat=remat)
        return out["deter"].sum() + (out["post"] * out["prior"]).sum() + (out["stoch"] * jnp.arange(5.0)).sum()

    got, stores = {}, {}
    for remat in ("none", "dots", "nothing"):
        fn = jax.jit(jax.value_and_grad(lambda a, r=remat: loss(a, r)))
        got[remat] = fn(act)
        stores[remat] = fn.lower(act).compile().as_text().count("dynamic-update-slice(")
    for remat in ("dots", "nothing"):
        np.testing.assert_allclose(got[remat][0], got["none"][0], rtol=1e-6)
        np.testing.assert_allclose(got[remat][1], got["none"][1], rtol=1e-4, atol=1e-5)
    assert float(jnp.abs(got["none"][1]).max()) > 1e-4
    assert stores["nothing"] < stores["dots"] < stores["none"], stores


@pytest.mark.parametrize("hidden_bias", [False, True])
def test_scans_compute_what_their_single_steps_compute(hidden_bias):
    """`observe` and `imagine` compute outside their loops what does not depend on the carried state
    (action embeddings, the observation's share of the posterior's first layer, the sampling uniforms
    and key splits). They must equal a Python loop of `obs_step` / `img_step` with the same keys: the
    same one-hot samples exactly, values and gradients to float32 reordering. With `hidden_bias` on, the
    posterior's first-layer bias is added once, not twice."""
    rssm = RSSM(deter=16, hidden=8, stoch=4, classes=5, blocks=4, act_dim=A, embed_dim=E, unimix=0.01,
                rngs=nnx.Rngs(0), hidden_bias=hidden_bias)
    if hidden_bias:  # a nonzero bias, so that adding it twice (or never) would show
        for lin in (rssm.post_net.hidden[0], rssm.core.in_action):
            lin.bias.set_value(jax.random.normal(jax.random.key(9), lin.bias.get_value().shape))
    key = jax.random.key(7)
    act = 2.0 * jax.random.uniform(key, (B, T, A), minval=-1.0)  # some |a| > 1: the scaling is exercised
    emb = jax.random.normal(jax.random.key(8), (B, T, E))
    first = jnp.zeros((B, T), bool).at[:, 0].set(True).at[2, 4].set(True)
    policy = lambda s, k: jnp.tanh(s["deter"][:, :A]) + 0.1 * jax.random.normal(k, (s["deter"].shape[0], A))

    def scanned(a):
        last, out = rssm.observe(rssm.initial(B), a, emb, first, key)
        traj, acts = rssm.imagine(last, policy, 4, jax.random.key(6))
        return (out["deter"].sum() + (out["post"] * out["stoch"]).sum() + traj["deter"].sum()
                + (traj["stoch"] * jnp.arange(5.0)).sum()), (out, traj, acts)

    def stepped(a):
        state, deter, stoch, post = rssm.initial(B), [], [], []
        for t, k in enumerate(jax.random.split(key, T)):
            state, logits = rssm.obs_step(state, a[:, t], emb[:, t], first[:, t], k)
            deter.append(state["deter"]), stoch.append(state["stoch"]), post.append(logits)
        out = dict(deter=jnp.stack(deter, 1), stoch=jnp.stack(stoch, 1), post=jnp.stack(post, 1))
        keys = jax.random.split(jax.random.key(6), 5)
        states, acts = [state], []
        for k in keys[:-1]:
            ka, kz = jax.random.split(k)
            acts.append(policy(states[-1], ka))
            states.append(rssm.img_step(states[-1], acts[-1], kz)[0])
        acts.append(policy(states[-1], keys[-1]))
        traj = dict(deter=jnp.stack([s["deter"] for s in states], 1),
                    stoch=jnp.stack([s["stoch"] for s in states], 1))
        return (out["deter"].sum() + (out["post"] * out["stoch"]).sum() + traj["deter"].sum()
                + (traj["stoch"] * jnp.arange(5.0)).sum()), (out, traj, jnp.stack(acts, 1))

    (loss_a, (out_a, traj_a, acts_a)), grad_a = jax.jit(jax.value_and_grad(scanned, has_aux=True))(act)
    (loss_b, (out_b, traj_b, acts_b)), grad_b = jax.jit(jax.value_and_grad(stepped, has_aux=True))(act)
    np.testing.assert_array_equal(out_a["stoch"].argmax(-1), out_b["stoch"].argmax(-1))
    np.testing.assert_array_equal(traj_a["stoch"].argmax(-1), traj_b["stoch"].argmax(-1))
    for x, y in ((out_a["deter"], out_b["deter"]), (out_a["post"], out_b["post"]),
                 (traj_a["deter"], traj_b["deter"]), (acts_a, acts_b)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss_a, loss_b, rtol=1e-5)
    np.testing.assert_allclose(grad_a, grad_b, rtol=1e-4, atol=1e-5)
    assert float(jnp.abs(grad_a).max()) > 1e-4  # the gradient reaches the actions through the chain
