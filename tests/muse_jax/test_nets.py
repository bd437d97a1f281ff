"""Building blocks: block-diagonal linear/GRU, pixel-shuffle decoder, CNN encoder shapes."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from muse_jax import nets


def test_block_linear_is_block_diagonal():
    layer = nets.BlockLinear(8, 12, 4, nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(0), (3, 8))
    y = layer(x)
    chex.assert_shape(y, (3, 12))
    x2 = x.at[:, :2].add(1.0)  # perturb block 0 only
    changed = jnp.abs(layer(x2) - y).max(0) > 1e-6
    np.testing.assert_array_equal(changed, [True] * 3 + [False] * 9)


def test_block_gru_shapes_and_range():
    gru = nets.BlockGRU(16, 8, 12, 3, 4, nnx.Rngs(0))
    h = jax.jit(lambda *a: gru(*a))(jnp.zeros((5, 16)), jnp.ones((5, 12)), jnp.full((5, 3), 7.0))
    chex.assert_shape(h, (5, 16))
    assert float(jnp.abs(h).max()) <= 1.0  # convex mix of tanh candidates and the zero state


def test_depth_to_space_matches_manual():
    x = jnp.arange(2 * 3 * 3 * 8, dtype=jnp.float32).reshape(2, 3, 3, 8)
    y = nets.depth_to_space(x, 2)
    chex.assert_shape(y, (2, 6, 6, 2))
    np.testing.assert_array_equal(y[1, 2 * 1 + 1, 2 * 2 + 0], x[1, 1, 2].reshape(2, 2, 2)[1, 0])


@pytest.mark.parametrize("size", [32, 64])
def test_encoder_decoder_shapes(size):
    enc = nets.ConvEncoder(4, 4, size, nnx.Rngs(0))
    e = jax.jit(lambda x: enc(x))(jnp.zeros((2, size, size, 4)))
    chex.assert_shape(e, (2, enc.out_dim))
    assert enc.out_dim == nets.stage_channels(4, size)[-1] * 16
    dec = nets.ConvDecoder(20, 3, 4, size, nnx.Rngs(0))
    img = jax.jit(lambda f: dec(f))(jnp.ones((2, 20)))
    chex.assert_shape(img, (2, size, size, 3))
    assert float(img.min()) >= 0 and float(img.max()) <= 1


def test_stage_channels_rejects_odd_sizes():
    assert nets.stage_channels(4, 64) == (8, 12, 16, 16)
    with pytest.raises(ValueError, match="image_size"):
        nets.stage_channels(4, 48)


def test_mlp_zero_output_init():
    mlp = nets.MLP(5, 8, 2, 7, nnx.Rngs(0), out_scale=0.0)
    np.testing.assert_array_equal(mlp(jnp.ones((3, 5))), 0.0)


def _literal_block_gru(gru, h, z, a):
    """DreamerV3's block GRU written out: broadcast inputs next to each block of h, batched einsums."""
    g, d = gru.blocks, gru.deter
    act = a / jnp.maximum(1.0, jnp.abs(a))
    n0, n1, n2 = gru.in_norms
    x = jnp.concatenate([n0(gru.in_deter(h)), n1(gru.in_stoch(z)), n2(gru.in_action(act))], -1)
    x = jnp.broadcast_to(x[:, None, :], (h.shape[0], g, x.shape[-1]))
    x = jnp.concatenate([h.reshape(h.shape[0], g, d // g), x], -1)

    def block(layer, v):
        y = jnp.einsum("ngi,gio->ngo", v.reshape(v.shape[0], g, -1), layer.kernel.get_value())
        return y.reshape(v.shape[0], -1) + layer.bias.get_value()

    x = block(gru.gates, gru.hid_norm(block(gru.hid, x))).reshape(h.shape[0], g, -1)
    reset, cand, update = [y.reshape(h.shape[0], d) for y in jnp.split(x, 3, -1)]
    reset = jax.nn.sigmoid(reset)
    update = jax.nn.sigmoid(update - 1.0)
    return update * jnp.tanh(reset * cand) + (1.0 - update) * h


@pytest.mark.parametrize("rows", [1, 32])
def test_block_gru_computes_dreamerv3s_literal_formula(rows):
    gru = nets.BlockGRU(32, 8, 12, 3, 4, nnx.Rngs(0))
    gru.hid.bias.set_value(jax.random.normal(jax.random.key(5), (32,)))
    gru.gates.bias.set_value(jax.random.normal(jax.random.key(6), (96,)))
    k = jax.random.split(jax.random.key(0), 3)
    h, z, a = (jax.random.normal(k[0], (rows, 32)), jax.random.normal(k[1], (rows, 12)),
               3 * jax.random.normal(k[2], (rows, 3)))
    np.testing.assert_allclose(jax.jit(lambda *x: gru(*x))(h, z, a), _literal_block_gru(gru, h, z, a),
                               rtol=1e-5, atol=1e-5)
