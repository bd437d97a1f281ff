"""The MUSE world model: DreamerV3 encoder + RSSM + heads, with the self-awareness (competence) head.

Loss per MUSE eq. 2-3: prediction terms (image MSE, proprio symlog-MSE, reward symlog two-hot,
continue Bernoulli, competence N x BCE) + dyn * KL_dyn + rep * KL_rep with free bits. Heads run
once over the flattened B*T states, and absent inputs (no image / no proprio) cost nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from muse_jax import dists
from muse_jax.competence import agent_steps_per_episode, competence_labels
from muse_jax.config import Config, ConfigError
from muse_jax.config.loops import loops_for
from muse_jax.nets import MLP, ConvDecoder, ConvEncoder, feature
from muse_jax.rssm import RSSM

Batch = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class ObsSpec:
    """Shapes the agent is built for; absent inputs are None."""

    image_shape: tuple[int, int, int] | None
    proprio_dim: int | None
    act_dim: int
    num_tasks: int

    @classmethod
    def from_config(cls, cfg: Config, proprio_dim: int = 39, act_dim: int = 4) -> ObsSpec:
        s = cfg.env.image_size
        return cls(image_shape=(s, s, cfg.model.image_channels) if cfg.env.image else None,
                   proprio_dim=proprio_dim if cfg.env.proprio else None,
                   act_dim=act_dim, num_tasks=len(cfg.env.tasks))

    def __post_init__(self) -> None:
        if self.image_shape is None and self.proprio_dim is None:
            raise ConfigError("ObsSpec: give an image_shape or a proprio_dim (env.image or env.proprio true).")
        if self.act_dim < 1:
            raise ConfigError(f"ObsSpec: act_dim={self.act_dim} must be >= 1.")


def dtype_of(cfg: Config) -> Any:
    return jnp.bfloat16 if cfg.model.compute_dtype == "bfloat16" else jnp.float32


class WorldModel(nnx.Module):
    """Encoder(s), RSSM and the reconstruction, reward, continue and competence heads."""

    def __init__(self, cfg: Config, spec: ObsSpec, rngs: nnx.Rngs):
        m, dt = cfg.model, dtype_of(cfg)
        hb = m.hidden_bias
        self.cfg, self.spec = cfg, spec
        embed = 0
        cnn = vec_enc = None
        if spec.image_shape is not None:
            h, w, c = spec.image_shape
            if h != w:
                raise ConfigError(f"image_shape={spec.image_shape}: images must be square (env.image_size).")
            cnn = ConvEncoder(c + (1 if m.task_channel else 0), m.depth, h, rngs, dt)
            embed += cnn.out_dim
        if spec.proprio_dim is not None:
            vec_enc = MLP(spec.proprio_dim, m.units, m.mlp_layers, None, rngs, dt, hidden_bias=hb)
            embed += m.units
        self.cnn, self.vec_enc = nnx.data(cnn), nnx.data(vec_enc)
        self.rssm = RSSM(m.deter, m.hidden, m.stoch, m.classes, m.blocks, spec.act_dim, embed, m.unimix, rngs, dt,
                         hidden_bias=hb)
        feat = m.deter + m.stoch * m.classes
        self.feat_dim = feat
        self.img_dec = ConvDecoder(feat, spec.image_shape[-1], m.depth, spec.image_shape[0], rngs, dt) \
            if spec.image_shape is not None else None
        self.vec_dec = MLP(feat, m.units, m.mlp_layers, spec.proprio_dim, rngs, dt, hidden_bias=hb) \
            if spec.proprio_dim is not None else None
        self.reward_head = MLP(feat, m.units, m.head_layers, m.bins, rngs, dt, out_scale=0.0, hidden_bias=hb)
        self.cont_head = MLP(feat, m.units, m.head_layers, 1, rngs, dt, hidden_bias=hb)
        # The Dreamer baseline is the same model without the self-awareness head and loss (MUSE §3.2).
        self.has_competence = cfg.agent == "muse"
        self.competence_head = MLP(feat, m.units, m.head_layers, m.competence_quantiles, rngs, dt,
                                   hidden_bias=hb) \
            if self.has_competence else None

    # --------------------------------------------------------------------- pieces

    def encode(self, obs: Batch) -> jax.Array:
        """Observation dict with any leading dims [...] -> embedding [..., E]."""
        outs = []
        lead = None
        if self.cnn is not None:
            img = obs.get("image")
            if img is None:
                raise ValueError("batch has no 'image' but the model was built with images (env.image=true).")
            lead = img.shape[:-3]
            x = img.reshape(-1, *img.shape[-3:]).astype(jnp.float32) / 255.0 - 0.5
            if self.cfg.model.task_channel:
                tid = jnp.broadcast_to(jnp.asarray(obs["task_id"], jnp.float32).reshape(-1, 1, 1, 1),
                                       (*x.shape[:-1], 1))
                x = jnp.concatenate([x, tid], -1)
            outs.append(self.cnn(x).astype(jnp.float32))
        if self.vec_enc is not None:
            vec = obs.get("proprio")
            if vec is None:
                raise ValueError("batch has no 'proprio' but the model was built with it (env.proprio=true).")
            lead = vec.shape[:-1]
            x = dists.symlog(vec.reshape(-1, vec.shape[-1]).astype(jnp.float32))
            outs.append(self.vec_enc(x).astype(jnp.float32))
        e = jnp.concatenate(outs, -1)
        return e.reshape(*lead, e.shape[-1])

    def competence_logits(self, feat: jax.Array) -> jax.Array:
        if self.competence_head is None:
            raise ValueError("this is a Dreamer model (agent: dreamer): it has no self-awareness head.")
        return self.competence_head(feat).astype(jnp.float32)

    def competence_probs(self, feat: jax.Array) -> jax.Array:
        """psi_1..psi_N = sigmoid(head(s)) [..., N]; zeros for a Dreamer model, which has no head."""
        if self.competence_head is None:
            return jnp.zeros((*feat.shape[:-1], self.cfg.model.competence_quantiles), jnp.float32)
        return jax.nn.sigmoid(self.competence_logits(feat))

    def reward(self, feat: jax.Array) -> jax.Array:
        """Expected reward (two-hot decode) [...]."""
        return dists.twohot_decode(self.reward_head(feat), dists.twohot_bins(self.cfg.model.bins))

    def cont_prob(self, feat: jax.Array) -> jax.Array:
        """Probability the episode continues [...]."""
        return jax.nn.sigmoid(self.cont_head(feat)[..., 0].astype(jnp.float32))

    # --------------------------------------------------------------------- loss

    def loss(self, batch: Batch, key: jax.Array) -> tuple[jax.Array, tuple[dict[str, jax.Array], dict]]:
        """Total world-model loss, (metrics, posterior states [B,T,...] with gradients, for imagination
        starts and the replay value loss)."""
        cfg, lw = self.cfg, self.cfg.loss
        action = jnp.asarray(batch["action"], jnp.float32)
        B, T = action.shape[:2]
        is_first = jnp.asarray(batch["is_first"], bool)
        embed = self.encode(batch)
        loops = loops_for(self.cfg, jax.default_backend())  # `auto`: the backend's measured setting
        _, post = self.rssm.observe(self.start_state(batch), action, embed, is_first, key,
                                   unroll=loops.observe_unroll, remat=loops.observe_remat,
                                   param_grads_after=loops.observe_param_grads == "after_loop")
        feat = feature(post["deter"], post["stoch"]).reshape(B * T, -1)
        losses: dict[str, jax.Array] = {}
        if self.img_dec is not None:
            target = jnp.asarray(batch["image"]).reshape(B * T, *self.spec.image_shape).astype(jnp.float32) / 255.0
            recon = self.img_dec(feat)
            losses["image"] = ((recon - target) ** 2).sum((-3, -2, -1)).mean()
        else:
            losses["image"] = jnp.zeros((), jnp.float32)
        if self.vec_dec is not None:
            target = dists.symlog(jnp.asarray(batch["proprio"], jnp.float32).reshape(B * T, -1))
            losses["proprio"] = ((self.vec_dec(feat).astype(jnp.float32) - target) ** 2).sum(-1).mean()
        else:
            losses["proprio"] = jnp.zeros((), jnp.float32)
        bins = dists.twohot_bins(cfg.model.bins)
        reward = jnp.asarray(batch["reward"], jnp.float32).reshape(B * T)
        losses["reward"] = dists.twohot_loss(self.reward_head(feat), reward, bins).mean()
        cont = 1.0 - jnp.asarray(batch["is_terminal"], jnp.float32).reshape(B * T)
        losses["cont"] = dists.binary_cross_entropy(self.cont_head(feat)[:, 0], cont).mean()
        if self.has_competence:
            labels = competence_labels(jnp.asarray(batch["time_to_success"], jnp.float32).reshape(B * T),
                                       agent_steps_per_episode(cfg.env), cfg.model.competence_quantiles)
            comp_logits = self.competence_logits(feat)
            losses["competence"] = dists.binary_cross_entropy(comp_logits, labels).sum(-1).mean()
        else:
            losses["competence"] = jnp.zeros((), jnp.float32)
        dyn, rep, kl = dists.kl_losses(post["post"], post["prior"], lw.free_nats)
        losses["dyn"], losses["rep"] = dyn.mean(), rep.mean()
        total = (lw.image * losses["image"] + lw.proprio * losses["proprio"] + lw.reward * losses["reward"]
                 + lw.cont * losses["cont"] + lw.competence * losses["competence"]
                 + lw.dyn * losses["dyn"] + lw.rep * losses["rep"])
        metrics = {f"loss/{k}": v for k, v in losses.items()}
        metrics["loss/model"] = total
        metrics["kl"] = kl.mean()
        if self.has_competence:
            metrics["competence_acc"] = ((comp_logits > 0) == (labels > 0.5)).mean()
        starts = dict(deter=post["deter"], stoch=post["stoch"], cont=cont.reshape(B, T))
        return total, (metrics, starts)

    def start_state(self, batch: Batch) -> dict[str, jax.Array]:
        """The state a chunk is filtered from: the stored posterior latent of the step before it when the
        batch carries one (`start_deter` [B, D], `start_stoch` [B, S] class indices; dreamerv3
        `replay_context`), else zeros. Where
        the chunk's first step is an episode start, `is_first` resets it to zeros either way."""
        if "start_deter" not in batch:
            return self.rssm.initial(jnp.asarray(batch["action"]).shape[0])
        stoch = jax.nn.one_hot(jnp.asarray(batch["start_stoch"], jnp.int32), self.rssm.classes, dtype=jnp.float32)
        return dict(deter=jnp.asarray(batch["start_deter"], jnp.float32), stoch=stoch)
