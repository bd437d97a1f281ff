"""Loading a `Config`: named configs, YAML files, `--set` overrides, presets, resume compatibility.

Precedence, last wins: dataclass defaults < model size preset (`model.size`) and env suite preset
(`env.suite`, `SUITE_PRESETS`) < YAML file < `--set
key=value` overrides. Every key is checked: an unknown key, a wrong type or a value outside its choices
raises `ConfigError` naming the key and what is allowed, before any work starts; ranges are the
schema's (`Allowed` rules beside each field). The machinery is `muse_common.settings`, parametrised
here by `Config`; this module adds what is particular to `muse-wm`: size presets, named configs, resume.

The named configs (`smoke`, `quickstart`, `paper`) are package data in `muse_jax/config/named/`, so they
resolve from a wheel install as from a checkout; the repository's `configs/wm` is a link to that folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from muse_common import settings
from muse_common.overrides import OverrideError, parse_key_values
from muse_common.settings import Settings, flatten_keys, to_plain
from muse_jax.config.schema import MODEL_SIZES, Config, ConfigError, ModelConfig

CONFIG_DIR = Path(__file__).resolve().parent / "named"
"""The named configs shipped with the package (`configs/wm` in the repository links here)."""

CONFIG_KEYS_FREE_ON_RESUME = (
    "train.env_steps", "train.log_every", "train.save_every", "train.keep_checkpoints",
    "optim.lr", "optim.warmup", "optim.agc", "replay.capacity", "regulation.carry_regulated_state",
    "train.sa_window",
    "model.observe_unroll", "behavior.imag_unroll", "model.observe_remat",  # how loops compile, not what they do
    "model.observe_param_grads",
    "regulation.effect_diagnostics",  # what a decision reports, not what it does
)
"""Settings a resumed run may change (extend training, with replay room to match; lower a learning rate
after a NaN stop, as the NaN message advises; drop the carried regulated state, which runs saved before it
was refused with the prior z have on: `closed_loop`); every other key must match the saved run. A smaller
`replay.capacity` evicts the oldest episodes when the replay is restored."""

KEYS_ADDED_WITH_OLD_BEHAVIOUR: dict[str, Any] = {
    "replay.online": False, "model.hidden_bias": False, "replay.unfinished": False,
    "behavior.split_policy_out": False, "model.observe_unroll": 1, "behavior.imag_unroll": 1,
    "model.competence_reading": "steps_left", "train.overlap_collect": False,
    "regulation.effect_diagnostics": True, "model.observe_remat": "none", "model.observe_param_grads": "in_loop",
    "adapt.overlap_collect": False}
"""Settings added after runs were saved, with the value that reproduces what the code did before they
existed: a saved config that lacks one of them counts as holding this value on resume (a key added with a
new behaviour as its default is not listed, so an older run is refused rather than resumed differently)."""


def closed_loop(saved: Mapping[str, Any]) -> dict[str, Any]:
    """A saved config with the open-loop acting setting turned off.

    Runs saved before `regulation.carry_regulated_state` with `z_source: prior` was refused hold exactly
    that pair (it was the default): no observation reached their actions. Restored, they act from the
    filtered state instead (`carry_regulated_state: false`); everything else is kept."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in saved.items()}
    reg = out.get("regulation")
    if isinstance(reg, dict) and reg.get("carry_regulated_state") and reg.get("z_source", "prior") == "prior":
        reg["carry_regulated_state"] = False
    return out


def named_configs() -> list[str]:
    """Names `--config` accepts besides a path: `smoke`, `quickstart`, `paper`, ..."""
    return sorted(f.stem for f in CONFIG_DIR.glob("*.yaml"))


SETTINGS = Settings(Config, noun="config key", error=ConfigError)
"""How a `Config` is read from nested data and dotted overrides (`muse_common.settings`)."""


def _apply_size_preset(data: dict[str, Any], explicit: set[str]) -> None:
    model = data.setdefault("model", {})
    size = model.get("size", ModelConfig.size)
    if size not in MODEL_SIZES:
        raise ConfigError(f"config key 'model.size' = {size!r} is not a preset; choose one of {list(MODEL_SIZES)}.")
    for k, v in MODEL_SIZES[size].items():
        if f"model.{k}" not in explicit:
            model[k] = v


SUITE_PRESETS: dict[str, dict[str, Any]] = {
    "metaworld": {},
    "dmc": {"action_repeat": 2, "max_episode_steps": 1000, "image": False, "camera": "-1"},
    "gym": {"action_repeat": 1, "max_episode_steps": 0, "image": False},
}
"""Per-suite env defaults (`env.suite`), filled in for every env key the config does not set: DreamerV3's DMC
setting (danijar/dreamerv3 `env.dmc: {repeat: 2}` of its 2023-24 configs, the suite's 1000-frame episodes,
proprio inputs as `dmc_proprio`), and gymnasium's registered time limits."""


def _apply_suite_preset(data: dict[str, Any], explicit: set[str]) -> None:
    env = data.setdefault("env", {})
    suite = env.get("suite", "metaworld")
    for k, v in SUITE_PRESETS.get(suite, {}).items():
        if f"env.{k}" not in explicit:
            env[k] = v


def parse_overrides(pairs: Sequence[str], flag: str = "--set") -> dict[str, Any]:
    """Parse `--set key=value` strings; values are YAML (`3`, `1e-4`, `true`, `[a, b]`)."""
    try:
        return parse_key_values(pairs, flag, structured=True, example="model.deter=512")
    except OverrideError as e:
        raise ConfigError(str(e)) from None


def from_dict(data: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> Config:
    """Build a validated Config from nested data plus dotted overrides."""
    data = to_plain(dict(data))
    SETTINGS.check_sections(data)
    explicit = flatten_keys(data)
    data = SETTINGS.apply_dotted(data, overrides or {}, explicit)
    SETTINGS.check_sections(data)
    _apply_size_preset(data, explicit)
    _apply_suite_preset(data, explicit)
    return SETTINGS.build(data)


def resolve_config_path(name_or_path: str | Path) -> Path:
    """`smoke` -> the packaged smoke.yaml (`CONFIG_DIR`, which configs/wm links to); a path is used as given."""
    if not str(name_or_path).strip():
        raise ConfigError(f"--config is empty (''); give a YAML path or one of {named_configs()}.")
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    candidate = CONFIG_DIR / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate
    if p.exists():
        return p
    names = named_configs()
    raise ConfigError(f"config '{name_or_path}' not found; give a YAML path or one of {names}.")


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The top-level mapping of a YAML config file, or ConfigError naming the file and what is wrong
    (unreadable, not UTF-8 text, a syntax error with its line and column, a key given twice, empty, not a
    mapping)."""
    return settings.read_yaml_mapping(
        path, error=ConfigError, what="config",
        empty_hint=f"an empty file would start a default 2M-step run. Give the settings, or start from one of "
                   f"{named_configs()}.")


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


def config_diff(saved: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two Config.to_dict() trees."""
    out = []
    for k in sorted(set(saved) | set(current)):
        a, b = saved.get(k), current.get(k)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += config_diff(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}")
    return out


def resume_conflicts(saved: Mapping[str, Any], current: Config) -> list[str]:
    """Keys where `current` differs from a saved run's config (`Config.to_dict()`) and may not on resume."""
    saved = _with_old_behaviour(saved)
    return [k for k in config_diff(saved, current.to_dict()) if k not in CONFIG_KEYS_FREE_ON_RESUME]


def explain_conflicts(saved: Mapping[str, Any], current: Config, keys: list[str]) -> tuple[str, str]:
    """("k is X there, Y here; ...", "--set k=X ...") for the first five conflicting `keys`.

    Why: a refused resume must say how to resume; after a default changed (`model.hidden_bias` on
    2026-11-26) the user's command is unchanged and only the run's own values make it resume.
    """
    def show(v: Any) -> str:
        return "unset" if v is None else str(v).lower() if isinstance(v, bool) else v if isinstance(v, str) \
            else json.dumps(v)

    def get(tree: Mapping[str, Any], dotted: str) -> Any:
        for part in dotted.split("."):
            tree = tree.get(part) if isinstance(tree, Mapping) else None
        return tree

    old, new = _with_old_behaviour(saved), current.to_dict()
    keys = keys[:5]
    what = "; ".join(f"{k} is {show(get(old, k))} there, {show(get(new, k))} here" for k in keys)
    return what, " ".join(f"--set {k}={show(get(old, k))}" for k in keys)


def _with_old_behaviour(saved: Mapping[str, Any]) -> dict[str, Any]:
    """`saved` with every key of KEYS_ADDED_WITH_OLD_BEHAVIOUR it lacks set to that old behaviour."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in saved.items()}
    for dotted, value in KEYS_ADDED_WITH_OLD_BEHAVIOUR.items():
        section, key = dotted.split(".")
        if isinstance(out.get(section), dict):
            out[section].setdefault(key, value)
    return out
