"""(a) Sampled imagined rollouts scored by predicted competence; act with the best one's first action.

From the current state, `num_rollouts` prior rollouts of horizon H follow the actor. Each is scored
by its mean competence over the imagined steps 1..H (less noisy than the final step alone), and
the first action of the best rollout is executed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from muse_jax.competence import competence
from muse_jax.config import Config
from muse_jax.nets import feature


def regulate_one(agent, h_D: jax.Array, z_SxK: jax.Array, key: jax.Array, cfg: Config,
                 ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """One environment: actions [A] and per-rollout scores [R]."""
    r = cfg.regulation
    R = r.num_rollouts
    start = dict(deter=jnp.broadcast_to(h_D, (R, *h_D.shape)).astype(jnp.float32),
                 stoch=jnp.broadcast_to(z_SxK, (R, *z_SxK.shape)).astype(jnp.float32))
    # the actor's noise for every step drawn before the loop (the same bits as `actor.sample` per step)
    policy = lambda s, eps: agent.actor.sample_from_noise(feature(s["deter"], s["stoch"]), eps)
    traj, act_RxH1xA = agent.wm.rssm.imagine(start, policy, r.horizon, key,
                                             draw=lambda k: agent.actor.noise(k, (R,)))
    comp_RxH1 = competence(agent.wm.competence_probs(feature(traj["deter"], traj["stoch"])))
    scores_R = comp_RxH1[:, 1:].mean(-1)
    best = jnp.argmax(scores_R)
    return act_RxH1xA[best, 0], {"scores": scores_R, "competence_final": scores_R[best]}


def regulate(agent, h_BxD: jax.Array, z_BxSxK: jax.Array, key: jax.Array, cfg: Config,
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Batched over environments with vmap: actions [B, A], scores [B, R]."""
    keys = jax.random.split(key, h_BxD.shape[0])
    return jax.vmap(lambda h, z, k: regulate_one(agent, h, z, k, cfg))(h_BxD, z_BxSxK, keys)
