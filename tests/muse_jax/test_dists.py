"""Pure distribution math of DreamerV3 (symlog, two-hot, KL free bits, bounded normal)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from muse_jax import dists


@pytest.mark.parametrize("jit", [False, True])
def test_symlog_symexp_round_trip(jit):
    x = jnp.array([-1e6, -123.4, -1.0, -1e-3, 0.0, 1e-3, 0.5, 7.0, 1e5])
    f = (lambda v: dists.symexp(dists.symlog(v)))
    f = jax.jit(f) if jit else f
    np.testing.assert_allclose(f(x), x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dists.symlog(jnp.array([np.e - 1.0, -(np.e - 1.0)])), [1.0, -1.0], rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_twohot_round_trip(jit):
    bins = dists.twohot_bins(255)
    x = jnp.array([-5000.0, -3.3, -1.0, 0.0, 0.25, 1.0, 2.5, 17.0, 1234.5])
    enc = jax.jit(dists.twohot_encode) if jit else dists.twohot_encode
    labels = enc(x, bins)
    chex.assert_shape(labels, (9, 255))
    np.testing.assert_allclose(labels.sum(-1), 1.0, atol=1e-6)
    assert int((labels > 0).sum(-1).max()) <= 2
    np.testing.assert_allclose((labels * bins).sum(-1), x, rtol=1e-4, atol=1e-4)
    # decoding log-labels gives the value back (softmax(log p) = p)
    dec = dists.twohot_decode(jnp.log(labels + 1e-30), bins)
    np.testing.assert_allclose(dec, x, rtol=1e-3, atol=1e-3)


def test_twohot_encode_finds_the_bins_without_a_loop():
    """The bins are found by one compare-and-count (as dreamerv3 does), not a binary-search while loop
    (log2(n) launches per call on a GPU); the labels equal those a binary search gives, on exact bin
    centres, between them and beyond both ends."""
    bins = dists.twohot_bins(255)
    x = jnp.concatenate([bins, 0.5 * (bins[1:] + bins[:-1]), jnp.array([-1e9, 1e9]),
                         jax.random.normal(jax.random.key(0), (500,)) * 30.0])
    assert "while" not in jax.jit(dists.twohot_encode).lower(x, bins).as_text()
    n = bins.shape[0]
    above = jnp.clip(jnp.searchsorted(bins, jnp.clip(x, bins[0], bins[-1]), side="right", method="scan"), 1, n - 1)
    labels = dists.twohot_encode(x, bins)
    below_got = jnp.argmax(labels > 0, -1)
    assert bool(jnp.all((below_got == above - 1) | (below_got == above)))  # weight on the same two bins
    np.testing.assert_array_equal(labels[:, above - 1].diagonal() + labels[:, above].diagonal(), 1.0)


def test_twohot_decode_uniform_is_zero_and_loss_minimised_at_target():
    bins = dists.twohot_bins(31)
    assert float(dists.twohot_decode(jnp.zeros((31,)), bins)) == 0.0
    target = jnp.array(3.0)
    good = jnp.log(dists.twohot_encode(target, bins) + 1e-9)
    assert float(dists.twohot_loss(good, target, bins)) < float(dists.twohot_loss(jnp.zeros(31), target, bins))


def test_kl_free_bits_clip_and_zero_gradient():
    key = jax.random.key(0)
    post = jax.random.normal(key, (3, 4, 5)) * 0.01  # nearly identical -> KL far below 1 nat
    prior = post + 0.01
    def loss(post, prior):
        dyn, rep, _ = dists.kl_losses(post, prior, 1.0)
        return (dyn + rep).sum()
    dyn, rep, kl = dists.kl_losses(post, prior, 1.0)
    np.testing.assert_array_equal(dyn, 1.0)
    np.testing.assert_array_equal(rep, 1.0)
    assert float(kl.max()) < 1.0
    g_post, g_prior = jax.grad(loss, argnums=(0, 1))(post, prior)
    np.testing.assert_array_equal(g_post, 0.0)
    np.testing.assert_array_equal(g_prior, 0.0)
    # above the threshold the losses equal the KL and have gradients
    far = jax.random.normal(jax.random.key(1), (3, 4, 5)) * 5
    dyn, rep, kl = dists.kl_losses(far, prior, 1.0)
    np.testing.assert_allclose(dyn, kl, rtol=1e-5)
    assert float(jnp.abs(jax.grad(loss, argnums=1)(far, prior)).sum()) > 0


def test_kl_matches_hand_computation():
    p = jnp.array([0.7, 0.2, 0.1])
    q = jnp.array([0.2, 0.5, 0.3])
    expected = float((p * jnp.log(p / q)).sum())
    np.testing.assert_allclose(dists.kl_categorical(jnp.log(p), jnp.log(q)), expected, rtol=1e-5)


def test_unimix_and_straight_through_sample():
    logits = jnp.array([[100.0, 0.0, 0.0, 0.0]])
    probs = jnp.exp(dists.unimix_logits(logits, 0.01))
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    assert float(probs.min()) >= 0.01 / 4 - 1e-7
    sample = dists.categorical_sample_st(jax.random.key(0), jnp.log(probs))
    np.testing.assert_allclose(sample, jax.nn.one_hot(jnp.array([0]), 4), atol=1e-6)
    grad = jax.grad(lambda lg: (dists.categorical_sample_st(jax.random.key(0), lg) * jnp.arange(4.0)).sum())(
        jnp.zeros((1, 4)))
    assert float(jnp.abs(grad).sum()) > 0  # straight-through gradient flows


def test_bounded_normal_and_bernoulli():
    raw = jnp.array([[50.0, -50.0, -50.0, 50.0]])
    mean, std = dists.bounded_normal(raw, 0.1, 1.0)
    np.testing.assert_allclose(mean, [[1.0, -1.0]], atol=1e-6)
    np.testing.assert_allclose(std, [[0.1, 1.0]], atol=1e-6)
    eps = jax.random.normal(jax.random.key(0), (1000, 2))
    a = dists.normal_sample_from_noise(eps, jnp.zeros((1000, 2)), jnp.ones((1000, 2)) * 3)
    assert float(jnp.abs(a).max()) > 1.0  # unclipped (dreamerv3): the env wrapper clips, not the sampler
    np.testing.assert_allclose(float(a.std()), 3.0, rtol=0.1)
    np.testing.assert_allclose(dists.normal_logp(jnp.zeros((1, 1)), jnp.zeros((1, 1)), jnp.ones((1, 1))),
                               [-0.5 * np.log(2 * np.pi)], rtol=1e-6)
    np.testing.assert_allclose(dists.bernoulli_logp(jnp.array(0.0), jnp.array(1.0)), np.log(0.5), rtol=1e-6)
    np.testing.assert_allclose(dists.binary_cross_entropy(jnp.array(2.0), jnp.array(0.0)),
                               np.log1p(np.exp(2.0)), rtol=1e-5)


@pytest.mark.parametrize("n", [3, 4, 5, 6, 8, 31, 64, 255])
def test_twohot_decode_is_the_expectation_for_odd_and_even_bin_counts(n):
    bins = dists.twohot_bins(n)
    assert float(dists.twohot_decode(jnp.zeros((n,)), bins)) == 0.0  # uniform: exactly 0, even n included
    np.testing.assert_allclose(np.asarray(bins), -np.asarray(bins)[::-1], rtol=0, atol=0)  # antisymmetric
    logits = jax.random.normal(jax.random.key(n), (7, n)) * 3.0
    small = dists.twohot_bins(n, -5.0, 5.0)  # moderate bins: the plain sum is exact enough to compare with
    expected = (jax.nn.softmax(logits, -1) * small).sum(-1)
    np.testing.assert_allclose(dists.twohot_decode(logits, small), expected, rtol=1e-5, atol=1e-5)
    for x in (-3.0, 0.7, 2.5):  # encode then decode returns the value
        code = dists.twohot_encode(jnp.float32(x), small)
        np.testing.assert_allclose(dists.twohot_decode(jnp.log(code + 1e-30), small), x, rtol=1e-4, atol=1e-4)


def test_twohot_refuses_mismatched_or_too_few_bins():
    with pytest.raises(ValueError, match="4 logits for 5 bins"):
        dists.twohot_decode(jnp.zeros(4), dists.twohot_bins(5))
    with pytest.raises(ValueError, match="at least 2"):
        dists.twohot_bins(1)
