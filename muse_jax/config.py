"""Typed, frozen configuration for the MUSE world-model agent.

One `Config` holds everything a run needs. It is built from, in order of precedence (last wins):
dataclass defaults < model size preset (`model.size`) < YAML file < `--set key=value` overrides.
Every key is checked: an unknown key, a wrong type or an out-of-range value raises `ConfigError`
naming the key and what is allowed, before any work starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

MT10_TASKS: tuple[str, ...] = (
    "reach-v3",
    "push-v3",
    "pick-place-v3",
    "door-open-v3",
    "drawer-open-v3",
    "drawer-close-v3",
    "button-press-topdown-v3",
    "peg-insert-side-v3",
    "window-open-v3",
    "window-close-v3",
)
"""Pre-deployment training set (MUSE §3.2.1, Meta-World MT10)."""

NOVEL_TASKS: tuple[str, ...] = (
    "button-press-topdown-wall-v3",
    "soccer-v3",
    "push-wall-v3",
    "push-back-v3",  # the paper's "push-block"
    "coffee-button-v3",
    "plate-slide-v3",
    "peg-unplug-side-v3",
    "lever-pull-v3",
    "handle-press-v3",
    "door-unlock-v3",
)
"""Deployment (novel) set of MUSE Figure 4. Meta-World has no "push-block"; push-back is that task."""

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


class ConfigError(ValueError):
    """A configuration problem, with the offending key and the allowed values in the message."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """World-model and head architecture (DreamerV3 naming)."""

    size: str = "size1m"
    """Preset from MODEL_SIZES that fills deter/hidden/classes/depth/units unless they are set."""
    deter: int = 512
    """Width of the deterministic (block GRU) state h."""
    hidden: int = 64
    """Width of the RSSM's internal MLP layers."""
    stoch: int = 32
    """Number of categorical latents in z."""
    classes: int = 4
    """Classes per categorical latent."""
    blocks: int = 8
    """Blocks of the block-diagonal GRU; deter must be divisible by it."""
    depth: int = 4
    """Base channel count of the CNN encoder/decoder."""
    units: int = 64
    """Width of MLPs (encoder, decoder, heads, actor, critic)."""
    mlp_layers: int = 3
    """Hidden layers of the vector encoder/decoder, actor and critic."""
    head_layers: int = 1
    """Hidden layers of the reward, continue and competence heads."""
    unimix: float = 0.01
    """Uniform mixture for categorical latents and discrete actions (1%)."""
    bins: int = 255
    """Bins of the symlog two-hot reward and value heads."""
    competence_quantiles: int = 5
    """N, the number of time-to-success quantiles the self-awareness head predicts."""
    image_channels: int = 3
    """RGB channels; the task-id channel is appended on top of these."""
    task_channel: bool = True
    """Append the integer task id as an extra image channel (MUSE §3.2.1)."""
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    """Activation dtype; parameters stay float32."""


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """World-model loss weights: MUSE eq. 2-3, L_pred + 1.0 L_dyn + 0.1 L_rep, every prediction term at 1.

    MUSE eq. 2 gives the dynamics KL weight 1.0 (DreamerV3's own code uses 0.5); the paper's value is the
    default. The competence head's BCE is one more prediction term of L_pred (weight 1)."""

    dyn: float = 1.0
    """Weight of the dynamics KL (prior towards stop-grad posterior); MUSE eq. 2."""
    rep: float = 0.1
    """Weight of the representation KL (posterior towards stop-grad prior)."""
    free_nats: float = 1.0
    """Free bits: KL terms below this many nats are clipped (no gradient)."""
    image: float = 1.0
    """Image reconstruction (MSE) weight."""
    proprio: float = 1.0
    """Proprioceptive reconstruction (symlog MSE) weight."""
    reward: float = 1.0
    """Reward head (symlog two-hot cross-entropy) weight."""
    cont: float = 1.0
    """Continue head (Bernoulli) weight."""
    competence: float = 1.0
    """Self-awareness head (N binary cross-entropies) weight."""
    policy: float = 1.0
    """Actor loss scale in the one folded loss (dreamerv3 `loss_scales.policy`)."""
    value: float = 1.0
    """Critic loss scale on imagined returns (dreamerv3 `loss_scales.value`)."""
    repval: float = 0.3
    """Critic loss scale on lambda-returns along the replayed sequence (dreamerv3 `loss_scales.repval`,
    `repval_loss: True`, `repval_grad: True`: its gradient also reaches the world model)."""


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """One LaProp optimiser over world model, actor and critic (danijar/dreamerv3 `agent.opt`, `_make_opt`).

    Source: current danijar/dreamerv3 configs.yaml `opt: {lr: 4e-5, agc: 0.3, eps: 1e-20, beta1: 0.9,
    beta2: 0.999, momentum: True, warmup: 1000}` with `separate_lrs: False`; the chain is built in
    `agent.make_optimizer`. (The 2023 release used three Adams with 1e-4 / 3e-5 / 3e-5.)
    """

    lr: float = 4e-5
    """Learning rate after warm-up (dreamerv3 `opt.lr`)."""
    agc: float = 0.3
    """Adaptive gradient clipping: each tensor's update norm <= agc * max(agc_pmin, its parameter norm)."""
    agc_pmin: float = 1e-3
    """Parameter-norm floor of the adaptive clipping (dreamerv3 `clip_by_agc(pmin=1e-3)`)."""
    eps: float = 1e-20
    """Epsilon added to the RMS (outside the square root, as dreamerv3 `scale_by_rms`)."""
    beta1: float = 0.9
    """Momentum decay, applied after RMS normalisation (LaProp order)."""
    beta2: float = 0.999
    """Decay of the squared-gradient average."""
    warmup: int = 1000
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

    imag_horizon: int = 15
    """Imagination horizon (dreamerv3 `imag_length: 15`)."""
    lam: float = 0.95
    """Lambda of the lambda-returns, imagined and replayed (dreamerv3 `imag_loss.lam`, `repl_loss.lam`)."""
    horizon: float = 333.0
    """Discount horizon; discount = 1 - 1/horizon (dreamerv3 `horizon: 333`)."""
    actent: float = 3e-4
    """Entropy regulariser scale (dreamerv3 `imag_loss.actent`)."""
    slow_rate: float = 0.02
    """EMA rate of the slow critic, updated every step (dreamerv3 `slowvalue: {rate: 0.02, every: 1}`)."""
    slowreg: float = 1.0
    """Weight of the critic's regulariser towards the slow critic (dreamerv3 `imag_loss.slowreg`)."""
    retnorm_low: float = 5.0
    """Lower percentile of return normalisation (dreamerv3 `retnorm.perclo`)."""
    retnorm_high: float = 95.0
    """Upper percentile of return normalisation (dreamerv3 `retnorm.perchi`)."""
    retnorm_rate: float = 0.01
    """EMA rate of the return percentiles, not debiased (dreamerv3 `retnorm: {rate: 0.01, debias: False}`)."""
    retnorm_limit: float = 1.0
    """Minimum scale of return normalisation (dreamerv3 `retnorm.limit`)."""
    min_std: float = 0.1
    """Minimum std of the continuous action distribution (dreamerv3 `policy.minstd`)."""
    max_std: float = 1.0
    """Maximum std of the continuous action distribution (dreamerv3 `policy.maxstd`)."""
    policy_outscale: float = 0.01
    """Scale of the actor's output-layer init (dreamerv3 `policy.outscale: 0.01`): near-uniform first policy."""


@dataclasses.dataclass(frozen=True)
class RegulationConfig:
    """Self-regulation (MUSE §3.1.2): how MUSE turns competence into actions."""

    strategy: Literal["gradient", "rollouts", "mcts", "none"] = "gradient"
    """(c) gradient ascent on the model state (Algorithm 1), (a) sampled rollouts, (b) MCTS, or off."""
    horizon: int = 10
    """H, the rollout horizon of Algorithm 1 (also used by rollouts and MCTS depth)."""
    beta: float = 0.02
    """Step size of the gradient ascent on s = (h, z)."""
    num_rollouts: int = 16
    """(a) Number of sampled imagined rollouts."""
    mcts_simulations: int = 32
    """(b) Simulations per decision."""
    mcts_branching: int = 4
    """(b) Candidate actions sampled from the policy at each node."""
    mcts_c: float = 1.0
    """(b) Unused since MCTS selects by the self-awareness criterion in place of UCB (§3.1.2); kept so old
    configs load."""
    carry_regulated_state: bool = True
    """Algorithm 1 as written: the ascended s = (h, z) is the carry, so h_{t+1} = f(s, a_t) and regulation
    builds up over the episode. False = the earlier reading: the ascended s only picks a_t and the next
    step starts from the unregulated posterior (see regulation/gradient.py for why both exist)."""


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Meta-World environments."""

    tasks: tuple[str, ...] = MT10_TASKS
    """Pre-training tasks (task ids 1..len(tasks) in the image channel)."""
    novel_tasks: tuple[str, ...] = NOVEL_TASKS
    """Adaptation tasks (task-id channel 0)."""
    image: bool = True
    """Render 64x64 RGB observations; False = proprio-only (cheap)."""
    proprio: bool = True
    """Include the 39-dim proprioceptive vector."""
    image_size: int = 64
    """Rendered image side in pixels."""
    max_episode_steps: int = 500
    """Episode length L (also the time-to-success normaliser)."""
    num_envs: int = 4
    """Parallel environments."""
    vector: Literal["async", "sync"] = "async"
    """gymnasium vector env mode: async runs each env in its own process."""
    render_backend: Literal["egl", "osmesa", "glfw"] = "egl"
    """MUJOCO_GL backend; set before mujoco is imported."""
    camera: str = "corner2"
    """Camera name; corner cameras are flipped upright and corner2 is moved closer."""
    action_repeat: int = 1
    """Env steps per agent action."""


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """Sequence replay."""

    capacity: int = 1_000_000
    """Maximum stored env steps; the oldest episodes are evicted first."""
    batch_size: int = 16
    """B, sequences per train batch (global, split over devices)."""
    seq_len: int = 64
    """T, length of each sampled chunk."""
    context: bool = True
    """Start each chunk from the stored posterior latent of the step before it instead of zeros
    (dreamerv3 `replay_context: 1`); needs episodes stored with `deter`/`stoch` (the collector does)."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Pre-training schedule."""

    env_steps: int = 2_000_000
    """Total environment steps of pre-training."""
    train_ratio: float = 512.0
    """Replayed steps per env step: grad steps = env_steps * train_ratio / (B * T)."""
    prefill: int = 5000
    """Random-policy env steps before training starts."""
    log_every: int = 1000
    """Env steps between metrics lines."""
    save_every: int = 10000
    """Env steps between checkpoints."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk."""
    seed: int = 0
    """Global seed."""


@dataclasses.dataclass(frozen=True)
class AdaptConfig:
    """Adaptation to novel tasks (MUSE §3.2.1)."""

    episodes: int = 20
    """Adaptation episodes per novel task."""
    train_ratio: float = 512.0
    """Replayed steps per env step during adaptation."""
    parallel_tasks: bool = True
    """Adapt all novel tasks side by side (learner states stacked, policy and train steps vmapped over the
    task axis, one env per task); False = one task after another. Either way each task adapts on its own,
    episode after episode (MUSE §3.2.1)."""


@dataclasses.dataclass(frozen=True)
class ParallelConfig:
    """Devices and hosts."""

    param_sharding: Literal["replicated", "fsdp"] = "replicated"
    """Replicate parameters on every device, or shard large ones over the data axis."""
    distributed: bool = False
    """For `parallel.init_distributed` (coordinates from the environment). Not yet called by `muse-wm pretrain`:
    multi-host training through the command is open work (issue 13); the sharded step itself is tested."""


@dataclasses.dataclass(frozen=True)
class Config:
    """A whole MUSE world-model run."""

    name: str = "default"
    """Name of the configuration (for logs)."""
    agent: Literal["muse", "dreamer"] = "muse"
    """Agent kind: "muse" has the self-awareness (competence) head and loss; "dreamer" is the same model
    without them (MUSE §3.2: "the self-awareness and self-regulation modules omitted")."""
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
        return _to_plain(dataclasses.asdict(self))

    def replace(self, overrides: Mapping[str, Any]) -> Config:
        """A copy with dotted-key overrides applied and validated (`{"model.deter": 256}`)."""
        return from_dict(_apply_dotted(self.to_dict(), overrides, explicit=set()))


CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs" / "wm"


def _to_plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _to_plain(v) for k, v in x.items()}
    if isinstance(x, tuple | list):
        return [_to_plain(v) for v in x]
    return x


def _fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _unknown_key(key: str, valid: Sequence[str]) -> ConfigError:
    close = difflib.get_close_matches(key.split(".")[-1], valid, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return ConfigError(f"unknown config key '{key}'.{hint} Valid keys here: {', '.join(sorted(valid))}.")


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Convert a YAML/CLI value to the annotated type, or raise naming the key and the expected type."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"config key '{key}' = {value!r} is not allowed; choose one of {list(choices)}.")
        return value
    if origin in (tuple, list):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"config key '{key}' must be a list, got {value!r}.")
        (item_tp, *_rest) = typing.get_args(tp) or (Any,)
        return tuple(_coerce(key, v, item_tp) for v in value)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return _coerce(key, value, option)
            except ConfigError:
                continue
        raise ConfigError(f"config key '{key}' = {value!r} matches none of {typing.get_args(tp)}.")
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"config key '{key}' must be true or false, got {value!r}.")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"config key '{key}' must be an integer, got {value!r}.")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                f = float(value)
            except ValueError:
                f = None
            if f is not None and f.is_integer():
                return int(f)
        raise ConfigError(f"config key '{key}' must be an integer, got {value!r}.")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"config key '{key}' must be a number, got {value!r}.")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"config key '{key}' must be a number, got {value!r}.") from None
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config key '{key}' must be a string, got {value!r}.")
        return value
    return value


def _build(cls: type, data: Mapping[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = _fields(cls)
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if key not in fields:
            raise _unknown_key(full, list(fields))
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, Mapping):
                raise ConfigError(f"config key '{full}' is a section; give a mapping of {list(_fields(tp))}.")
            kwargs[key] = _build(tp, value, f"{full}.")
        else:
            kwargs[key] = _coerce(full, value, tp)
    try:
        return cls(**kwargs) if cls is not Config else _construct_config(kwargs)
    except TypeError as e:  # pragma: no cover - defensive
        raise ConfigError(str(e)) from e


def _construct_config(kwargs: dict[str, Any]) -> Config:
    return Config(**kwargs)


def _apply_size_preset(data: dict[str, Any], explicit: set[str]) -> None:
    model = data.setdefault("model", {})
    size = model.get("size", ModelConfig.size)
    if size not in MODEL_SIZES:
        raise ConfigError(f"config key 'model.size' = {size!r} is not a preset; choose one of {list(MODEL_SIZES)}.")
    for k, v in MODEL_SIZES[size].items():
        if f"model.{k}" not in explicit:
            model[k] = v


def _flatten_keys(data: Mapping[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for k, v in data.items():
        if isinstance(v, Mapping):
            keys |= _flatten_keys(v, f"{prefix}{k}.")
        else:
            keys.add(f"{prefix}{k}")
    return keys


def _apply_dotted(data: dict[str, Any], overrides: Mapping[str, Any], explicit: set[str]) -> dict[str, Any]:
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        cls: type = Config
        for i, part in enumerate(parts[:-1]):
            fields = _fields(cls)
            if part not in fields or not dataclasses.is_dataclass(typing.get_type_hints(cls)[part]):
                raise _unknown_key(".".join(parts[: i + 1]), [f for f in fields])
            cls = typing.get_type_hints(cls)[part]
            node = node.setdefault(part, {})
        if parts[-1] not in _fields(cls):
            raise _unknown_key(dotted, list(_fields(cls)))
        node[parts[-1]] = value
        explicit.add(dotted)
    return data


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """Parse `--set key=value` strings; values are YAML scalars (`3`, `1e-4`, `true`, `[a, b]`)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"override '{pair}' must look like key=value, e.g. model.deter=512.")
        key, raw = pair.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {pair}: the value is not valid YAML ({_yaml_problem(e)}); quote a text value, "
                              "close brackets, e.g. --set 'env.tasks=[reach-v3, push-v3]'.") from None
    return out


def _yaml_problem(e: yaml.YAMLError) -> str:
    """`<problem> at line L, column C` from a YAML error (1-based, as editors count)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e).splitlines()[0]
    if mark is None:
        return str(problem)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"


def _check_sections(data: Mapping[str, Any]) -> None:
    """Every section key (model, env, ...) must hold a mapping: `model: 5` names the section."""
    hints = typing.get_type_hints(Config)
    for key, value in data.items():
        tp = hints.get(key)
        if tp is not None and dataclasses.is_dataclass(tp) and not isinstance(value, Mapping):
            raise ConfigError(f"config key '{key}' is a section, not a value: give a mapping such as "
                              f"'{key}: {{{next(iter(_fields(tp)))}: ...}}' (keys: {', '.join(_fields(tp))}); "
                              f"got {value!r}.")


def from_dict(data: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> Config:
    """Build a validated Config from nested data plus dotted overrides."""
    data = _to_plain(dict(data))
    _check_sections(data)
    explicit = _flatten_keys(data)
    data = _apply_dotted(data, overrides or {}, explicit)
    _check_sections(data)
    _apply_size_preset(data, explicit)
    return _build(Config, data, "")


def resolve_config_path(name_or_path: str | Path) -> Path:
    """`smoke` -> configs/wm/smoke.yaml; a path is used as given."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    candidate = CONFIG_DIR / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate
    if p.exists():
        return p
    names = sorted(f.stem for f in CONFIG_DIR.glob("*.yaml"))
    raise ConfigError(f"config '{name_or_path}' not found; give a YAML path or one of {names}.")


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (plain YAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, typing.Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key '{key}' is given twice (first on line {seen[key] + 1})", key_node.start_mark)
            if isinstance(key, typing.Hashable):
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The top-level mapping of a YAML config file, or ConfigError naming the file and what is wrong
    (unreadable, not UTF-8 text, a syntax error with its line and column, empty, not a mapping)."""
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise ConfigError(f"config {path} is a folder; give a YAML file.") from None
    except OSError as e:
        raise ConfigError(f"config {path} cannot be read ({e.strerror or e}).") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config {path} is not a UTF-8 text file (byte {e.start} is 0x{raw[e.start]:02x}); "
                          "give a YAML file.") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ConfigError(f"config {path} is not valid YAML: {_yaml_problem(e)}.") from None
    if data is None:
        names = sorted(f.stem for f in CONFIG_DIR.glob("*.yaml"))
        raise ConfigError(f"config {path} is empty; an empty file would start a default 2M-step run. "
                          f"Give the settings, or start from one of {names}.")
    if not isinstance(data, Mapping):
        raise ConfigError(f"config {path}: the top level must be a mapping of sections (model:, env:, ...), "
                          f"got {type(data).__name__}.")
    return dict(data)


def load_config(name_or_path: str | Path, overrides: Mapping[str, Any] | Sequence[str] | None = None) -> Config:
    """Load a named config (`smoke`) or YAML file and apply overrides (dict or `key=value` strings)."""
    path = resolve_config_path(name_or_path)
    data = read_yaml_mapping(path)
    if overrides is not None and not isinstance(overrides, Mapping):
        overrides = parse_overrides(overrides)
    try:  # name the file only when the file itself is at fault, not a --set override
        base = from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    if not overrides:
        return base
    try:
        return from_dict(data, overrides)
    except ConfigError as e:
        raise ConfigError(f"--set override: {e}") from None


def _check(cond: bool, key: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"config key '{key}' = {value!r} is out of range; allowed: {allowed}.")


def _finite(x: float) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def validate(cfg: Config) -> None:
    """Range checks that types alone cannot express."""
    m, r = cfg.model, cfg.regulation
    for key in ("deter", "hidden", "stoch", "classes", "blocks", "depth", "units", "bins"):
        _check(getattr(m, key) >= 1, f"model.{key}", getattr(m, key), "an integer >= 1")
    _check(m.deter % m.blocks == 0, "model.deter", m.deter, f"a multiple of model.blocks={m.blocks}")
    _check(m.competence_quantiles >= 1, "model.competence_quantiles", m.competence_quantiles, "N >= 1")
    _check(0.0 <= m.unimix < 1.0, "model.unimix", m.unimix, "0 <= unimix < 1")
    _check(m.bins >= 3 and m.bins % 2 == 1, "model.bins", m.bins, "an odd integer >= 3")
    for key in ("dyn", "rep", "free_nats", "image", "proprio", "reward", "cont", "competence"):
        v = getattr(cfg.loss, key)
        _check(_finite(v) and v >= 0, f"loss.{key}", v, "a finite number >= 0")
    for key in ("policy", "value", "repval"):
        _check(_finite(getattr(cfg.loss, key)) and getattr(cfg.loss, key) >= 0, f"loss.{key}",
               getattr(cfg.loss, key), "a finite number >= 0")
    o = cfg.optim
    for key in ("lr", "eps", "agc_pmin"):
        v = getattr(o, key)
        _check(_finite(v) and v > 0, f"optim.{key}", v, "a finite number > 0")
    _check(_finite(o.agc) and o.agc >= 0, "optim.agc", o.agc, "a finite number >= 0 (0 = no clipping)")
    for key in ("beta1", "beta2"):
        _check(0.0 <= getattr(o, key) < 1.0, f"optim.{key}", getattr(o, key), "0 <= beta < 1")
    _check(o.warmup >= 0, "optim.warmup", o.warmup, "an integer >= 0")
    b = cfg.behavior
    _check(b.imag_horizon >= 1, "behavior.imag_horizon", b.imag_horizon, "an integer >= 1")
    _check(0.0 <= b.lam <= 1.0, "behavior.lam", b.lam, "0 <= lam <= 1")
    _check(_finite(b.horizon) and b.horizon >= 1, "behavior.horizon", b.horizon, "a finite number >= 1")
    _check(0 <= b.retnorm_low < b.retnorm_high <= 100, "behavior.retnorm_low", b.retnorm_low,
           "0 <= retnorm_low < retnorm_high <= 100")
    _check(0 < b.min_std <= b.max_std, "behavior.min_std", b.min_std, "0 < min_std <= max_std")
    _check(r.horizon >= 1, "regulation.horizon", r.horizon, "an integer >= 1")
    _check(_finite(r.beta) and r.beta >= 0, "regulation.beta", r.beta, "a finite number >= 0")
    _check(r.num_rollouts >= 1, "regulation.num_rollouts", r.num_rollouts, "an integer >= 1")
    _check(r.mcts_simulations >= 1, "regulation.mcts_simulations", r.mcts_simulations, "an integer >= 1")
    _check(r.mcts_branching >= 1, "regulation.mcts_branching", r.mcts_branching, "an integer >= 1")
    _check(_finite(r.mcts_c) and r.mcts_c >= 0, "regulation.mcts_c", r.mcts_c, "a finite number >= 0")
    e = cfg.env
    _check(e.image or e.proprio, "env.image", e.image, "true, or env.proprio true (at least one input)")
    _check(e.image_size >= 16 and e.image_size % 16 == 0, "env.image_size", e.image_size, "a multiple of 16")
    _check(e.max_episode_steps >= 1, "env.max_episode_steps", e.max_episode_steps, "an integer >= 1")
    _check(e.num_envs >= 1, "env.num_envs", e.num_envs, "an integer >= 1")
    _check(len(e.tasks) >= 1, "env.tasks", e.tasks, "at least one Meta-World task")
    _check(e.action_repeat >= 1, "env.action_repeat", e.action_repeat, "an integer >= 1")
    rp = cfg.replay
    _check(rp.batch_size >= 1, "replay.batch_size", rp.batch_size, "an integer >= 1")
    _check(rp.seq_len >= 2, "replay.seq_len", rp.seq_len, "an integer >= 2")
    _check(rp.capacity >= rp.seq_len, "replay.capacity", rp.capacity, f"at least replay.seq_len={rp.seq_len}")
    t = cfg.train
    _check(t.env_steps >= 1, "train.env_steps", t.env_steps, "an integer >= 1")
    _check(_finite(t.train_ratio) and t.train_ratio > 0, "train.train_ratio", t.train_ratio, "a number > 0")
    _check(t.prefill >= 0, "train.prefill", t.prefill, "an integer >= 0")
    _check(t.log_every >= 1, "train.log_every", t.log_every, "an integer >= 1")
    _check(t.save_every >= 1, "train.save_every", t.save_every, "an integer >= 1")
    _check(t.keep_checkpoints >= 1, "train.keep_checkpoints", t.keep_checkpoints, "an integer >= 1")
    _check(cfg.adapt.episodes >= 1, "adapt.episodes", cfg.adapt.episodes, "an integer >= 1")
    _check(_finite(cfg.adapt.train_ratio) and cfg.adapt.train_ratio > 0, "adapt.train_ratio",
           cfg.adapt.train_ratio, "a number > 0")
