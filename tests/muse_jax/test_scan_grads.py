"""`scan_with_param_grads_after` (muse_jax/scan_grads.py, `model.observe_param_grads`): the parameters'
gradient taken after the backward loop is the plain scan's, the loop holds none of it, and the RSSM's
observe scan computes the same with either setting."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from muse_jax.rssm import RSSM
from muse_jax.scan_grads import scan_with_param_grads_after

T, B, D, X = 9, 3, 4, 2


def step(p, carry, x):
    """A small recurrence with what the RSSM's step has: a matmul, a scale, a bias, two outputs."""
    h = jnp.tanh(carry["h"] @ p["w"] + x @ p["u"] + p["b"]) * p["scale"]
    return {"h": h}, (h.sum(-1), jnp.sin(h) * p["b"])


def inputs(seed=0):
    k = jax.random.split(jax.random.key(seed), 6)
    p = {"w": jax.random.normal(k[0], (D, D)) * 0.5, "u": jax.random.normal(k[1], (X, D)),
         "b": jax.random.normal(k[2], (D,)), "scale": 1.0 + 0.1 * jax.random.normal(k[3], (D,))}
    return p, {"h": jax.random.normal(k[4], (B, D))}, jax.random.normal(k[5], (T, B, X))


def loss(run, p, c0, xs):
    last, (s, y) = run(p, c0, xs)
    return (last["h"] ** 2).sum() + (s * jnp.arange(T)[:, None]).sum() + jnp.cos(y).sum()


PLAIN = lambda p, c0, xs: jax.lax.scan(lambda c, x: step(p, c, x), c0, xs)


@pytest.mark.parametrize("unroll,policy", [(1, None), (3, jax.checkpoint_policies.dots_saveable),
                                           (T, jax.checkpoint_policies.nothing_saveable)])
def test_values_and_every_gradient_are_the_plain_scans(unroll, policy):
    after = lambda p, c0, xs: scan_with_param_grads_after(step, p, c0, xs, unroll=unroll, remat_policy=policy)
    p, c0, xs = inputs()
    want = jax.jit(jax.value_and_grad(lambda *a: loss(PLAIN, *a), argnums=(0, 1, 2)))(p, c0, xs)
    got = jax.jit(jax.value_and_grad(lambda *a: loss(after, *a), argnums=(0, 1, 2)))(p, c0, xs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for g, w in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1]), strict=True):
        assert float(jnp.abs(w).max()) > 1e-3  # every gradient is exercised
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    same_loop = lambda p, c0, xs: jax.lax.scan(
        lambda c, x: step(p, c, x) if policy is None else jax.checkpoint(step, policy=policy)(p, c, x),
        c0, xs, unroll=unroll)  # undifferentiated it is the plain scan, the same program
    np.testing.assert_array_equal(jax.jit(after)(p, c0, xs)[0]["h"], jax.jit(same_loop)(p, c0, xs)[0]["h"])


def test_under_vmap_each_member_gets_its_own_gradient():
    """As `--seeds` and adaptation vmap the train step over stacked learners."""
    after = lambda p, c0, xs: scan_with_param_grads_after(step, p, c0, xs)
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *[inputs(s) for s in range(3)])
    grad = lambda run: jax.jit(jax.vmap(jax.grad(lambda *a: loss(run, *a))))(*stacked)
    for g, w in zip(jax.tree.leaves(grad(after)), jax.tree.leaves(grad(PLAIN)), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _backward_loop_dots(run) -> int:
    """Matmuls inside the compiled program's while bodies (the forward and the backward loop)."""
    p, c0, xs = inputs()
    text = jax.jit(jax.grad(lambda *a: loss(run, *a))).lower(p, c0, xs).compile().as_text()
    names = set(re.findall(r"body=(%[\w.\-]+)", text))
    bodies = [c for c in text.split("\n\n") if c.split(" ", 1)[0] in names]
    assert len(bodies) == len(names) == 2, names  # the forward loop and the backward loop
    return sum(c.count(" dot(") for c in bodies)


def test_the_backward_loop_takes_no_weight_gradient():
    """The point of it: in the plain scan every step also multiplies out dW (x^T dh, h^T dh); after the loop
    the loop keeps only the state's chain (dh W^T) and the forward matmuls."""
    after = lambda p, c0, xs: scan_with_param_grads_after(step, p, c0, xs)
    assert _backward_loop_dots(after) < _backward_loop_dots(PLAIN)


def test_the_observe_scan_computes_the_same_with_either_setting():
    """`model.observe_param_grads`: the RSSM's observe scan with the parameters' gradient after the loop has
    the same values exactly and the same gradients (parameters, start state, embedding) to float32
    reordering, with and without remat and unrolling."""
    Bo, To, A, E = 3, 7, 2, 5
    rssm = RSSM(deter=16, hidden=8, stoch=4, classes=3, blocks=2, act_dim=A, embed_dim=E, unimix=0.01,
                rngs=nnx.Rngs(0), hidden_bias=True)
    k = jax.random.split(jax.random.key(0), 5)
    act, emb = jax.random.normal(k[0], (Bo, To, A)), jax.random.normal(k[1], (Bo, To, E))
    first = jax.random.bernoulli(k[2], 0.2, (Bo, To)).at[:, 0].set(True)
    s0 = dict(deter=jax.random.normal(k[3], (Bo, 16)),
              stoch=jax.nn.one_hot(jax.random.randint(k[4], (Bo, 4), 0, 3), 3))
    shapes = [(Bo, To, 16), (Bo, To, 4, 3), (Bo, To, 4, 3), (Bo, To, 4, 3), (Bo, 16)]
    cts = [jax.random.normal(jax.random.key(i), s) for i, s in enumerate(shapes)]
    for unroll, remat in [(1, "none"), (3, "dots")]:
        def f(r, s0, e, after, unroll=unroll, remat=remat):
            last, o = r.observe(s0, act, e, first, jax.random.key(9), unroll=unroll, remat=remat,
                                param_grads_after=after)
            outs = [o["deter"], o["stoch"], o["post"], o["prior"], last["deter"]]
            return sum((x * c).sum() for x, c in zip(outs, cts, strict=True))

        (v0, g0), (v1, g1) = [jax.jit(lambda r, s, e, a=a: nnx.value_and_grad(f, argnums=(0, 1, 2))(r, s, e, a))(
            rssm, s0, emb) for a in (False, True)]
        assert v0 == v1
        for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5 * float(jnp.abs(a).max()) + 1e-7)


def test_a_train_step_updates_the_parameters_alike_with_either_setting():
    """The whole train step (world model, imagination, actor-critic, optimiser) with the setting forced:
    the same losses and, after three updates, the same parameters to float32 reordering."""
    from muse_jax import agent as ag
    from tests.muse_jax.conftest import ACT, PROPRIO, synthetic_batch, tiny_config

    spec = ag.ObsSpec(image_shape=None, proprio_dim=PROPRIO, act_dim=ACT, num_tasks=1)
    runs = {}
    for setting in ("in_loop", "after_loop"):
        cfg = tiny_config(**{"model.observe_param_grads": setting})
        learner = ag.create_learner(cfg, spec, seed=0)
        step, state, losses = ag.make_train_step(cfg, learner.graphdef), learner.state, []
        for i in range(3):
            state, metrics = step(state, synthetic_batch(i), jax.random.key(i))
            losses.append([float(metrics[k]) for k in ("loss/model", "loss/actor", "loss/critic")])
        runs[setting] = (losses, nnx.state(nnx.merge(learner.graphdef, state), nnx.Param))
    np.testing.assert_allclose(runs["after_loop"][0], runs["in_loop"][0], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(runs["in_loop"][1]), jax.tree.leaves(runs["after_loop"][1]), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
