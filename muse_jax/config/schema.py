"""The schema of a MUSE world-model run: frozen dataclasses, one docstring and one set of allowed values
per field.

Types (and `Literal` choices) are checked when a config is loaded (`muse_jax.config.load`); ranges that
types cannot express are `Allowed` rules kept beside their field (`setting(default, Allowed(...), ...)`) and are
checked by `validate`, one loop over every field, whenever a `Config` is built. A rule may name sibling
fields of its section (`model.deter` a multiple of `model.blocks`). The machinery (rules, coercion,
errors) is `muse_common.settings`; this module holds only the dataclasses and the size presets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from muse_common import settings
from muse_common.settings import (  # noqa: F401 - the rule helpers fields are written with (re-exported)
    Allowed,
    at_most,
    integer_at_least,
    number_above,
    number_at_least,
    setting,
    to_plain,
)
from muse_common.settings import finite as _finite
from muse_jax.agent_kinds import AgentKind
from muse_jax.envs.metaworld_tasks import MT10_TASKS, NOVEL_TASKS

UNROLL_RULE = Allowed(lambda v, _: v == "auto" or (isinstance(v, int) and v >= 1), "auto or an integer >= 1")
"""A scan's `unroll`: `auto` (the backend's measured setting, `muse_jax/config/loops.py`) or steps per loop
iteration."""

# DreamerV3 model size presets, same numbers as danijar/dreamerv3 configs.yaml, plus CPU test sizes.
MODEL_SIZES: dict[str, dict[str, int]] = {
    "nano": dict(deter=32, hidden=16, classes=4, stoch=4, blocks=4, depth=4, units=16),
    "tiny": dict(deter=128, hidden=32, classes=8, stoch=8, blocks=4, depth=8, units=64),
    "size1m": dict(deter=512, hidden=64, classes=4, depth=4, units=64),
    "size12m": dict(deter=2048, hidden=256, classes=16, depth=16, units=256),
    "size25m": dict(deter=3072, hidden=384, classes=24, depth=24, units=384),
    "size50m": dict(deter=4096, hidden=512, classes=32, depth=32, units=512),
    "size100m": dict(deter=6144, hidden=768, classes=48, depth=48, units=768),
    "size200m": dict(deter=8192, hidden=1024, classes=64, depth=64, units=1024),
    "size400m": dict(deter=12288, hidden=1536, classes=96, depth=96, units=1536),
}


class ConfigError(settings.SettingsError):
    """A configuration problem, with the offending key and the allowed values in the message."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """World-model and head architecture (DreamerV3 naming)."""

    size: str = setting("size1m", Allowed(lambda v, _: v in MODEL_SIZES, f"a preset, one of {list(MODEL_SIZES)}"))
    """Preset from MODEL_SIZES that fills deter/hidden/classes/depth/units unless they are set."""
    deter: int = setting(512,
        at_most(16_384, "the widest DreamerV3 preset (size400m) uses 6144; more does not fit an accelerator's memory"),
        integer_at_least(1),
                         Allowed(lambda v, m: m.blocks < 1 or v % m.blocks == 0,  # blocks < 1: its own rule says so
                                 "a multiple of model.blocks={blocks}"))
    """Width of the deterministic (block GRU) state h."""
    hidden: int = setting(64,
        at_most(16_384, "the widest DreamerV3 preset (size400m) uses 6144; more does not fit an accelerator's memory"),
        integer_at_least(1))
    """Width of the RSSM's internal MLP layers."""
    stoch: int = setting(32, at_most(1_024, "the presets use 32 to 64 latents"), integer_at_least(1))
    """Number of categorical latents in z."""
    classes: int = setting(4, at_most(1_024, "the presets use 4 to 64 classes"), integer_at_least(1))
    """Classes per categorical latent."""
    blocks: int = setting(8, at_most(256, "deter is split into at most this many blocks"), integer_at_least(1))
    """Blocks of the block-diagonal GRU; deter must be divisible by it."""
    depth: int = setting(4, at_most(1_024, "the CNN width; presets use 16 to 128"), integer_at_least(1))
    """Base channel count of the CNN encoder/decoder."""
    units: int = setting(64,
        at_most(16_384, "the widest DreamerV3 preset (size400m) uses 6144; more does not fit an accelerator's memory"),
        integer_at_least(1))
    """Width of MLPs (encoder, decoder, heads, actor, critic)."""
    mlp_layers: int = setting(3, at_most(64, "presets use 1 to 5"), integer_at_least(1))
    """Hidden layers of the vector encoder/decoder, actor and critic."""
    head_layers: int = setting(1, at_most(64, "presets use 1 to 5"), integer_at_least(0))
    """Hidden layers of the reward, continue and competence heads."""
    unimix: float = setting(0.01, Allowed(lambda v, _: 0.0 <= v < 1.0, "0 <= unimix < 1"))
    """Uniform mixture for categorical latents and discrete actions (1%)."""
    bins: int = setting(255, at_most(4_095, "the two-hot support has 255 bins"),
                             Allowed(lambda v, _: v >= 3 and v % 2 == 1, "an odd integer >= 3"))
    """Bins of the symlog two-hot reward and value heads."""
    competence_quantiles: int = setting(5, at_most(100, "one per percent at most"),
                                           Allowed(lambda v, _: v >= 1, "N >= 1"))
    """N, the number of time-to-success quantiles the self-awareness head predicts."""
    competence_reading: Literal["steps_left", "from_start"] = "steps_left"
    """Which time to success the quantile labels take (MUSE §3.1.1 leaves it open; `muse_jax/competence.py`):
    `steps_left` (the default, and what runs saved without the key did), the steps left from the current
    step to the episode's first success, so the label tightens as success nears; `from_start`, the first
    success's step index from the episode start, the same label at every step of the episode. psi_1 is
    the same under both; the labels are stored with the replay's episodes, so a resume must keep it.
    Measured on the quickstart: docs/competence_reading_quickstart.json."""
    image_channels: int = 3
    """RGB channels; the task-id channel is appended on top of these."""
    task_channel: bool = True
    """Append the integer task id as an extra image channel (MUSE §3.2.1)."""
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    """Activation dtype; parameters stay float32."""
    observe_unroll: int | Literal["auto"] = setting("auto", UNROLL_RULE)
    """Posterior-filtering steps per iteration of the observe `lax.scan` loop over the replayed sequence
    (XLA `unroll`): speed only, the same numbers. `auto` (the default): 8 on a GPU, 1 elsewhere
    (`muse_jax/config/loops.py`; measured in docs/speed.md). Runs saved before `auto` hold 1."""
    observe_remat: Literal["auto", "none", "dots", "nothing"] = "auto"
    """What the observe scan keeps per step for its backward pass: "none" keeps every intermediate (each
    written into a [T, ...] buffer, most of the scan body's kernels on a GPU); "dots" keeps the matmul
    outputs and recomputes the elementwise ops in the backward pass (`jax.checkpoint` with
    `checkpoint_policies.dots_saveable`); "nothing" recomputes the whole step. Speed only, the same numbers.
    `auto` (the default): "dots" on a GPU, "none" elsewhere (`muse_jax/config/loops.py`)."""
    observe_param_grads: Literal["auto", "in_loop", "after_loop"] = "auto"
    """Where the observe scan's backward pass takes the RSSM parameters' gradient: "in_loop" (plain
    `lax.scan` autodiff: each step adds its own weight gradients, small matmuls and reductions of 16 rows);
    "after_loop" (the loop carries only the state's cotangent, and the parameter gradient is one batched
    vector-Jacobian product over all T steps after it: `muse_jax/scan_grads.py`). Speed only, the same
    numbers to float32 reordering. `auto` (the default): "after_loop" on a GPU, "in_loop" elsewhere."""
    hidden_bias: bool = True
    """Give every hidden Linear layer (MLP layers of encoder, decoder, heads, actor, critic; the RSSM's
    prior/posterior layers and GRU input embeddings) a zero-initialised bias, as dreamerv3 3.3.1 does
    (`nets.Linear(bias=True)`). The default since 2026-11-26; before, the layers had none (a departure,
    docs/official_comparison.md difference 8), and RMSNorm has no shift, so each layer was blind to the
    size of its input (the GRU's action embedding mapped a and a/4 to the same state). On reach-v3 the
    biases alone closed this project's lag behind the official on both seeds run
    (docs/experiments/does-it-learn.md). Runs saved
    without the key resume with it off (`KEYS_ADDED_WITH_OLD_BEHAVIOUR`); runs saved with it off are
    refused on resume unless `--set model.hidden_bias=false` is given. Conv layers keep no bias either way."""


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """World-model loss weights: MUSE eq. 2-3, L_pred + 1.0 L_dyn + 0.1 L_rep, every prediction term at 1.

    MUSE eq. 2 gives the dynamics KL weight 1.0, as current danijar/dreamerv3 configs.yaml does
    (`loss_scales.dyn: 1.0`; its 2023 release used 0.5). The competence head's BCE is one more
    prediction term of L_pred (weight 1)."""

    dyn: float = setting(1.0, number_at_least(0))
    """Weight of the dynamics KL (prior towards stop-grad posterior); MUSE eq. 2."""
    rep: float = setting(0.1, number_at_least(0))
    """Weight of the representation KL (posterior towards stop-grad prior)."""
    free_nats: float = setting(1.0, number_at_least(0))
    """Free bits: KL terms below this many nats are clipped (no gradient)."""
    image: float = setting(1.0, number_at_least(0))
    """Image reconstruction (MSE) weight."""
    proprio: float = setting(1.0, number_at_least(0))
    """Proprioceptive reconstruction (symlog MSE) weight."""
    reward: float = setting(1.0, number_at_least(0))
    """Reward head (symlog two-hot cross-entropy) weight."""
    cont: float = setting(1.0, number_at_least(0))
    """Continue head (Bernoulli) weight."""
    competence: float = setting(1.0, number_at_least(0))
    """Self-awareness head (N binary cross-entropies) weight."""
    policy: float = setting(1.0, number_at_least(0))
    """Actor loss scale in the one folded loss (dreamerv3 `loss_scales.policy`)."""
    value: float = setting(1.0, number_at_least(0))
    """Critic loss scale on imagined returns (dreamerv3 `loss_scales.value`)."""
    repval: float = setting(0.3, number_at_least(0))
    """Critic loss scale on lambda-returns along the replayed sequence (dreamerv3 `loss_scales.repval`,
    `repval_loss: True`, `repval_grad: True`: its gradient also reaches the world model)."""


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """One LaProp optimiser over world model, actor and critic (danijar/dreamerv3 `agent.opt`, `_make_opt`).

    Source: current danijar/dreamerv3 configs.yaml `opt: {lr: 4e-5, agc: 0.3, eps: 1e-20, beta1: 0.9,
    beta2: 0.999, momentum: True, warmup: 1000}` with `separate_lrs: False`; the chain is built in
    `agent.make_optimizer`. (The 2023 release used three Adams with 1e-4 / 3e-5 / 3e-5.)
    """

    lr: float = setting(4e-5, number_above(0), at_most(3.4e38, "the largest float32; a rate this large only "
                                                         "forces a NaN loss, which stops the run in one line"))
    """Learning rate after warm-up (dreamerv3 `opt.lr`)."""
    agc: float = setting(0.3, Allowed(lambda v, _: _finite(v) and v >= 0, "a finite number >= 0 (0 = no clipping)"))
    """Adaptive gradient clipping: each tensor's update norm <= agc * max(agc_pmin, its parameter norm)."""
    agc_pmin: float = setting(1e-3, number_above(0))
    """Parameter-norm floor of the adaptive clipping (dreamerv3 `clip_by_agc(pmin=1e-3)`)."""
    eps: float = setting(1e-20, number_above(0))
    """Epsilon added to the RMS (outside the square root, as dreamerv3 `scale_by_rms`)."""
    beta1: float = setting(0.9, Allowed(lambda v, _: 0.0 <= v < 1.0, "0 <= beta < 1"))
    """Momentum decay, applied after RMS normalisation (LaProp order)."""
    beta2: float = setting(0.999, Allowed(lambda v, _: 0.0 <= v < 1.0, "0 <= beta < 1"))
    """Decay of the squared-gradient average."""
    warmup: int = setting(1000, at_most(10**9, "updates; a run has fewer"), integer_at_least(0))
    """Optimiser steps of linear learning-rate warm-up from 0."""


@dataclasses.dataclass(frozen=True)
class BehaviorConfig:
    """DreamerV3 actor-critic learned in imagination (the baseline, and MUSE's base policy).

    Every default is current danijar/dreamerv3 configs.yaml (`imag_length`, `horizon`, `imag_loss`,
    `repl_loss`, `slowvalue`, `retnorm`, `policy`). Kept differences, with reasons:
    - `contdisc: True` folds the discount into the continue head's target; here the continue head
      predicts 1 - is_terminal (the MUSE loss names it so) and the discount multiplies it in
      imagination, which gives the same returns and weights (up to one constant factor gamma).
    - `valnorm`/`advnorm` are `none` in dreamerv3 and absent here (identity).
    """

    imag_horizon: int = setting(15, at_most(1_000, "imagined steps held in memory at once"), integer_at_least(1))
    """Imagination horizon (dreamerv3 `imag_length: 15`)."""
    imag_unroll: int | Literal["auto"] = setting("auto", UNROLL_RULE)
    """Imagination steps per iteration of its `lax.scan` loop (XLA `unroll`): speed only, the same numbers.
    `auto` (the default): the whole horizon on a GPU, 1 elsewhere (`muse_jax/config/loops.py`; measured in
    docs/speed.md). Runs saved before `auto` hold 1."""
    lam: float = setting(0.95, Allowed(lambda v, _: 0.0 <= v <= 1.0, "0 <= lam <= 1"))
    """Lambda of the lambda-returns, imagined and replayed (dreamerv3 `imag_loss.lam`, `repl_loss.lam`)."""
    horizon: float = setting(333.0, at_most(1000000.0, "a return horizon of a million steps is already undiscounted"),
                                    number_at_least(1))
    """Discount horizon; discount = 1 - 1/horizon (dreamerv3 `horizon: 333`)."""
    actent: float = setting(3e-4, number_at_least(0))
    """Entropy regulariser scale (dreamerv3 `imag_loss.actent`)."""
    slow_rate: float = setting(0.02, Allowed(lambda v, _: _finite(v) and 0 < v <= 1, "0 < slow_rate <= 1"))
    """EMA rate of the slow critic, updated every step (dreamerv3 `slowvalue: {rate: 0.02, every: 1}`)."""
    slowreg: float = setting(1.0, number_at_least(0))
    """Weight of the critic's regulariser towards the slow critic (dreamerv3 `imag_loss.slowreg`)."""
    retnorm_low: float = setting(5.0, Allowed(lambda v, b: 0 <= v < b.retnorm_high <= 100,
                                              "0 <= retnorm_low < retnorm_high <= 100"))
    """Lower percentile of return normalisation (dreamerv3 `retnorm.perclo`)."""
    retnorm_high: float = 95.0
    """Upper percentile of return normalisation (dreamerv3 `retnorm.perchi`)."""
    retnorm_rate: float = setting(0.01, Allowed(lambda v, _: _finite(v) and 0 < v <= 1, "0 < retnorm_rate <= 1"))
    """EMA rate of the return percentiles, not debiased (dreamerv3 `retnorm: {rate: 0.01, debias: False}`)."""
    retnorm_limit: float = setting(1.0, number_above(0))
    """Minimum scale of return normalisation (dreamerv3 `retnorm.limit`)."""
    min_std: float = setting(0.1, Allowed(lambda v, b: 0 < v <= b.max_std, "0 < min_std <= max_std"))
    """Minimum std of the continuous action distribution (dreamerv3 `policy.minstd`)."""
    max_std: float = 1.0
    """Maximum std of the continuous action distribution (dreamerv3 `policy.maxstd`)."""
    policy_outscale: float = 0.01
    """Scale of the actor's output-layer init (dreamerv3 `policy.outscale: 0.01`): near-uniform first policy."""
    split_policy_out: bool = False
    """Mean and std of the actor from two output layers, as dreamerv3's `bounded_normal` head (`heads.py`:
    `mean` and `stddev` Linear), instead of one layer with 2A outputs. Same numbers at init; the
    optimiser's per-tensor AGC then clips the mean and std gradients apart, as the official does. Off by
    default: every committed curve and checkpoint has the one layer (docs/official_comparison.md, 9)."""


@dataclasses.dataclass(frozen=True)
class RegulationConfig:
    """Self-regulation (MUSE §3.1.2): how MUSE turns competence into actions."""

    strategy: Literal["gradient", "rollouts", "mcts", "none", "mean"] = "gradient"
    """(c) gradient ascent on the model state (Algorithm 1), (a) sampled rollouts, (b) MCTS, or off: "none"
    acts with the plain actor's sample and "mean" with its mean action (no exploration noise), the two
    controls a regulation strategy is measured against (`benchmarks/regulation_effect.py`)."""
    horizon: int = setting(10, at_most(1_000, "imagined steps held in memory per decision: 1e9 exhausted memory"),
                               integer_at_least(1))
    """H, the rollout horizon of Algorithm 1 (also used by rollouts and MCTS depth)."""
    beta: float = setting(0.02, number_at_least(0))
    """Step size of the gradient ascent on s = (h, z) (MUSE Algorithm 1: 0.02). Measured closed loop on the
    quickstart model (benchmarks/regulation_effect.py, docs/self-regulation.md): at 0.02 the ascent changes
    no outcome against beta = 0, and no reading beats the noisy plain actor. The defaults of this section
    are therefore Algorithm 1 as written."""
    num_rollouts: int = setting(16, at_most(4_096, "rollouts held in memory per decision"), integer_at_least(1))
    """(a) Number of sampled imagined rollouts."""
    mcts_simulations: int = setting(32, at_most(100_000, "simulations per decision; each is a model step"),
                                        integer_at_least(1))
    """(b) Simulations per decision."""
    mcts_branching: int = setting(4, at_most(64, "actions sampled per node"), integer_at_least(1))
    """(b) Candidate actions sampled from the policy at each node."""
    mcts_c: float = setting(1.0, number_at_least(0))
    """(b) Unused since MCTS selects by the self-awareness criterion in place of UCB (§3.1.2); kept so old
    configs load."""
    carry_regulated_state: bool = setting(False, Allowed(
        lambda v, r: not v or r.z_source == "posterior",
        "false unless regulation.z_source is posterior: with z drawn from the prior, a carried regulated state "
        "never sees an observation (open loop); set regulation.carry_regulated_state=false"))
    """Whether the acting chain carries the ascended s: h_{t+1} = f(s, a_t). Off (the default): every step
    starts Algorithm 1 from the filtered state h_t of the posterior chain, which has seen every observation so
    far ("observes the resulting recurrent state"), so the policy is closed-loop. On is allowed only with
    `z_source: posterior`, where the carried chain still takes z_{t+1} from the next observation; with the
    prior z nothing observed would ever reach the actions (measured: two observation streams gave identical
    actions over 20 steps). Either way the self-awareness signal scored in Table 1 comes from the filtering
    chain (the model's honest belief; `agent.policy_step`)."""
    z_source: Literal["prior", "posterior"] = "prior"
    """Where Algorithm 1's z_t comes from: "prior" samples z_t ~ p(z_t | h_t) as the algorithm writes it (h_t
    is the filtered state, so the action depends on the observations up to x_{t-1}); "posterior" starts from
    the filtered z_t ~ q(z_t | h_t, x_t), which has also seen the current observation."""
    rollout: Literal["forward", "in_place"] = "forward"
    """"forward": Algorithm 1 as written, each of the H ascent steps follows a ~ pi(s), h <- f(s, a), so the
    acting state lies H imagined steps ahead; "in_place": the H ascent steps act on the current s only (no
    model step), so regulation moves the current belief and nothing else."""
    step: Literal["fixed", "normalized"] = "fixed"
    """Eq. 4's step: "fixed" s += beta * grad (as written); "normalized" s += beta * grad / |grad| (a step of
    length beta whatever the gradient's scale)."""
    effect_diagnostics: bool = True
    """Whether each Algorithm 1 decision also measures what the ascent itself changed and why
    (`regulation_ascent_state_change`, `regulation_ascent_action_change`, `regulation_grad_norm`,
    `regulation_actor_jacobian_norm`, `regulation_actor_mean_abs` in records and results): the same loop
    run again with beta = 0, the gradient and the actor's Jacobian at the final state. They change no
    action or state; off, a decision skips that work (docs/speed.md) and those keys are absent."""


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Environments: Meta-World (MUSE's setting), DeepMind Control or any gymnasium Box env (`suite`)."""

    suite: Literal["metaworld", "dmc", "gym"] = "metaworld"
    """Which environment suite `tasks` come from, behind one observation contract (`muse_jax.envs.suite`):
    - `metaworld`: Meta-World v3 MT1 tasks (`reach-v3`), success from the env; MUSE's setting.
    - `dmc`: dm_control suite tasks spelled domain-task (`cartpole-swingup`, `walker-walk`); DreamerV3's DMC
      setting is this suite's preset (used unless the config sets the key): action_repeat 2,
      max_episode_steps 1000 frames (the suite's time limit, no termination), image false (proprio), camera -1.
    - `gym`: any registered gymnasium id with Box observations and actions (`InvertedPendulum-v5`), proprio
      only; preset max_episode_steps 0 (the env's registered time limit), action_repeat 1.
    DMC and gym run one task per run and define no success, which MUSE's competence head learns from: there
    `agent` must be `dreamer` (MUSE is refused with one line, nothing is invented), success rates are null,
    and `muse-wm adapt` stays Meta-World only."""
    tasks: tuple[str, ...] = setting(MT10_TASKS, Allowed(lambda v, _: len(v) >= 1, "at least one task"),
                                     Allowed(lambda v, _: len(set(v)) == len(v), "each task once (a task named "
                                             "twice would be trained twice as often, silently)"))
    """Pre-training tasks (task ids 1..len(tasks) in the image channel); names as the suite spells them."""
    novel_tasks: tuple[str, ...] = NOVEL_TASKS
    """Adaptation tasks (task-id channel 0)."""
    image: bool = setting(True, Allowed(lambda v, e: v or e.proprio, "true, or env.proprio true (at least one input)"))
    """Render 64x64 RGB observations; False = proprio-only (cheap)."""
    proprio: bool = True
    """Include the 39-dim proprioceptive vector."""
    image_size: int = setting(64, at_most(512, "pixels per side; the encoder is built for 64"),
                                  Allowed(lambda v, _: v >= 16 and v % 16 == 0, "a multiple of 16"))
    """Rendered image side in pixels."""
    max_episode_steps: int = setting(500, Allowed(lambda v, e: v >= 1 or (v == 0 and e.suite == "gym"),
                                                  "an integer >= 1 (0 = the env's own limit, env.suite gym only)"))
    """Episode length L in env frames, before action repeat (also the time-to-success normaliser)."""
    num_envs: int = setting(4, at_most(4_096, "env processes"), integer_at_least(1))
    """Parallel environments."""
    vector: Literal["async", "sync"] = "async"
    """gymnasium vector env mode: async runs each env in its own process."""
    render_backend: Literal["egl", "osmesa", "glfw"] = "egl"
    """MUJOCO_GL backend; set before mujoco is imported."""
    camera: str = "corner2"
    """Camera: Meta-World's camera name (corner cameras are flipped upright and corner2 is moved closer); for
    DMC an integer camera id, -1 = dreamerv3's default per domain."""
    action_repeat: int = setting(1, at_most(1_000, "frames per action"), integer_at_least(1))
    """Env steps per agent action."""


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """Sequence replay."""

    capacity: int = setting(1_000_000, at_most(10**8, "steps held in host memory"),
                                       Allowed(lambda v, r: v >= r.seq_len, "at least replay.seq_len={seq_len}"))
    """Maximum stored env steps; the oldest episodes are evicted first."""
    batch_size: int = setting(16, integer_at_least(1),
                              Allowed(lambda v, r: v * r.seq_len <= r.capacity,
                                      "at most replay.capacity / replay.seq_len = {capacity} / {seq_len} sequences "
                                      "(a batch must fit in the replay)"),
                              at_most(16_384, "sequences per update on one device"))
    """B, sequences per train batch (global, split over devices)."""
    seq_len: int = setting(64, at_most(4_096, "steps per replayed sequence"), integer_at_least(2))
    """T, length of each sampled chunk."""
    context: bool = True
    """Start each chunk from the stored posterior latent of the step before it instead of zeros
    (dreamerv3 `replay_context: 1`); needs episodes stored with `deter`/`stoch` (the collector does)."""
    online: bool = False
    """Fill each pre-training batch first with the fresh chunks of newly finished episodes, each trained on
    once right after it arrives, then uniformly (dreamerv3 `replay.online: True`; `replay.py` states the
    departures: chunks are queued when their episode ends, within it). Off by default here: the figures
    in docs/experiments were measured with uniform sampling. Adaptation always samples uniformly (its task
    replays start with the retained pre-training episodes, which are not fresh)."""
    unfinished: bool = False
    """Pre-training also samples the envs' unfinished episodes so far, and training starts once replay holds
    B * T chunk starts (dreamerv3's replay holds every step as it arrives and its `Ratio` starts at
    `len(replay) >= batch_size * batch_length` items: ~1.3k agent steps on DMC with 4 envs, where waiting for
    finished episodes starts at 2k). Dreamer only: an unfinished episode's outcome, and so its competence
    labels, is unknown. Off by default: the figures in docs/experiments were measured without it."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Pre-training schedule."""

    env_steps: int = setting(2_000_000, at_most(10**10, "agent steps; the paper's longest runs use 10^8"),
                                        integer_at_least(1))
    """Total environment steps of pre-training."""
    train_ratio: float = setting(512.0, at_most(10_000, "replayed steps per agent step; the paper's largest is 1024"),
                                        number_above(0))
    """Replayed steps per env step: train_ratio / (B * T) grad steps per env step, counted from the first
    train step, which comes once replay holds one batch (dreamerv3 `Ratio`, `train_driver.TrainRatio`)."""
    prefill: int = setting(5000, at_most(10**8, "random steps before training"), integer_at_least(0))
    """Env steps acted with a uniform random policy at the start. Training does not wait for it: it starts
    once replay holds one batch, as in dreamerv3."""
    log_every: int = setting(1000, at_most(10**10, "agent steps"), integer_at_least(1))
    """Env steps between metrics lines."""
    sa_window: int = setting(64, at_most(100_000, "episodes held for the sa/* metrics"), integer_at_least(1))
    """Self-awareness logged while pre-training (`sa/*` in metrics.jsonl): AUROC, accuracy and quantile
    accuracy over the agent's most recent `sa_window` finished episodes, per task and overall."""
    save_every: int = setting(10000, at_most(10**10, "agent steps"), integer_at_least(1))
    """Env steps between checkpoints."""
    keep_checkpoints: int = setting(2, at_most(1_000, "checkpoints kept on disk"), integer_at_least(1))
    """Checkpoints kept on disk."""
    overlap_collect: bool = False
    """Act while the learner trains (DreamerV3's driver acts with parameters a little behind the learner's):
    right after each env step the policy for the next step is dispatched with the learner state of that
    moment, before that step's train steps, so the envs step while the train steps run on the device.
    When the policy's parameters are refreshed: the step acting at loop tick k uses the learner state after
    the train calls of ticks 0..k-2 (one train call staler than without overlap, where it is ticks 0..k-1);
    the first tick of a run and the first after a resume act with the state at hand (the restored one).
    Deterministic for a seed, resumes like any run. Off by default: the figures in docs/experiments were
    measured without it (docs/speed.md, "Acting while training", has the speed it buys)."""
    seed: int = setting(0, Allowed(lambda v, _: 0 <= v < 2**31, "an integer from 0 to 2147483647"))
    """Global seed."""


ADAPT_EPISODES_MAX = 100_000
"""The most adaptation episodes per novel task (`adapt.episodes`, and `muse-wm adapt --episodes`)."""


@dataclasses.dataclass(frozen=True)
class AdaptConfig:
    """Adaptation to novel tasks (MUSE §3.2.1)."""

    episodes: int = setting(20, at_most(ADAPT_EPISODES_MAX, "episodes per novel task"), integer_at_least(1))
    """Adaptation episodes per novel task."""
    train_ratio: float = setting(512.0, at_most(10_000, "replayed steps per agent step; the paper's largest is 1024"),
                                        number_above(0))
    """Replayed steps per env step during adaptation."""
    novel_fraction: float | None = setting(None, Allowed(lambda v, _: v is None or 0.0 <= v <= 1.0,
                                                         "null (uniform over the retained buffer) or 0..1"))
    """Share of each adaptation batch drawn from the novel task's own episodes. null (default; the paper is
    silent): uniform chunks over the retained pre-training buffer plus the new episodes, so the novel task is
    only its share of stored steps (paper setting: at most 20 x 500 / 2M = 0.5%; quickstart: at most
    375 / 8375 = 4.5%). A number f: round(f * B) chunks from the novel episodes (once one is long enough),
    the rest from the pre-training episodes (`adapt.sample_batch`)."""
    parallel_tasks: bool = True
    """Adapt all novel tasks side by side (learner states stacked, policy and train steps vmapped over the
    task axis, one env per task); False = one task after another. Either way each task adapts on its own,
    episode after episode (MUSE §3.2.1)."""
    overlap_collect: bool = False
    """Act while the learner trains, as `train.overlap_collect` does in pre-training (the same `RunLoop`): after
    each task step the policy for the next step is dispatched with the learner state of that moment, before
    that step's train steps. The step acting at loop tick k then uses the state after the train calls of
    ticks 0..k-2 (without overlap: 0..k-1), so the first action of an episode is chosen before the train steps
    owed at the end of the previous one have updated the weights it acts with; they have still run before it
    acts, and the records' counters are the same. A resumed run's first tick acts with the restored state.
    Off by default: the adaptation figures in docs/experiments were measured without it."""


@dataclasses.dataclass(frozen=True)
class ParallelConfig:
    """Devices and hosts."""

    param_sharding: Literal["replicated", "fsdp"] = setting(
        "replicated", Allowed(lambda v, p: v == "replicated" or not p.distributed,
                              "'replicated' when parallel.distributed is true (each host acts and checkpoints with "
                              "a whole copy of the parameters)"))
    """Replicate parameters on every device, or shard large ones over the data axis."""
    distributed: bool = False
    """`muse-wm pretrain` joins a multi-host `jax.distributed` job (`parallel.init_distributed`: coordinator from
    JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID, or SLURM / Open MPI detected); each process
    writes to its own run folder (`parallel.process_logdir`)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """A whole MUSE world-model run."""

    name: str = "default"
    """Name of the configuration (for logs)."""
    agent: AgentKind = setting("muse", Allowed(
        lambda v, c: v != "muse" or c.env.suite == "metaworld",
        "'dreamer' when env.suite is dmc or gym (MUSE's competence head learns from a task success signal, which "
        "only Meta-World defines): add --agent dreamer"), Allowed(
        lambda v, c: v != "muse" or not c.replay.unfinished,
        "'dreamer' when replay.unfinished is on (MUSE's competence labels need each episode's outcome): add "
        "--agent dreamer or set replay.unfinished=false"))
    """Agent kind: "muse" has the self-awareness (competence) head and loss; "dreamer" is the same model
    without them (MUSE §3.2: "the self-awareness and self-regulation modules omitted"). "muse" needs
    env.suite metaworld (the only suite with a success signal)."""
    model: ModelConfig = ModelConfig()
    loss: LossConfig = LossConfig()
    optim: OptimConfig = OptimConfig()
    behavior: BehaviorConfig = BehaviorConfig()
    regulation: RegulationConfig = RegulationConfig()
    env: EnvConfig = EnvConfig()
    replay: ReplayConfig = ReplayConfig()
    train: TrainConfig = TrainConfig()
    adapt: AdaptConfig = AdaptConfig()
    parallel: ParallelConfig = ParallelConfig()

    def __post_init__(self) -> None:
        validate(self)

    def to_dict(self) -> dict[str, Any]:
        return to_plain(dataclasses.asdict(self))

    def replace(self, overrides: Mapping[str, Any]) -> Config:
        """A copy with dotted-key overrides applied and validated (`{"model.deter": 256}`); every key is
        explicit here, so a new `model.size` is checked but fills nothing (as `load.from_dict` does)."""
        reader = settings.Settings(Config, noun="config key", error=ConfigError)
        return reader.build(reader.apply_dotted(self.to_dict(), overrides, set()))


def validate(node: Any, prefix: str = "") -> None:
    """Check every field's `Allowed` rules, sections included; ConfigError names the first key out of range."""
    settings.validate(node, prefix, noun="config key", error=ConfigError)
