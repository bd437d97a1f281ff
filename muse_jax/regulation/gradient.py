"""(c) MUSE Algorithm 1: gradient ascent on the model state s = (h, z) towards predicted success.

For H steps: a ~ pi(s); h <- f(s, a); s <- s + beta * grad_s sum_i psi_i(s). Then a_t ~ pi(s) and
h_{t+1} <- f(s, a_t). z is kept as the (relaxed, continuous) one-hot of the current state and moves
only through the gradient step, exactly as written in the algorithm.

Two readings of the last line, switched by `regulation.carry_regulated_state`:
- True (default, the paper): the ascended s is returned (info "deter"/"stoch") and `policy_step` puts
  it in the carry, so the next step's h_{t+1} = f(s, a_t) starts from the regulated state; the next
  observation then enters through the posterior q(z_{t+1} | h_{t+1}, x_{t+1}) as usual. Regulation
  therefore builds up over an episode, which is what lets the metacognitive policy pi_psi drift away
  from the pre-trained policy on a novel task.
- False (the earlier reading): s only picks a_t; the next step starts from the unregulated
  posterior, so the belief stays the model's filtering estimate and regulation never accumulates.
  Kept because it is the conservative choice (the model's belief is never moved off the data) and
  for ablations against the paper's version.
Algorithm 1 writes z_t ~ p(z_t | h_t); we start from the posterior z_t (which is p(z|h) once the
observation is in, eq. 1's encoder), since the agent does see x_t.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from muse_jax.competence import competence
from muse_jax.config import Config
from muse_jax.nets import feature


def _competence(agent, h_D: jax.Array, z_SxK: jax.Array) -> jax.Array:
    return competence(agent.wm.competence_probs(feature(h_D[None], z_SxK[None])))[0]


def regulate_one(agent, h_D: jax.Array, z_SxK: jax.Array, key: jax.Array, cfg: Config,
                 ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Algorithm 1 for one environment. Returns a_t [A] and the competence before/after each ascent step."""
    r = cfg.regulation
    grad_fn = jax.value_and_grad(lambda h, z: _competence(agent, h, z), argnums=(0, 1))

    def step(carry: tuple[jax.Array, jax.Array], k: jax.Array):
        h, z = carry
        a = agent.actor.sample(feature(h[None], z[None]), k)  # a ~ pi(a | s)
        h = agent.wm.rssm.core(h[None], z.reshape(1, -1), a)[0]  # h <- f(s, a)
        before, (gh, gz) = grad_fn(h, z)
        h, z = h + r.beta * gh, z + r.beta * gz  # s <- s + beta * grad_s sum psi(s)
        after = _competence(agent, h, z)
        return (h, z), (before, after)

    keys = jax.random.split(key, r.horizon + 1)
    (h, z), (before, after) = jax.lax.scan(step, (h_D.astype(jnp.float32), z_SxK.astype(jnp.float32)), keys[:-1])
    action = agent.actor.sample(feature(h[None], z[None]), keys[-1])[0]
    return action, {"competence_before": before, "competence_after": after, "competence_final": after[-1],
                    "deter": h, "stoch": z}


def regulate(agent, h_BxD: jax.Array, z_BxSxK: jax.Array, key: jax.Array, cfg: Config,
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Batched Algorithm 1: actions [B, A]; info has competence_before/after [B, H] and the ascended
    state s as deter [B, D] / stoch [B, S, K]."""
    keys = jax.random.split(key, h_BxD.shape[0])
    return jax.vmap(lambda h, z, k: regulate_one(agent, h, z, k, cfg))(h_BxD, z_BxSxK, keys)
