"""Recurrent state-space model (DreamerV3): block-GRU h and categorical z, observe and imagine.

State s = (h, z): `deter` [B, D] float32 and `stoch` [B, S, K] one-hot (straight-through).
`observe` filters a sequence with the posterior q(z|h,x) under `lax.scan`, resetting the state where
`is_first`. Whatever does not depend on the carried state is computed for all T steps outside the
loop, where it is a few large ops instead of T chains of small ones: the prior p(z|h) for the KL
(after the scan, on all B*T states), and before it the action embeddings, the observation
embedding's share of the posterior's first layer and the sampling uniforms. The scan body holds only
the GRU and the rest of the posterior, the sequential chain a step must wait for. `imagine` rolls the
prior forward with a policy, its key splits, sampling uniforms and the policy's noise drawn before the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from muse_jax import dists
from muse_jax.nets import MLP, BlockGRU, Dtype
from muse_jax.scan_grads import scan_with_param_grads_after

State = dict[str, jax.Array]


class RSSM(nnx.Module):
    """h_t = f(h_{t-1}, z_{t-1}, a_{t-1});  z_t ~ q(z | h_t, e_t) (observe) or p(z | h_t) (imagine)."""

    def __init__(self, deter: int, hidden: int, stoch: int, classes: int, blocks: int, act_dim: int,
                 embed_dim: int, unimix: float, rngs: nnx.Rngs, dtype: Dtype = jnp.float32,
                 hidden_bias: bool = False):
        self.core = BlockGRU(deter, hidden, stoch * classes, act_dim, blocks, rngs, dtype, input_bias=hidden_bias)
        self.prior_net = MLP(deter, hidden, 2, stoch * classes, rngs, dtype, hidden_bias=hidden_bias)
        self.post_net = MLP(deter + embed_dim, hidden, 1, stoch * classes, rngs, dtype, hidden_bias=hidden_bias)
        self.deter, self.stoch, self.classes, self.unimix = deter, stoch, classes, unimix
        self.act_dim = act_dim

    # --------------------------------------------------------------------- single steps

    def initial(self, batch: int) -> State:
        """Zero state (DreamerV3's default `initial: zeros`)."""
        return dict(deter=jnp.zeros((batch, self.deter), jnp.float32),
                    stoch=jnp.zeros((batch, self.stoch, self.classes), jnp.float32))

    def _logits(self, x: jax.Array) -> jax.Array:
        x = x.astype(jnp.float32).reshape(*x.shape[:-1], self.stoch, self.classes)
        return dists.unimix_logits(x, self.unimix)

    def prior_logits(self, deter_BxD: jax.Array) -> jax.Array:
        """Prior p(z | h) log-probabilities [..., S, K] (unimixed)."""
        return self._logits(self.prior_net(deter_BxD))

    def img_step(self, state: State, action_BxA: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        """One prior step: (state, a) -> (next state, prior logits)."""
        u = dists.categorical_uniform(key, (action_BxA.shape[0], self.stoch))
        return self._img_step(state, action_BxA, u)

    def _img_step(self, state: State, action_BxA: jax.Array, u_BxSx1: jax.Array) -> tuple[State, jax.Array]:
        """`img_step` given its sampling uniforms (`dists.categorical_uniform`)."""
        deter = self.core(state["deter"], state["stoch"].reshape(state["stoch"].shape[0], -1), action_BxA)
        logits = self.prior_logits(deter)
        stoch = dists.categorical_sample_st_from_uniform(u_BxSx1, logits)
        return dict(deter=deter, stoch=stoch), logits

    def obs_step(self, state: State, prev_action_BxA: jax.Array, embed_BxE: jax.Array, is_first_B: jax.Array,
                 key: jax.Array) -> tuple[State, jax.Array]:
        """One posterior step, resetting state and previous action where `is_first`: (next state, posterior
        logits). The step `observe` scans, its inputs prepared for one step."""
        keep_B = 1.0 - is_first_B.astype(jnp.float32)
        act_BxH, embed_BxH = self._obs_inputs(prev_action_BxA, embed_BxE, keep_B)
        u = dists.categorical_uniform(key, (keep_B.shape[0], self.stoch))
        return self._obs_step(state, act_BxH, embed_BxH, keep_B, u)

    def _obs_inputs(self, action_xA: jax.Array, embed_xE: jax.Array, keep_x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """What a posterior step needs that does not depend on the carried state (any leading shape): the
        (reset-masked) action's embedding and the observation embedding's share of the posterior's first
        layer (W [h; e] = W[h] h + W[e] e). `observe` computes them for all T steps before its loop."""
        act = self.core.embed_action(action_xA * keep_x[..., None])
        return act, self.post_net.first_layer_share(embed_xE, slice(self.deter, None), bias=True)

    def _obs_step(self, state: State, act_BxH: jax.Array, embed_BxH: jax.Array, keep_B: jax.Array,
                  u_BxSx1: jax.Array) -> tuple[State, jax.Array]:
        """The sequential part of a posterior step: reset, GRU, the rest of q(z | h, e), sample."""
        deter = state["deter"] * keep_B[:, None]
        stoch = (state["stoch"] * keep_B[:, None, None]).reshape(keep_B.shape[0], -1)
        deter = self.core.step(deter, stoch, act_BxH)
        pre = self.post_net.first_layer_share(deter, slice(0, self.deter), bias=False) + embed_BxH
        logits = self._logits(self.post_net.from_first_layer(pre))
        return dict(deter=deter, stoch=dists.categorical_sample_st_from_uniform(u_BxSx1, logits)), logits

    # --------------------------------------------------------------------- sequences

    def observe(self, state: State, action_BxTxA: jax.Array, embed_BxTxE: jax.Array, is_first_BxT: jax.Array,
                key: jax.Array, unroll: int = 1, remat: str = "none", param_grads_after: bool = False,
                ) -> tuple[State, dict[str, jax.Array]]:
        """Posterior filtering over T with lax.scan (`unroll` steps per loop iteration: the same sums,
        fewer loop round trips; `model.observe_unroll`). `remat` ("none", "dots", "nothing";
        `model.observe_remat`) is what the backward pass finds stored per step rather than recomputes.
        `param_grads_after` (`model.observe_param_grads`) takes the parameters' gradient after the backward
        loop instead of step by step inside it (`scan_with_param_grads_after`): the same numbers, fewer
        kernels per step on a GPU.

        Returns the last state and `deter` [B,T,D], `stoch` [B,T,S,K], `post` and `prior` logits
        [B,T,S,K] (prior computed once over all B*T steps after the scan).
        """
        B, T = action_BxTxA.shape[:2]
        swap = lambda x: jnp.swapaxes(x, 0, 1)
        # Computed for all T before the loop, as `obs_step` computes them for one step (the same keys, hence
        # the same uniforms).
        keep_TxB = 1.0 - swap(is_first_BxT).astype(jnp.float32)
        u_TxBxSx1 = jax.vmap(lambda k: dists.categorical_uniform(k, (B, self.stoch)))(jax.random.split(key, T))
        act_TxBxH, embed_TxBxH = self._obs_inputs(swap(action_BxTxA), swap(embed_BxTxE), keep_TxB)

        graphdef, params = nnx.split(self, nnx.Param)

        def step(p: Any, carry: State, inp: tuple[jax.Array, ...]) -> tuple[State, tuple[jax.Array, ...]]:
            carry, logits = nnx.merge(graphdef, p)._obs_step(carry, *inp)
            return carry, (carry["deter"], carry["stoch"], logits)

        policy = None if remat == "none" else {"dots": jax.checkpoint_policies.dots_saveable,
                                               "nothing": jax.checkpoint_policies.nothing_saveable}[remat]
        xs = (act_TxBxH, embed_TxBxH, keep_TxB, u_TxBxSx1)
        if param_grads_after:
            last, (deter, stoch, post) = scan_with_param_grads_after(step, params, state, xs, unroll=min(unroll, T),
                                                                      remat_policy=policy)
        else:
            body = lambda c, i: step(params, c, i)
            if policy is not None:
                body = jax.checkpoint(body, prevent_cse=False, policy=policy)  # in a scan, CSE is no concern
            last, (deter, stoch, post) = jax.lax.scan(body, state, xs, unroll=min(unroll, T))
        deter, stoch, post = swap(deter), swap(stoch), swap(post)
        prior = self.prior_logits(deter)
        return last, dict(deter=deter, stoch=stoch, post=post, prior=prior)

    def imagine(self, state: State, policy: Callable[[State, Any], jax.Array], horizon: int,
                key: jax.Array, unroll: int = 1, draw: Callable[[jax.Array], Any] | None = None,
                ) -> tuple[dict[str, jax.Array], jax.Array]:
        """Prior rollout: a_t = policy(s_t, draw(key_t)); s_{t+1} ~ p(.|f(s_t, a_t)), `unroll` steps per
        loop iteration (`behavior.imag_unroll`).

        `draw` turns a step's policy key into the policy's randomness (e.g. its normal noise); all steps'
        draws are made before the loop, in one batched draw, so that the loop carries only the chain.
        Without it the policy receives the key itself (the same bits either way).

        Returns the trajectory including the start, `deter` [B,H+1,D], `stoch` [B,H+1,S,K], and
        the actions taken at every state [B,H+1,A] (the last one is sampled but not executed).
        """
        draw = draw if draw is not None else (lambda k: k)
        keys = jax.random.split(key, horizon + 1)
        n = state["deter"].shape[0]
        # Drawn before the loop, the same bits per step as drawing them inside it.
        split_Hx2 = jax.vmap(jax.random.split)(keys[:-1])
        u_HxNxSx1 = jax.vmap(lambda k: dists.categorical_uniform(k, (n, self.stoch)))(split_Hx2[:, 1])
        noise_H = jax.vmap(draw)(split_Hx2[:, 0])

        def step(carry: State, inp: tuple[Any, jax.Array]) -> tuple[State, tuple[jax.Array, ...]]:
            noise, u = inp
            a = policy(carry, noise)
            nxt, _ = self._img_step(carry, a, u)
            return nxt, (carry["deter"], carry["stoch"], a)

        last, (deter, stoch, act) = jax.lax.scan(step, state, (noise_H, u_HxNxSx1),
                                                 unroll=min(unroll, horizon))
        a_last = policy(last, draw(keys[-1]))
        cat = lambda xs, x: jnp.concatenate([jnp.swapaxes(xs, 0, 1), x[:, None]], 1)
        traj = dict(deter=cat(deter, last["deter"]), stoch=cat(stoch, last["stoch"]))
        return traj, cat(act, a_last)
