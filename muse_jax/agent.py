"""The MUSE / DreamerV3 agent as pure functions around Flax NNX modules.

`create_learner` builds the `Learner` (the agent's modules plus their one optimiser, dreamerv3's
LaProp chain over world model, actor and critic) once and splits it into a static `graphdef` and a
`state` pytree (params, optimiser state, return-normaliser stats, step): a `SplitLearner`.
`train_step` and `policy_step` are pure functions of (graphdef, state, ...) so they jit, donate and
shard like any JAX function; inside they rebuild the modules with `nnx.merge` at trace time only.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from muse_jax import behavior, regulation
from muse_jax.agent_kinds import AGENT_KINDS
from muse_jax.behavior import Actor, Critic
from muse_jax.competence import competence
from muse_jax.config import Config
from muse_jax.nets import feature
from muse_jax.world_model import ObsSpec, WorldModel, dtype_of

__all__ = ["CONTEXT_KEYS", "Agent", "Learner", "ObsSpec", "POLICY_MODES", "SplitLearner", "create_learner",
           "initial_carry", "make_optimizer", "make_policy_step", "make_train_step", "policy_step", "pop_context",
           "train_step"]

CONTEXT_KEYS = ("replay_context/deter", "replay_context/stoch")
"""Not metrics: the training posteriors [B, T, D] and class indices [B, T, S] that `train_step` returns
among its metrics when `replay.context` is on, for `Replay.write_back` (pop them with `pop_context`)."""


def pop_context(metrics: dict[str, Any]) -> tuple[dict[str, Any], tuple[Any, Any] | None]:
    """(the scalar metrics, (deter, stoch) training posteriors or None) of a train step's output."""
    metrics = dict(metrics)
    if CONTEXT_KEYS[0] not in metrics:
        return metrics, None
    return metrics, (metrics.pop(CONTEXT_KEYS[0]), metrics.pop(CONTEXT_KEYS[1]))


POLICY_MODES = (*AGENT_KINDS, "random")
"""How `policy_step` acts: as one of the agent kinds, or uniformly at random (the prefill)."""


class Agent(nnx.Module):
    """World model (encoder, RSSM, decoder, reward, continue, competence heads) + actor + critics."""

    def __init__(self, cfg: Config, spec: ObsSpec, rngs: nnx.Rngs):
        dt = dtype_of(cfg)
        self.cfg, self.spec = cfg, spec
        self.wm = WorldModel(cfg, spec, rngs)
        feat = self.wm.feat_dim
        self.actor = Actor(feat, spec.act_dim, cfg, rngs, dt)
        self.critic = Critic(feat, cfg, rngs, dt)
        self.slow_critic = Critic(feat, cfg, rngs, dt)
        nnx.update(self.slow_critic, nnx.state(self.critic, nnx.Param))


class Stat(nnx.Variable):
    """Non-trainable running statistics (return percentiles, step counter)."""


class OptState(nnx.Variable):
    """An optax optimiser state (any pytree)."""


def clip_by_agc(clip: float, pmin: float = 1e-3) -> optax.GradientTransformation:
    """dreamerv3's adaptive gradient clipping (`embodied/jax/opt.py` `clip_by_agc`), per whole tensor:
    u <- u / max(1, |u| / (clip * max(pmin, |p|))). optax.adaptive_grad_clip clips per output unit
    instead, which is another rule, so the per-tensor one is composed here with optax.stateless."""

    def fn(updates: Any, params: Any) -> Any:
        def one(u: jax.Array, p: jax.Array) -> jax.Array:
            upper = clip * jnp.maximum(pmin, jnp.linalg.norm(p.ravel()))
            return u / jnp.maximum(1.0, jnp.linalg.norm(u.ravel()) / upper)

        return jax.tree.map(one, updates, params) if clip else updates

    return optax.stateless(fn)


def make_optimizer(cfg: Config) -> optax.GradientTransformation:
    """The one LaProp chain of current dreamerv3 (`agent.py` `_make_opt`), from optax pieces:
    agc clipping -> divide by the bias-corrected RMS (eps outside the root) -> bias-corrected momentum
    of the normalised gradient (LaProp: momentum after normalisation) -> linear warm-up to `lr`."""
    o = cfg.optim
    sched = optax.linear_schedule(0.0, o.lr, o.warmup) if o.warmup else optax.constant_schedule(o.lr)
    return optax.chain(
        clip_by_agc(o.agc, o.agc_pmin),
        optax.scale_by_rms(decay=o.beta2, eps=o.eps, eps_in_sqrt=False, bias_correction=True),
        optax.ema(decay=o.beta1, debias=True),
        optax.scale_by_learning_rate(sched),
    )


def _trained(agent: Agent) -> tuple[nnx.Module, nnx.Module, nnx.Module]:
    """The modules the optimiser updates (the slow critic follows the critic by EMA instead)."""
    return agent.wm, agent.actor, agent.critic


class Learner(nnx.Module):
    """Agent plus everything training mutates: the optimiser state, return stats, step."""

    def __init__(self, cfg: Config, spec: ObsSpec, rngs: nnx.Rngs):
        self.cfg = cfg
        self.agent = Agent(cfg, spec, rngs)
        self.opt = OptState(make_optimizer(cfg).init(tuple(nnx.state(m, nnx.Param) for m in _trained(self.agent))))
        self.ret_lo = Stat(jnp.zeros((), jnp.float32))
        self.ret_hi = Stat(jnp.zeros((), jnp.float32))
        self.step = Stat(jnp.zeros((), jnp.int32))


@dataclasses.dataclass(frozen=True)
class SplitLearner:
    """A `Learner` split by `nnx.split`: the static graph definition + the state pytree."""

    graphdef: Any
    state: Any

    def agent(self) -> Agent:
        return nnx.merge(self.graphdef, self.state).agent

    @property
    def cfg(self) -> Config:
        return nnx.merge(self.graphdef, self.state).cfg


def create_learner(cfg: Config, spec: ObsSpec, seed: int) -> SplitLearner:
    """Initialise agent parameters and optimiser states from `seed`.

    Why one jitted program: built eagerly, every initialiser and optimiser-state leaf of a distinct
    shape was its own tiny XLA compilation (89 at size1m, ~3 s on a 2-core CPU and ~20 s before the
    first update on a GPU); traced once under `jax.jit` it is one compilation, which the
    persistent compilation cache also keeps. The seed is an argument, not a constant, so every seed
    shares that program. Same random streams as the eager build (threefry is the same under jit).
    """

    def build(key: jax.Array) -> Any:
        _, state = nnx.split(Learner(cfg, spec, nnx.Rngs(params=key)))
        return state

    graphdef = nnx.graphdef(nnx.eval_shape(lambda: Learner(cfg, spec, nnx.Rngs(params=0))))
    # A jit output is a fresh buffer per leaf (the slow critic starts as the critic), so donation is safe.
    state = jax.jit(build)(jax.random.key(seed))
    return SplitLearner(graphdef, state)


def train_step(graphdef: Any, state: Any, batch: dict[str, jax.Array], key: jax.Array,
               ) -> tuple[Any, dict[str, jax.Array]]:
    """One update of world model, actor and critic with one optimiser on one folded loss (dreamerv3).

    loss = world-model loss (its own scales) + policy * actor + value * critic (imagined returns)
           + repval * critic (returns along the replayed sequence).
    Imagination starts from every posterior state without gradients into the world model
    (dreamerv3 `ac_grads: False`); the replay value loss reaches it (`repval_grad: True`). Pure:
    returns the new state and scalar metrics, plus, with `replay.context`, the batch's training
    posteriors under CONTEXT_KEYS (not metrics: `pop_context` takes them out for `Replay.write_back`).
    """
    tr: Learner = nnx.merge(graphdef, state)
    cfg, agent = tr.cfg, tr.agent
    lw = cfg.loss
    k_wm, k_img = jax.random.split(key)

    def loss_fn(wm: WorldModel, actor: Actor, critic: Critic) -> tuple[jax.Array, tuple]:
        wm_loss, (metrics, post) = wm.loss(batch, k_wm)
        B, T = post["cont"].shape
        flat = lambda x: x.reshape(B * T, *x.shape[2:])
        traj = behavior.imagine(wm, actor, jax.tree.map(flat, post), k_img, cfg.behavior.imag_horizon)
        ac, ac_metrics, outs = behavior.actor_critic_losses(actor, critic, agent.slow_critic, traj,
                                                            tr.ret_lo.get_value(), tr.ret_hi.get_value(), cfg)
        feat = feature(post["deter"], post["stoch"])
        reward = jnp.asarray(batch["reward"], jnp.float32)
        terminal = jnp.asarray(batch["is_terminal"], jnp.float32)
        boot = outs["ret"][:, 0].reshape(B, T)
        repval, _ = behavior.replay_value_loss(critic, agent.slow_critic, feat, reward, terminal, boot, cfg)
        total = wm_loss + lw.policy * ac["actor"] + lw.value * ac["critic"] + lw.repval * repval
        metrics = {**metrics, **ac_metrics, "loss/actor": ac["actor"], "loss/critic": ac["critic"],
                   "loss/repval": repval, "loss/total": total, "imag_reward": traj["reward"][:, 1:].mean()}
        if cfg.replay.context:  # dreamerv3 writes the training posteriors back into replay (replay.write_back)
            metrics[CONTEXT_KEYS[0]] = jax.lax.stop_gradient(post["deter"])
            metrics[CONTEXT_KEYS[1]] = jnp.argmax(post["stoch"], -1)
        return total, (metrics, outs["ret_lo"], outs["ret_hi"])

    modules = _trained(agent)
    (_, (metrics, lo, hi)), grads = nnx.value_and_grad(loss_fn, argnums=(0, 1, 2), has_aux=True)(*modules)
    params = tuple(nnx.state(m, nnx.Param) for m in modules)
    updates, new_opt = make_optimizer(cfg).update(grads, tr.opt.get_value(), params)
    tr.opt.set_value(new_opt)
    new_params = optax.apply_updates(params, updates)
    for module, p in zip(modules, new_params, strict=True):
        nnx.update(module, p)
    for name, g in zip(("model", "actor", "critic"), grads, strict=True):
        metrics[f"grad_norm/{name}"] = optax.tree.norm(g)
    behavior.ema_update(agent.slow_critic, agent.critic, cfg.behavior.slow_rate)
    tr.ret_lo.set_value(lo)
    tr.ret_hi.set_value(hi)
    tr.step.set_value(tr.step.get_value() + 1)
    return nnx.state(tr), {k: v.astype(jnp.float32) for k, v in metrics.items()}


def make_train_step(cfg: Config, graphdef: Any, mesh: jax.sharding.Mesh | None = None, state: Any = None):
    """Jitted `(state, batch, key) -> (state, metrics)` with the state donated.

    With a mesh, the batch's leading axis is split over the "data" axis and the state laid out per
    `cfg.parallel.param_sharding` (replicated, or FSDP, which needs `state` to pick the split axes);
    XLA inserts the gradient all-reduce.
    """
    fn = lambda state, batch, key: train_step(graphdef, state, batch, key)
    if mesh is None:
        return jax.jit(fn, donate_argnums=0)
    from muse_jax import parallel

    return parallel.jit_sharded_step(fn, state, mesh, cfg.parallel.param_sharding)


# ----------------------------------------------------------------------------- acting


def initial_carry(graphdef: Any, state: Any, batch_size: int) -> dict[str, jax.Array]:
    """Zero RSSM state and previous action for `batch_size` environments.

    `deter`/`stoch` is the filtering belief (never regulated); `act_deter`/`act_stoch` is the state the
    policy acts from, which Algorithm 1 moves when `regulation.carry_regulated_state` (see `policy_step`)."""
    agent = nnx.merge(graphdef, state).agent
    carry = agent.wm.rssm.initial(batch_size)
    carry["act_deter"], carry["act_stoch"] = carry["deter"], carry["stoch"]
    carry["action"] = jnp.zeros((batch_size, agent.spec.act_dim), jnp.float32)
    return carry


def policy_step(graphdef: Any, state: Any, carry: dict[str, jax.Array], obs: dict[str, jax.Array],
                key: jax.Array, mode: str) -> tuple[jax.Array, dict[str, jax.Array], dict[str, jax.Array]]:
    """Filter one observation per env, then act: "random", "dreamer" (actor sample) or "muse".

    "muse" self-regulates per cfg.regulation.strategy ("none" = the plain actor's sample, "mean" = its
    mean action). Every strategy starts from the filtered state (h_t from the posterior chain, which has
    seen every observation of the episode so far), so what MUSE does depends on what it sees; the config
    refuses the one open-loop combination (a carried regulated state with z from the prior). Returns actions
    [B, A] in [-1, 1], the new carry, and info with `competence` [B], `competence_probs` [B, N],
    `value` [B] (critic, un-normalised), `value_normalized` [B] (value / return scale, the Dreamer
    self-awareness signal of §3.2.2) and `quantile` [B] (predicted success quantile class 0..N: the
    number of psi_i above 1/2), `psi1` [B] (psi_1, success within the time limit: the main
    self-awareness accuracy's prediction, evaluate.py). `mode` must be static under jit.

    The carry holds a_t and two beliefs, each advanced by h_{t+1} = f(h, z, a_t) and the posterior
    z_{t+1} from the next observation: the filtering belief (`deter`, `stoch`) that is never regulated,
    and the acting state (`act_deter`, `act_stoch`). With strategy "gradient",
    `regulation.carry_regulated_state` and `z_source: posterior` (h_{t+1} = f(s, a_t), z_{t+1} from the next
    observation) the acting state is the ascended s, so regulation carries over; otherwise (the default)
    both chains are the same. The self-awareness
    outputs (`competence`, `quantile`, ...: what Table 1 scores) and the replay-context latents always
    come from the filtering belief, the model's honest estimate before any regulation: an ascended state
    has its competence pushed up by construction. Regulated steps add the effect sizes
    `regulation_state_change`, `regulation_action_change`, `regulation_ascent_state_change`,
    `regulation_ascent_action_change` [B] (regulation/gradient.py) and `regulated_competence` [B].
    """
    if mode not in POLICY_MODES:
        raise ValueError(f"policy_step: mode={mode!r} is not one of {POLICY_MODES}.")
    tr: Learner = nnx.merge(graphdef, state)
    agent, cfg = tr.agent, tr.cfg
    if mode == "muse" and not agent.wm.has_competence:
        raise ValueError("policy_step: mode 'muse' needs the self-awareness head; this is a Dreamer model.")
    k_obs, k_act = jax.random.split(key)
    embed = agent.wm.encode(obs)
    is_first = jnp.asarray(obs["is_first"], bool)
    st, _ = agent.wm.rssm.obs_step(dict(deter=carry["deter"], stoch=carry["stoch"]), carry["action"], embed,
                                   is_first, k_obs)
    carries_regulation = (mode == "muse" and cfg.regulation.strategy == "gradient"
                          and cfg.regulation.carry_regulated_state)
    if carries_regulation:  # the acting chain, fed the same observation from the carried ascended state
        act_st, _ = agent.wm.rssm.obs_step(dict(deter=carry["act_deter"], stoch=carry["act_stoch"]),
                                           carry["action"], embed, is_first, k_obs)
    else:
        act_st = st
    feat = feature(st["deter"], st["stoch"])
    probs = agent.wm.competence_probs(feat)
    value = agent.critic.value(feat)
    scale = jnp.maximum(cfg.behavior.retnorm_limit, tr.ret_hi.get_value() - tr.ret_lo.get_value())
    info: dict[str, jax.Array] = {"competence": competence(probs), "competence_probs": probs,
                                  "value": value, "value_normalized": value / scale,
                                  "quantile": (probs > 0.5).sum(-1).astype(jnp.float32),
                                  "psi1": probs[..., 0]}  # P(success within the time limit), §3.1.1
    B, A = feat.shape[0], agent.spec.act_dim
    nxt = dict(deter=st["deter"], stoch=st["stoch"], act_deter=act_st["deter"], act_stoch=act_st["stoch"])
    if mode == "random":
        action = jax.random.uniform(k_act, (B, A), jnp.float32, -1.0, 1.0)
    elif mode == "dreamer" or cfg.regulation.strategy == "none":
        action = agent.actor.sample(feat, k_act)
    elif cfg.regulation.strategy == "mean":  # the noise-free control: the actor's mean action
        action = agent.actor.dist(feat)[0]
    else:
        action, reg_info = regulation.get_strategy(cfg.regulation.strategy)(agent, act_st["deter"],
                                                                            act_st["stoch"], k_act, cfg)
        info["regulated_competence"] = reg_info["competence_final"]
        for k in ("state_change", "action_change", "ascent_state_change", "ascent_action_change", "grad_norm",
                  "actor_jacobian_norm", "actor_mean_abs"):
            if k in reg_info:
                info[f"regulation_{k}"] = reg_info[k]
        if carries_regulation:
            nxt["act_deter"] = reg_info["deter"].astype(st["deter"].dtype)
            nxt["act_stoch"] = reg_info["stoch"].astype(st["stoch"].dtype)
    action = jnp.clip(action, -1.0, 1.0)
    return action, dict(**nxt, action=action), info


def make_policy_step(graphdef: Any, mode: str | None = None) -> Callable:
    """The one jitted policy step: `(state, carry, obs, key) -> (action, carry, info)` for a fixed
    `mode`, or, without one, `(state, carry, obs, key, mode)` with the mode a static argument (the
    Collector's calling convention: one compiled program per mode, built on first use)."""
    if mode is None:
        return jax.jit(functools.partial(policy_step, graphdef), static_argnums=(4,))
    return jax.jit(lambda state, carry, obs, key: policy_step(graphdef, state, carry, obs, key, mode))
