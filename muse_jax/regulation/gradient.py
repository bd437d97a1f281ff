"""(c) MUSE Algorithm 1: gradient ascent on the model state s = (h, z) towards predicted success.

As written (MUSE §3.1.2, Algorithm 1): z_t ~ p(z_t | h_t); s = (h_t, z_t); for H steps: a ~ pi(s);
h <- f(s, a); s <- s + beta * grad_s sum_i psi_i(s). Then a_t ~ pi(s) and h_{t+1} <- f(s, a_t). z is the
(relaxed, continuous) one-hot of the start state and moves only through the gradient step.

Every decision starts from the filtered h_t (the posterior chain, which has seen the episode's
observations), so the policy is closed-loop. Choices the paper leaves open, each a `regulation.*` field.
The defaults are the algorithm as written: `benchmarks/regulation_effect.py` (docs/self-regulation.md)
found, closed loop on the quickstart model (48 paired episodes per arm), that at beta 0.02 the ascent moves
the action by ~0.002 (|grad| ~0.8, actor sensitivity ~0.1) and changes no outcome against beta = 0, and
that no reading beats the noisy plain actor.
- `z_source`: "prior" (default, the algorithm's z_t ~ p(z|h_t), sampled) or "posterior" (the filtered
  z_t from q(z|h_t, x_t), which has seen the observation).
- `rollout`: "forward" (default, as written: the loop rolls the model H steps ahead, so the acting
  state is ~H imagined steps in the future) or "in_place" (the same H ascent steps on the current s
  without `h <- f(s, a)`: regulation then only moves the current belief).
- `step`: "fixed" (s += beta * g, as written) or "normalized" (s += beta * g / |g|, a step of length
  beta whatever the gradient's scale; the competence head's gradients are often tiny, ~1e-3).
- `carry_regulated_state` (policy_step): whether h_{t+1} = f(s, a_t) starts from the ascended s (only with
  `z_source: posterior`: with the prior z a carried state never sees an observation, so the config refuses it).

Measuring the effect (info, per env): `state_change` = |feat(s) - feat(s_t)|, how far the acting state
is from the posterior state the plain actor would act from; `action_change` = |a_t - a_plain|, the
regulated action against the plain actor's action from that posterior with the same noise;
`ascent_state_change` / `ascent_action_change` the same against the identical loop run with beta = 0
(same noise), i.e. what the gradient itself changes, separated from rolling the model forward; and why:
`grad_norm` = |grad_s sum psi| at the final s, `actor_jacobian_norm` = |d mean(a) / d feat(s)| (Frobenius)
and `actor_mean_abs` = mean |mean action| there (near 1: the tanh is saturated, an input step moves nothing).
The `ascent_*` and "why" figures cost a second loop, a gradient and a Jacobian per decision and change no
action: `regulation.effect_diagnostics: false` skips them (their keys are then absent).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from muse_jax import dists
from muse_jax.competence import competence
from muse_jax.config import Config
from muse_jax.nets import feature


def _competence(agent, h_D: jax.Array, z_SxK: jax.Array) -> jax.Array:
    return competence(agent.wm.competence_probs(feature(h_D[None], z_SxK[None])))[0]


def ascent_step(gh: jax.Array, gz: jax.Array, beta: float, step: str) -> tuple[jax.Array, jax.Array]:
    """The update (dh, dz) of eq. 4: beta * g ("fixed") or beta * g / |g| ("normalized", |g| over h and z)."""
    if step == "normalized":
        norm = jnp.sqrt(jnp.sum(gh * gh) + jnp.sum(gz * gz))
        scale = beta / jnp.maximum(norm, 1e-12)
    else:
        scale = beta
    return scale * gh, scale * gz


def _loop(agent, h: jax.Array, z: jax.Array, keys: jax.Array, beta: float, cfg: Config):
    """Algorithm 1's loop from s = (h, z): the final s and competence before/after each ascent step [H]."""
    r = cfg.regulation
    grad_fn = jax.value_and_grad(lambda h_, z_: _competence(agent, h_, z_), argnums=(0, 1))

    def step(carry: tuple[jax.Array, jax.Array], k: jax.Array):
        h, z = carry
        if r.rollout == "forward":
            a = agent.actor.sample(feature(h[None], z[None]), k)  # a ~ pi(a | s)
            h = agent.wm.rssm.core(h[None], z.reshape(1, -1), a)[0]  # h <- f(s, a)
        before, (gh, gz) = grad_fn(h, z)
        dh, dz = ascent_step(gh, gz, beta, r.step)
        h, z = h + dh, z + dz  # s <- s + beta * grad_s sum psi(s)
        return (h, z), (before, _competence(agent, h, z))

    (h, z), (before, after) = jax.lax.scan(step, (h, z), keys)
    return h, z, before, after


def regulate_one(agent, h_D: jax.Array, z_SxK: jax.Array, key: jax.Array, cfg: Config,
                 ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Algorithm 1 for one environment from the filtered state (h_t, z_t): a_t [A] and info (see module doc)."""
    r = cfg.regulation
    k_z, k_loop, k_act = jax.random.split(key, 3)
    h0 = h_D.astype(jnp.float32)
    z_post = z_SxK.astype(jnp.float32)
    if r.z_source == "prior":  # z_t ~ p(z_t | h_t), Algorithm 1's first line
        z0 = jax.lax.stop_gradient(dists.categorical_sample_st(k_z, agent.wm.rssm.prior_logits(h0[None])[0]))
    else:
        z0 = z_post
    keys = jax.random.split(k_loop, r.horizon)
    h, z, before, after = _loop(agent, h0, z0, keys, r.beta, cfg)
    act = lambda hh, zz: agent.actor.sample(feature(hh[None], zz[None]), k_act)[0]  # clipped, as the env gets it
    action = act(h, z)
    plain = act(h0, z_post)  # the plain actor from the posterior, same noise
    feat_s, feat_post = feature(h, z), feature(h0, z_post)
    norm = jnp.linalg.norm
    info = {"competence_before": before, "competence_after": after, "competence_final": after[-1],
            "deter": h, "stoch": z,
            "state_change": norm(feat_s - feat_post), "action_change": norm(action - plain)}
    if not r.effect_diagnostics:
        return action, info
    h_0, z_0, _, _ = _loop(agent, h0, z0, keys, 0.0, cfg)  # the same loop and noise without the gradient
    no_ascent = act(h_0, z_0)
    feat_0 = feature(h_0, z_0)
    gh, gz = jax.grad(lambda h_, z_: _competence(agent, h_, z_), argnums=(0, 1))(h, z)
    mean_of = lambda f: agent.actor.dist(f[None])[0][0]  # the actor's mean action, tanh-bounded
    jac_AxF = jax.jacrev(mean_of)(feat_s)
    return action, {**info,
                    "ascent_state_change": norm(feat_s - feat_0), "ascent_action_change": norm(action - no_ascent),
                    # why an ascent step moves the action this much: |grad| at the end state, the actor's
                    # sensitivity there (Frobenius norm of d mean / d feat) and how saturated its tanh is
                    "grad_norm": jnp.sqrt(jnp.sum(gh * gh) + jnp.sum(gz * gz)),
                    "actor_jacobian_norm": norm(jac_AxF), "actor_mean_abs": jnp.abs(mean_of(feat_s)).mean()}


def regulate(agent, h_BxD: jax.Array, z_BxSxK: jax.Array, key: jax.Array, cfg: Config,
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Batched Algorithm 1: actions [B, A]; info has competence_before/after [B, H], the ascended
    state s as deter [B, D] / stoch [B, S, K], and the effect sizes [B] (module doc)."""
    keys = jax.random.split(key, h_BxD.shape[0])
    return jax.vmap(lambda h, z, k: regulate_one(agent, h, z, k, cfg))(h_BxD, z_BxSxK, keys)
