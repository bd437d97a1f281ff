"""Network building blocks (Flax NNX): norm+SiLU MLPs, block-linear GRU core, CNN encoder/decoder.

Layers keep float32 parameters and compute in `dtype` (float32 or bfloat16). The image decoder
upsamples with convolution + depth-to-space (pixel shuffle) instead of ConvTranspose: the same
output size, fast on GPU and much faster than transposed convolutions in XLA's CPU backward pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

Dtype = jnp.dtype | type


def trunc_normal_in(scale: float = 1.0):
    """DreamerV3's default weight init (`winit: trunc_normal_in`): truncated normal in [-2, 2] std, with
    std = 1.1368 * sqrt(1 / fan_in) * scale, where 1.1368 undoes the truncation's shrinkage.

    `scale` multiplies the weights (dreamerv3 `outscale`, e.g. 0.01 for the policy output). Fan-in
    counts the receptive field: kh*kw*in for convolutions, blocks*(in/blocks) = in for block-linear
    kernels [G, in/G, out/G], as dreamerv3's `compute_fans` does. The normal is drawn as a flat vector
    and reshaped: XLA's CPU compiler takes ~10-30 s for random numbers of some 3-D/4-D shapes.
    """

    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        fan_in = shape[-2] * math.prod(shape[:-2]) if len(shape) >= 2 else 1
        std = 1.1368 * math.sqrt(1.0 / fan_in) * scale
        flat = jax.random.truncated_normal(key, -2.0, 2.0, (math.prod(shape),), jnp.float32)
        return (flat * std).reshape(tuple(shape)).astype(dtype)

    return init


def linear(din: int, dout: int, rngs: nnx.Rngs, dtype: Dtype, bias: bool = True, scale: float = 1.0) -> nnx.Linear:
    """A dense layer with dreamerv3's init: fan-in truncated normal times `scale` (0: all zeros)."""
    init = trunc_normal_in(scale) if scale > 0 else nnx.initializers.zeros_init()
    return nnx.Linear(din, dout, use_bias=bias, kernel_init=init, dtype=dtype, param_dtype=jnp.float32,
                      rngs=rngs)


class NormAct(nnx.Module):
    """RMSNorm followed by SiLU, the DreamerV3 hidden-layer nonlinearity."""

    def __init__(self, dim: int, rngs: nnx.Rngs, dtype: Dtype = jnp.float32):
        self.norm = nnx.RMSNorm(dim, epsilon=1e-4, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return jax.nn.silu(self.norm(x))


class MLP(nnx.Module):
    """`layers` x (Linear -> RMSNorm -> SiLU), then an optional linear output layer.

    `out_scale` multiplies the output layer's init (dreamerv3 `outscale`): 0 zero-initialises it, as
    DreamerV3 does for reward and critic heads so that their first predictions are exactly zero;
    0.01 for the policy. `hidden_bias` gives the hidden layers a zero-initialised bias, as dreamerv3
    3.3.1's `nets.Linear` has (`model.hidden_bias`); without it they have no offset, since RMSNorm
    has a scale but no shift, and each hidden layer's output is then invariant to a positive scaling
    of its input (RMSNorm divides it out): the encoder sees only the direction of the symlog
    observation. The MLP's own default is off; the config's `model.hidden_bias` is on by default (the
    official network; without it the reach-v3 curve lags, measured in docs/official_comparison.md).
    """

    def __init__(self, din: int, units: int, layers: int, dout: int | None, rngs: nnx.Rngs,
                 dtype: Dtype = jnp.float32, out_scale: float = 1.0, hidden_bias: bool = False):
        dims = [din] + [units] * layers
        pairs = list(zip(dims[:-1], dims[1:], strict=True))
        self.hidden = nnx.List([linear(a, b, rngs, dtype, bias=hidden_bias) for a, b in pairs])
        self.norms = nnx.List([NormAct(b, rngs, dtype) for b in dims[1:]])
        self.out = linear(dims[-1], dout, rngs, dtype, scale=out_scale) if dout is not None else None
        self.dtype = dtype
        self.out_dim = dout if dout is not None else dims[-1]

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.astype(self.dtype)
        for lin, norm in zip(self.hidden, self.norms, strict=True):
            x = norm(lin(x))
        if self.out is not None:
            x = self.out(x)
        return x

    def first_layer_share(self, x_part: jax.Array, rows: slice, bias: bool) -> jax.Array:
        """The first layer's pre-activation share of one slice of the input features: x_part @ W[rows]
        (+ the bias if `bias`). Splitting the first layer, W x = W[a] x[a] + W[b] x[b], lets a caller
        compute the share of inputs it knows in advance outside a loop (`RSSM.observe`)."""
        lin = self.hidden[0]
        y = x_part.astype(self.dtype) @ lin.kernel.get_value()[rows].astype(self.dtype)
        if bias and lin.bias is not None:
            y = y + lin.bias.get_value().astype(self.dtype)
        return y

    def from_first_layer(self, pre: jax.Array) -> jax.Array:
        """The MLP's output given its first layer's pre-activation (the sum of `first_layer_share`s)."""
        x = self.norms[0](pre)
        for lin, norm in zip(self.hidden[1:], self.norms[1:], strict=True):
            x = norm(lin(x))
        if self.out is not None:
            x = self.out(x)
        return x


def block_matmul(x_NxGI: jax.Array, kernel_GxIxO: jax.Array) -> jax.Array:
    """Block-diagonal product: block g of the input `[..., G*I]` times `kernel[g]` `[I, O]` -> `[..., G*O]`.

    On XLA's CPU backend a batched `dot_general` whose batch axis sits between the rows and the
    features (`...gi,gio->...go`) is lowered with transposes around a slow loop, and the transposed
    result defeats the fusion of what follows; G plain matmuls on column slices, concatenated, are
    the same sums and several times faster there (1024 rows: 6 vs 21 ms for the size1m GRU). Below
    16 rows (acting, and the per-env regulation strategies, which see one row under vmap) the G
    extra small ops cost more than they save, so those keep the one batched einsum, as do other
    backends.
    """
    g, i, _ = kernel_GxIxO.shape
    rows = math.prod(x_NxGI.shape[:-1])
    if jax.default_backend() == "cpu" and rows >= 16:
        return jnp.concatenate([x_NxGI[..., j * i:(j + 1) * i] @ kernel_GxIxO[j] for j in range(g)], -1)
    y = jnp.einsum("...gi,gio->...go", x_NxGI.reshape(*x_NxGI.shape[:-1], g, i), kernel_GxIxO)
    return y.reshape(*y.shape[:-2], -1)


class BlockLinear(nnx.Module):
    """Block-diagonal linear map: `blocks` independent (din/blocks -> dout/blocks) matrices."""

    def __init__(self, din: int, dout: int, blocks: int, rngs: nnx.Rngs, dtype: Dtype = jnp.float32):
        if din % blocks or dout % blocks:
            raise ValueError(f"BlockLinear: din={din} and dout={dout} must be divisible by blocks={blocks}.")
        shape = (blocks, din // blocks, dout // blocks)
        self.kernel = nnx.Param(trunc_normal_in()(rngs.params(), shape, jnp.float32))
        self.bias = nnx.Param(jnp.zeros((dout,), jnp.float32))
        self.blocks = blocks
        self.dtype = dtype

    def __call__(self, x_BxD: jax.Array) -> jax.Array:
        y = block_matmul(x_BxD.astype(self.dtype), self.kernel.get_value().astype(self.dtype))
        return y + self.bias.get_value().astype(self.dtype)


class BlockGRU(nnx.Module):
    """DreamerV3's block-diagonal GRU core: h' = GRU(h, [z, a]) with `blocks` independent groups.

    Inputs are embedded (Linear+norm+SiLU each), broadcast to every block next to that block's slice
    of h, passed through one block-linear hidden layer, then a block-linear gate layer.

    Computed without materialising the broadcast: block g's hidden pre-activation is
    [h_g, x] @ W_g = h_g @ W_g[:D/G] + x @ W_g[D/G:], so the shared-input rows of all blocks form one
    dense [3*hidden, D] matrix and one matmul, and only the h rows stay block-diagonal. The
    parameters are DreamerV3's ([G, D/G + 3*hidden, D/G] and [G, D/G, 3*D/G]); only the order of
    the sums changes (float32 differences ~1e-7). The gate bias is split per gate before it is
    added: one fused add of the whole [3D] bias followed by the per-block split compiles to slow
    scalar code on XLA's CPU backend. `input_bias` gives the three input embeddings a bias, as dreamerv3
    3.3.1's `dynin*` layers have (`model.hidden_bias`). Without it the action embedding, like every
    bias-free layer before RMSNorm, is blind to the action's size: a and a/4 give the same next state
    (within ~2e-3), so the world model sees only an action's direction.
    """

    def __init__(self, deter: int, hidden: int, stoch_flat: int, act_dim: int, blocks: int,
                 rngs: nnx.Rngs, dtype: Dtype = jnp.float32, input_bias: bool = False):
        self.in_deter = linear(deter, hidden, rngs, dtype, bias=input_bias)
        self.in_stoch = linear(stoch_flat, hidden, rngs, dtype, bias=input_bias)
        self.in_action = linear(act_dim, hidden, rngs, dtype, bias=input_bias)
        self.in_norms = nnx.List([NormAct(hidden, rngs, dtype) for _ in range(3)])
        g = blocks
        self.hid = BlockLinear(deter + g * 3 * hidden, deter, g, rngs, dtype)
        self.hid_norm = NormAct(deter, rngs, dtype)  # note: normalises across blocks, like DreamerV3
        self.gates = BlockLinear(deter, 3 * deter, g, rngs, dtype)
        self.blocks, self.deter, self.dtype = g, deter, dtype

    def __call__(self, deter_BxD: jax.Array, stoch_BxSK: jax.Array, action_BxA: jax.Array) -> jax.Array:
        return self.step(deter_BxD, stoch_BxSK, self.embed_action(action_BxA))

    def embed_action(self, action_BxA: jax.Array) -> jax.Array:
        """The action's input embedding [..., hidden] (scaled to at most 1 in size, Linear, norm, SiLU).

        Apart from `step` because it does not depend on the recurrent state: `RSSM.observe` embeds all
        T replayed actions in one op before its scan instead of one small chain per step.
        """
        action = action_BxA / jax.lax.stop_gradient(jnp.maximum(1.0, jnp.abs(action_BxA)))
        return self.in_norms[2](self.in_action(action))

    def step(self, deter_BxD: jax.Array, stoch_BxSK: jax.Array, action_embed_BxH: jax.Array) -> jax.Array:
        """h' from h, z and the action's embedding (`embed_action`)."""
        g, d, dt = self.blocks, self.deter, self.dtype
        k = d // g
        n0, n1, _ = self.in_norms
        x = jnp.concatenate([n0(self.in_deter(deter_BxD)), n1(self.in_stoch(stoch_BxSK)),
                             action_embed_BxH.astype(dt)], -1)
        lead = deter_BxD.shape[:-1]
        w_hid = self.hid.kernel.get_value().astype(dt)  # [G, D/G + 3*hidden, D/G]
        w_shared = jnp.swapaxes(w_hid[:, k:], 0, 1).reshape(x.shape[-1], d)  # [3*hidden, G*D/G]
        y = block_matmul(deter_BxD.astype(dt), w_hid[:, :k]) + x.astype(dt) @ w_shared
        y = self.hid_norm(y + self.hid.bias.get_value().astype(dt))
        y = block_matmul(y, self.gates.kernel.get_value().astype(dt))  # per block [reset, cand, update]
        per_gate = lambda v: jnp.split(v.reshape(*v.shape[:-1], g, 3 * k), 3, -1)
        bias = per_gate(self.gates.bias.get_value().astype(dt))
        reset, cand, update = [(v.reshape(*lead, d) + b.reshape(d)).astype(jnp.float32)
                               for v, b in zip(per_gate(y), bias, strict=True)]
        reset = jax.nn.sigmoid(reset)
        cand = jnp.tanh(reset * cand)
        update = jax.nn.sigmoid(update - 1.0)
        return update * cand + (1.0 - update) * deter_BxD.astype(jnp.float32)


def stage_channels(depth: int, image_size: int, min_res: int = 4) -> tuple[int, ...]:
    """Channels per stride-2 stage down to `min_res`: depth*(2,3,4,4) for 64x64, fewer for 32x32."""
    stages = int(round(math.log2(image_size // min_res)))
    if image_size != min_res * 2**stages or stages < 1:
        raise ValueError(f"image_size={image_size} must be {min_res} times a power of two (e.g. 32, 64).")
    mults = (2, 3, 4, 4, 4, 4, 4, 4)[:stages]
    return tuple(depth * m for m in mults)


class ConvEncoder(nnx.Module):
    """Stride-2 4x4 convolutions (each followed by RMSNorm+SiLU) down to 4x4, then flatten."""

    def __init__(self, in_channels: int, depth: int, image_size: int, rngs: nnx.Rngs, dtype: Dtype = jnp.float32):
        chans = stage_channels(depth, image_size)
        dims = (in_channels, *chans)
        conv = lambda a, b: nnx.Conv(a, b, (4, 4), strides=(2, 2), padding="SAME", use_bias=False, dtype=dtype,
                                     param_dtype=jnp.float32, kernel_init=trunc_normal_in(), rngs=rngs)
        layers = [conv(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True)]
        norms = [NormAct(b, rngs, dtype) for b in chans]
        self.convs = nnx.List(layers)
        self.norms = nnx.List(norms)
        self.out_dim = chans[-1] * 4 * 4
        self.dtype = dtype

    def __call__(self, x_NxHxWxC: jax.Array) -> jax.Array:
        x = x_NxHxWxC.astype(self.dtype)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = norm(conv(x))
        return x.reshape(x.shape[0], -1)


def depth_to_space(x_NxHxWxC: jax.Array, r: int = 2) -> jax.Array:
    """Pixel shuffle: [N,H,W,C*r*r] -> [N,H*r,W*r,C]."""
    n, h, w, c = x_NxHxWxC.shape
    x = x_NxHxWxC.reshape(n, h, w, r, r, c // (r * r))
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(n, h * r, w * r, c // (r * r))


class ConvDecoder(nnx.Module):
    """Mirror of ConvEncoder: linear to 4x4xC, then per stage 3x3 conv to 4C' channels + pixel shuffle.

    The output is a sigmoid image in [0, 1], trained with a summed per-pixel squared error.
    """

    def __init__(self, feat_dim: int, out_channels: int, depth: int, image_size: int, rngs: nnx.Rngs,
                 dtype: Dtype = jnp.float32):
        chans = stage_channels(depth, image_size)[::-1]  # e.g. 4d,4d,3d,2d
        self.start = linear(feat_dim, 16 * chans[0], rngs, dtype)
        self.start_norm = NormAct(chans[0], rngs, dtype)
        outs = (*chans[1:], out_channels)
        conv = lambda a, b: nnx.Conv(a, 4 * b, (3, 3), padding="SAME", dtype=dtype, param_dtype=jnp.float32,
                                     kernel_init=trunc_normal_in(), rngs=rngs)
        convs = [conv(a, b) for a, b in zip(chans, outs, strict=True)]
        norms = [NormAct(b, rngs, dtype) for b in outs[:-1]]
        self.convs = nnx.List(convs)
        self.norms = nnx.List(norms)
        self.c0 = chans[0]

    def __call__(self, feat_NxF: jax.Array) -> jax.Array:
        x = self.start(feat_NxF).reshape(feat_NxF.shape[0], 4, 4, self.c0)
        x = self.start_norm(x)
        for i, conv in enumerate(self.convs):
            x = depth_to_space(conv(x), 2)
            if i < len(self.norms):
                x = self.norms[i](x)
        return jax.nn.sigmoid(x.astype(jnp.float32))


def feature(deter: jax.Array, stoch: jax.Array) -> jax.Array:
    """Model state s = concat(h, flatten(z)) for heads, actor and critic."""
    return jnp.concatenate([deter, stoch.reshape(*stoch.shape[:-2], -1)], -1)
