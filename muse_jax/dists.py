"""Distributions and transforms of DreamerV3, as pure functions on arrays.

Everything here is stateless so it can be tested against hand computations and reused by the
world model, the actor-critic and self-regulation without carrying distribution objects around.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

sg = jax.lax.stop_gradient


def symlog(x: jax.Array) -> jax.Array:
    """sign(x) * log(1 + |x|): compresses large magnitudes so one loss scale fits all tasks."""
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x: jax.Array) -> jax.Array:
    """Inverse of symlog."""
    return jnp.sign(x) * jnp.expm1(jnp.abs(x))


# ----------------------------------------------------------------------------- two-hot


def twohot_bins(n: int, low: float = -20.0, high: float = 20.0) -> jax.Array:
    """Bin centres, evenly spaced in symlog space (DreamerV3 uses symexp(linspace(-20, 20, 255))).

    For low = -high the bins are built exactly antisymmetric (odd n: with a 0 bin in the middle; even
    n: without one), so that a uniform distribution (a zero-initialised head) decodes to exactly 0
    despite the ~1e8 outer bins.
    """
    if n < 2:
        raise ValueError(f"twohot_bins: n={n} bins; two-hot needs at least 2 (model.bins, odd >= 3).")
    if n % 2 == 1 and low == -high:
        half = symexp(jnp.linspace(0.0, high, (n + 1) // 2, dtype=jnp.float32))
        return jnp.concatenate([-half[:0:-1], half])
    if low == -high:
        half = symexp(jnp.linspace(low, high, n, dtype=jnp.float32))[n // 2:]
        return jnp.concatenate([-half[::-1], half])
    return symexp(jnp.linspace(low, high, n, dtype=jnp.float32))


def twohot_encode(x: jax.Array, bins: jax.Array) -> jax.Array:
    """Two-hot vector [..., n] whose expectation over `bins` equals x (clipped to the bin range).

    The bin is found by comparing x with every bin (as dreamerv3 does): one fused compare-and-count,
    where a binary search is a while loop of log2(n) iterations, each a kernel launch on a GPU.
    """
    x = jnp.clip(x.astype(jnp.float32), bins[0], bins[-1])
    n = bins.shape[0]
    above = jnp.searchsorted(bins, x, side="right", method="compare_all")  # index of first bin > x
    above = jnp.clip(above, 1, n - 1)
    below = above - 1
    lo, hi = bins[below], bins[above]
    w_hi = jnp.clip((x - lo) / jnp.maximum(hi - lo, 1e-12), 0.0, 1.0)
    return jax.nn.one_hot(below, n) * (1.0 - w_hi)[..., None] + jax.nn.one_hot(above, n) * w_hi[..., None]


def twohot_decode(logits: jax.Array, bins: jax.Array) -> jax.Array:
    """Expected value under softmax(logits) over `bins`.

    Summed symmetrically from both ends (as DreamerV3 does) so a uniform distribution decodes to
    exactly zero despite the huge outer bins: the lower and upper halves are paired from the middle
    outwards, with the middle bin on its own for odd n (DreamerV3's layout) and no middle bin for even n.
    """
    n = bins.shape[0]
    if logits.shape[-1] != n:
        raise ValueError(f"twohot_decode: {logits.shape[-1]} logits for {n} bins; they must match.")
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    m = n // 2
    low = (probs[..., :m] * bins[:m])[..., ::-1]
    high = probs[..., n - m :] * bins[n - m :]
    middle = (probs[..., m : n - m] * bins[m : n - m]).sum(-1)  # empty (0) for even n
    return middle + (low + high).sum(-1)


def twohot_loss(logits: jax.Array, target: jax.Array, bins: jax.Array) -> jax.Array:
    """Cross-entropy of softmax(logits) against the two-hot encoding of target (no gradient to target)."""
    labels = twohot_encode(sg(target), bins)
    return -(labels * jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)).sum(-1)


# ----------------------------------------------------------------------------- categoricals


def unimix_logits(logits: jax.Array, unimix: float) -> jax.Array:
    """Log-probabilities of (1 - unimix) * softmax(logits) + unimix / K, which keeps KLs finite."""
    logits = logits.astype(jnp.float32)
    if unimix <= 0.0:
        return jax.nn.log_softmax(logits, axis=-1)
    probs = jax.nn.softmax(logits, axis=-1)
    probs = (1.0 - unimix) * probs + unimix / logits.shape[-1]
    return jnp.log(probs)


def categorical_sample_st(key: jax.Array, logits: jax.Array) -> jax.Array:
    """One-hot sample with straight-through gradients: forward one-hot, backward d probs.

    Sampled by inverse CDF (one uniform per categorical, no logs) rather than Gumbel-max: the same
    distribution with K times fewer random numbers, which matters in the imagination hot loop.
    """
    return categorical_sample_st_from_uniform(categorical_uniform(key, logits.shape[:-1], logits.dtype), logits)


def categorical_uniform(key: jax.Array, batch_shape: tuple[int, ...], dtype: jnp.dtype = jnp.float32) -> jax.Array:
    """The one uniform per categorical [*batch_shape, 1] that `categorical_sample_st` draws from `key`.

    Drawn apart from the sample so that a scan can draw all its steps' uniforms before the loop (one
    batched draw instead of one random-number loop per step; the same bits per key).
    """
    return jax.random.uniform(key, (*batch_shape, 1), dtype)


def categorical_sample_st_from_uniform(u: jax.Array, logits: jax.Array) -> jax.Array:
    """`categorical_sample_st` given its uniform `u` [..., 1] (from `categorical_uniform`)."""
    probs = jax.nn.softmax(logits, axis=-1)
    cdf = jnp.cumsum(sg(probs), axis=-1)
    idx = (cdf[..., :-1] < u).sum(-1)
    onehot = jax.nn.one_hot(idx, logits.shape[-1], dtype=jnp.float32)
    return onehot + probs - sg(probs)


def kl_categorical(logits_p: jax.Array, logits_q: jax.Array) -> jax.Array:
    """KL(p || q) per categorical, summed over the class axis: [..., S, K] -> [..., S]."""
    logp = jax.nn.log_softmax(logits_p, axis=-1)
    logq = jax.nn.log_softmax(logits_q, axis=-1)
    return (jnp.exp(logp) * (logp - logq)).sum(-1)


def kl_losses(post_logits: jax.Array, prior_logits: jax.Array, free_nats: float) -> tuple[jax.Array, ...]:
    """DreamerV3 dynamics and representation losses with free bits, over [..., S, K] logits.

    dyn = max(free, KL(sg(post) || prior)) trains the prior; rep = max(free, KL(post || sg(prior)))
    trains the encoder. Clipping with max makes the gradient exactly zero below `free_nats`.
    Returns (dyn [...], rep [...], kl [...]) where kl is the unclipped KL for logging.
    """
    dyn_kl = kl_categorical(sg(post_logits), prior_logits).sum(-1)
    rep_kl = kl_categorical(post_logits, sg(prior_logits)).sum(-1)
    dyn = jnp.maximum(dyn_kl, free_nats)
    rep = jnp.maximum(rep_kl, free_nats)
    return dyn, rep, sg(dyn_kl)


# ----------------------------------------------------------------------------- bernoulli


def bernoulli_logp(logits: jax.Array, target: jax.Array) -> jax.Array:
    """log p(target) of a Bernoulli with the given logits (numerically stable)."""
    logits = logits.astype(jnp.float32)
    return target * jax.nn.log_sigmoid(logits) + (1.0 - target) * jax.nn.log_sigmoid(-logits)


def binary_cross_entropy(logits: jax.Array, target: jax.Array) -> jax.Array:
    """-log p(target), elementwise."""
    return -bernoulli_logp(logits, target)


# ----------------------------------------------------------------------------- bounded normal

LOG_2PI = math.log(2.0 * math.pi)  # plain float: importing must not start an XLA backend (jax.distributed)


def bounded_normal(raw_BxA2: jax.Array, min_std: float, max_std: float) -> tuple[jax.Array, jax.Array]:
    """DreamerV3 continuous actions: mean = tanh(m), std = (max-min) * sigmoid(s + 2) + min."""
    raw = raw_BxA2.astype(jnp.float32)
    m, s = jnp.split(raw, 2, axis=-1)
    mean = jnp.tanh(m)
    std = (max_std - min_std) * jax.nn.sigmoid(s + 2.0) + min_std
    return mean, std


def normal_sample_from_noise(eps: jax.Array, mean: jax.Array, std: jax.Array) -> jax.Array:
    """Unclipped sample given its standard normal noise `eps`, as dreamerv3 draws it: imagination feeds it
    to the dynamics (which divide by max(1, |a|)) and the actor loss takes its log-probability; only the
    env receives it clipped. The noise is drawn apart (`Actor.noise`) so that a scan can draw all its
    steps' noise before the loop."""
    return mean + std * eps


def normal_logp(x: jax.Array, mean: jax.Array, std: jax.Array) -> jax.Array:
    """Log-density summed over the action axis."""
    z = (x - mean) / std
    return (-0.5 * z * z - jnp.log(std) - 0.5 * LOG_2PI).sum(-1)


def normal_entropy(std: jax.Array) -> jax.Array:
    """Differential entropy summed over the action axis."""
    return (jnp.log(std) + 0.5 * (1.0 + LOG_2PI)).sum(-1)
