"""Recurrent state-space model (DreamerV3): block-GRU h and categorical z, observe and imagine.

State s = (h, z): `deter` [B, D] float32 and `stoch` [B, S, K] one-hot (straight-through).
`observe` filters a sequence with the posterior q(z|h,x) under `lax.scan`, resetting the state where
`is_first`; the prior p(z|h) for the KL is computed once on all B*T states after the scan, so the
scan body holds only the GRU and the posterior. `imagine` rolls the prior forward with a policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from muse_jax import dists
from muse_jax.nets import MLP, BlockGRU, Dtype

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

    def post_logits(self, deter_BxD: jax.Array, embed_BxE: jax.Array) -> jax.Array:
        """Posterior q(z | h, e) log-probabilities [..., S, K] (unimixed)."""
        return self._logits(self.post_net(jnp.concatenate([deter_BxD, embed_BxE.astype(deter_BxD.dtype)], -1)))

    def img_step(self, state: State, action_BxA: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        """One prior step: (state, a) -> (next state, prior logits)."""
        deter = self.core(state["deter"], state["stoch"].reshape(state["stoch"].shape[0], -1), action_BxA)
        logits = self.prior_logits(deter)
        stoch = dists.categorical_sample_st(key, logits)
        return dict(deter=deter, stoch=stoch), logits

    def obs_step(self, state: State, prev_action_BxA: jax.Array, embed_BxE: jax.Array, is_first_B: jax.Array,
                 key: jax.Array) -> tuple[State, jax.Array]:
        """One posterior step, resetting state and previous action where `is_first`."""
        keep = (1.0 - is_first_B.astype(jnp.float32))
        deter = state["deter"] * keep[:, None]
        stoch = state["stoch"] * keep[:, None, None]
        action = prev_action_BxA * keep[:, None]
        deter = self.core(deter, stoch.reshape(stoch.shape[0], -1), action)
        logits = self.post_logits(deter, embed_BxE)
        stoch = dists.categorical_sample_st(key, logits)
        return dict(deter=deter, stoch=stoch), logits

    # --------------------------------------------------------------------- sequences

    def observe(self, state: State, action_BxTxA: jax.Array, embed_BxTxE: jax.Array, is_first_BxT: jax.Array,
                key: jax.Array, unroll: int = 1) -> tuple[State, dict[str, jax.Array]]:
        """Posterior filtering over T with lax.scan (`unroll` steps per loop iteration: the same sums,
        fewer loop round trips; `model.observe_unroll`).

        Returns the last state and `deter` [B,T,D], `stoch` [B,T,S,K], `post` and `prior` logits
        [B,T,S,K] (prior computed once over all B*T steps after the scan).
        """
        T = action_BxTxA.shape[1]
        keys = jax.random.split(key, T)
        swap = lambda x: jnp.swapaxes(x, 0, 1)

        def step(carry: State, inp: tuple[Any, ...]) -> tuple[State, tuple[jax.Array, ...]]:
            a, e, f, k = inp
            carry, logits = self.obs_step(carry, a, e, f, k)
            return carry, (carry["deter"], carry["stoch"], logits)

        last, (deter, stoch, post) = jax.lax.scan(
            step, state, (swap(action_BxTxA), swap(embed_BxTxE), swap(is_first_BxT), keys), unroll=min(unroll, T))
        deter, stoch, post = swap(deter), swap(stoch), swap(post)
        prior = self.prior_logits(deter)
        return last, dict(deter=deter, stoch=stoch, post=post, prior=prior)

    def imagine(self, state: State, policy: Callable[[State, jax.Array], jax.Array], horizon: int,
                key: jax.Array, unroll: int = 1) -> tuple[dict[str, jax.Array], jax.Array]:
        """Prior rollout: a_t = policy(s_t, key); s_{t+1} ~ p(.|f(s_t, a_t)), `unroll` steps per loop
        iteration (`behavior.imag_unroll`).

        Returns the trajectory including the start, `deter` [B,H+1,D], `stoch` [B,H+1,S,K], and
        the actions taken at every state [B,H+1,A] (the last one is sampled but not executed).
        """
        keys = jax.random.split(key, horizon + 1)

        def step(carry: State, k: jax.Array) -> tuple[State, tuple[jax.Array, ...]]:
            ka, kz = jax.random.split(k)
            a = policy(carry, ka)
            nxt, _ = self.img_step(carry, a, kz)
            return nxt, (carry["deter"], carry["stoch"], a)

        last, (deter, stoch, act) = jax.lax.scan(step, state, keys[:-1], unroll=min(unroll, horizon))
        a_last = policy(last, keys[-1])
        cat = lambda xs, x: jnp.concatenate([jnp.swapaxes(xs, 0, 1), x[:, None]], 1)
        traj = dict(deter=cat(deter, last["deter"]), stoch=cat(stoch, last["stoch"]))
        return traj, cat(act, a_last)
