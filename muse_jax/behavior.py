"""DreamerV3 actor-critic learned on imagined trajectories (the baseline policy MUSE regulates).

Follows current danijar/dreamerv3 (`agent.py` `imag_loss`, `repl_loss`, `lambda_return`).
Actor: bounded normal (tanh mean), output layer initialised at scale 0.01, trained with REINFORCE on
normalised advantages plus an entropy bonus, as dreamerv3 does for every action space; the
log-probability is of the unclipped sample (clipping happens only when acting in the env). The
imagined rollout is computed without gradients (no backprop through the dynamics). Critic: symlog
two-hot over `bins`, trained on imagined lambda-returns (`value`) and on lambda-returns along the
replayed sequence bootstrapped with the imagined returns (`repval`), each with a regulariser towards
a slow (EMA) copy of itself. Returns are scaled by an EMA of their 5th-95th percentile range, never by
less than `retnorm_limit`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from muse_jax import dists
from muse_jax.config import Config
from muse_jax.config.loops import loops_for
from muse_jax.nets import MLP, Dtype, feature, linear

sg = jax.lax.stop_gradient


class Actor(nnx.Module):
    """pi(a | s): MLP -> (tanh mean, bounded std).

    By default one output layer gives the 2A raw numbers (mean and std halves); with
    `behavior.split_policy_out` two layers give them, as dreamerv3's `bounded_normal` head has (`mean`
    and `stddev` Linear). Same parameter count and init; the difference is the optimiser's per-tensor
    AGC, which clips the mean and std gradients together in one tensor, separately in two.
    """

    def __init__(self, feat_dim: int, act_dim: int, cfg: Config, rngs: nnx.Rngs, dtype: Dtype = jnp.float32):
        b, m = cfg.behavior, cfg.model
        split = b.split_policy_out
        self.net = MLP(feat_dim, m.units, m.mlp_layers, None if split else 2 * act_dim, rngs, dtype,
                       out_scale=b.policy_outscale, hidden_bias=m.hidden_bias)
        self.mean_out = linear(m.units, act_dim, rngs, dtype, scale=b.policy_outscale) if split else None
        self.std_out = linear(m.units, act_dim, rngs, dtype, scale=b.policy_outscale) if split else None
        self.min_std, self.max_std = b.min_std, b.max_std
        self.act_dim = act_dim

    def dist(self, feat: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = self.net(feat)
        if self.mean_out is not None:
            h = jnp.concatenate([self.mean_out(h), self.std_out(h)], -1)
        return dists.bounded_normal(h, self.min_std, self.max_std)

    def sample(self, feat: jax.Array, key: jax.Array, clip: bool = True) -> jax.Array:
        """Action sample, clipped to [-1, 1] for acting; `clip=False` (imagination) keeps the raw sample
        whose log-probability the actor loss takes, as dreamerv3 does."""
        return self.sample_from_noise(feat, self.noise(key, feat.shape[:-1]), clip)

    def noise(self, key: jax.Array, batch_shape: tuple[int, ...]) -> jax.Array:
        """The standard normal noise [*batch_shape, A] that `sample` draws from `key` (float32, as
        `dists.bounded_normal` computes the mean and std)."""
        return jax.random.normal(key, (*batch_shape, self.act_dim), jnp.float32)

    def sample_from_noise(self, feat: jax.Array, eps: jax.Array, clip: bool = True) -> jax.Array:
        """`sample` given its noise (`noise`): imagination draws all steps' noise before its loop."""
        mean, std = self.dist(feat)
        a = dists.normal_sample_from_noise(eps, mean, std)
        return jnp.clip(a, -1.0, 1.0) if clip else a


class Critic(nnx.Module):
    """v(s): MLP -> two-hot logits over symexp-spaced bins (zero-initialised output)."""

    def __init__(self, feat_dim: int, cfg: Config, rngs: nnx.Rngs, dtype: Dtype = jnp.float32):
        self.net = MLP(feat_dim, cfg.model.units, cfg.model.mlp_layers, cfg.model.bins, rngs, dtype,
                       out_scale=0.0, hidden_bias=cfg.model.hidden_bias)
        self.nbins = cfg.model.bins

    def logits(self, feat: jax.Array) -> jax.Array:
        return self.net(feat).astype(jnp.float32)

    def value(self, feat: jax.Array) -> jax.Array:
        return dists.twohot_decode(self.logits(feat), dists.twohot_bins(self.nbins))


# ----------------------------------------------------------------------------- pure math


def lambda_return(reward_NxH1: jax.Array, cont_NxH1: jax.Array, value_NxH1: jax.Array, disc: float,
                  lam: float) -> jax.Array:
    """TD(lambda) returns R_0..R_{H-1} [N, H] along imagined trajectories of H+1 states.

    reward[t] and cont[t] belong to arriving at state t, so index 0 is unused:
    R_t = r_{t+1} + disc * c_{t+1} * ((1 - lam) * v_{t+1} + lam * R_{t+1}),  R_H = v_H.

    The recurrence R_t = i_t + k_t R_{t+1} composes affine maps, so it is computed as a parallel prefix
    (`lax.associative_scan`, log2(H) levels of a few fused ops) instead of a while loop of H iterations,
    each a kernel launch and a host round trip on a GPU. The same returns to float32 reordering.
    """
    rew, live, val = reward_NxH1[:, 1:], disc * cont_NxH1[:, 1:], value_NxH1[:, 1:]
    interm = rew + live * (1.0 - lam) * val

    def compose(later: tuple[jax.Array, jax.Array], earlier: tuple[jax.Array, jax.Array],
                ) -> tuple[jax.Array, jax.Array]:
        """x -> i + k x of a later span, then of the earlier one (reverse scan: `later` comes first)."""
        (k_later, i_later), (k_earlier, i_earlier) = later, earlier
        return k_earlier * k_later, i_earlier + k_earlier * i_later

    k_NxH, i_NxH = jax.lax.associative_scan(compose, (live * lam, interm), reverse=True, axis=1)
    return i_NxH + k_NxH * value_NxH1[:, -1:]


def percentile_scale(ret: jax.Array, lo_ema: jax.Array, hi_ema: jax.Array, cfg: Config,
                     ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """EMA-updated 5th/95th percentiles of returns and the resulting scale max(limit, hi - lo)."""
    b = cfg.behavior
    lo, hi = jnp.percentile(ret, jnp.array([b.retnorm_low, b.retnorm_high]))  # one sort
    lo_new = (1.0 - b.retnorm_rate) * lo_ema + b.retnorm_rate * lo
    hi_new = (1.0 - b.retnorm_rate) * hi_ema + b.retnorm_rate * hi
    scale = jnp.maximum(b.retnorm_limit, hi_new - lo_new)
    return lo_new, hi_new, scale


def discount(cfg: Config) -> float:
    return 1.0 - 1.0 / cfg.behavior.horizon


def imagine(wm, actor: Actor, starts: dict[str, jax.Array], key: jax.Array, horizon: int) -> dict[str, jax.Array]:
    """Imagined trajectories (no gradients) from every start state [N, ...]: feat, action, reward, cont."""
    start = dict(deter=sg(starts["deter"]), stoch=sg(starts["stoch"]))
    n = start["deter"].shape[0]
    policy = lambda s, eps: actor.sample_from_noise(sg(feature(s["deter"], s["stoch"])), eps, clip=False)
    unroll = loops_for(wm.cfg, jax.default_backend()).imag_unroll  # `auto`: the backend's measured setting
    traj, act = wm.rssm.imagine(start, policy, horizon, key, unroll=unroll,
                                draw=lambda k: actor.noise(k, (n,)))
    traj = jax.tree.map(sg, traj)
    feat = feature(traj["deter"], traj["stoch"])
    reward = wm.reward(feat)
    cont = wm.cont_prob(feat)
    cont = cont.at[:, 0].set(starts["cont"])
    return dict(feat=sg(feat), action=sg(act), reward=sg(reward), cont=sg(cont))


def actor_critic_losses(actor: Actor, critic: Critic, slow_critic: Critic, traj: dict[str, jax.Array],
                        ret_lo: jax.Array, ret_hi: jax.Array, cfg: Config,
                        ) -> tuple[dict[str, jax.Array], dict[str, jax.Array], dict[str, jax.Array]]:
    """Actor (`policy`) and critic (`value`) losses on one imagined batch of N trajectories.

    The critic runs once: its (stop-gradient) values give the lambda-returns and the advantages,
    its logits the two-hot loss. Returns (losses, metrics, outs) with outs `ret` [N, H] (the imagined
    lambda-returns, whose index 0 bootstraps the replay value loss), `ret_lo`, `ret_hi` (new stats).
    """
    b = cfg.behavior
    disc = discount(cfg)
    feat = traj["feat"]
    weight = sg(jnp.cumprod(disc * traj["cont"], 1) / disc)[:, :-1]
    logits = critic.logits(feat)
    bins = dists.twohot_bins(cfg.model.bins)
    value = sg(dists.twohot_decode(logits, bins))
    ret = lambda_return(traj["reward"], traj["cont"], value, disc, b.lam)
    lo, hi, scale = percentile_scale(ret, ret_lo, ret_hi, cfg)
    adv = sg((ret - value[:, :-1]) / scale)
    mean, std = actor.dist(feat)
    logp = dists.normal_logp(traj["action"], mean, std)[:, :-1]
    ent = dists.normal_entropy(std)[:, :-1]
    actor_loss = (weight * -(logp * adv + b.actent * ent)).mean()
    slow_value = sg(slow_critic.value(feat))[:, :-1]
    critic_loss = (weight * (dists.twohot_loss(logits[:, :-1], ret, bins)
                             + b.slowreg * dists.twohot_loss(logits[:, :-1], slow_value, bins))).mean()
    losses = {"actor": actor_loss, "critic": critic_loss}
    metrics = {"entropy": ent.mean(), "adv_mag": jnp.abs(adv).mean(), "value": value.mean(), "ret": ret.mean(),
               "ret_scale": scale}
    return losses, metrics, {"ret": ret, "ret_lo": lo, "ret_hi": hi}


def replay_value_loss(critic: Critic, slow_critic: Critic, feat_BxTxF: jax.Array, reward_BxT: jax.Array,
                      terminal_BxT: jax.Array, boot_BxT: jax.Array, cfg: Config) -> tuple[jax.Array, jax.Array]:
    """dreamerv3 `repl_loss`: the critic on the replayed posterior states learns lambda-returns computed
    along the replayed sequence, bootstrapped at every step with that state's imagined return `boot`.

    R_t = r_{t+1} + disc * (1 - term_{t+1}) * ((1 - lam) * boot_{t+1} + lam * R_{t+1}),  R_{T-1} = boot_{T-1},
    trained on t < T-1 with the same slow-critic regulariser. dreamerv3 also cuts the recursion at
    `is_last`; chunks here never cross an episode's end (replay.py), so that cut never applies.
    Returns (loss, returns [B, T-1]).
    """
    b = cfg.behavior
    bins = dists.twohot_bins(cfg.model.bins)
    ret = sg(lambda_return(reward_BxT, 1.0 - terminal_BxT, sg(boot_BxT), discount(cfg), b.lam))
    logits = critic.logits(feat_BxTxF)[:, :-1]
    slow_value = sg(slow_critic.value(feat_BxTxF))[:, :-1]
    loss = (dists.twohot_loss(logits, ret, bins) + b.slowreg * dists.twohot_loss(logits, slow_value, bins)).mean()
    return loss, ret


def ema_update(slow: nnx.Module, fast: nnx.Module, rate: float) -> None:
    """slow <- (1 - rate) * slow + rate * fast, in place on the NNX modules."""
    s, f = nnx.state(slow, nnx.Param), nnx.state(fast, nnx.Param)
    nnx.update(slow, jax.tree.map(lambda a, c: (1.0 - rate) * a + rate * c, s, f))
