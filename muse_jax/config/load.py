"""Loading a `Config`: named configs, YAML files, `--set` overrides, presets, resume compatibility.

Precedence, last wins: dataclass defaults < model size preset (`model.size`) and env suite preset
(`env.suite`, `SUITE_PRESETS`) < YAML file < `--set
key=value` overrides. Every key is checked: an unknown key, a wrong type or a value outside its choices
raises `ConfigError` naming the key and what is allowed, before any work starts; ranges are the
schema's (`muse_jax.config.schema.validate`).

The named configs (`smoke`, `quickstart`, `paper`) are package data in `muse_jax/config/named/`, so they
resolve from a wheel install as from a checkout; the repository's `configs/wm` is a link to that folder.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from muse_common.overrides import OverrideError, parse_key_values, yaml_problem
from muse_jax.config.schema import MODEL_SIZES, Config, ConfigError, ModelConfig, to_plain

CONFIG_DIR = Path(__file__).resolve().parent / "named"
"""The named configs shipped with the package (`configs/wm` in the repository links here)."""

CONFIG_KEYS_FREE_ON_RESUME = (
    "train.env_steps", "train.log_every", "train.save_every", "train.keep_checkpoints",
    "optim.lr", "optim.warmup", "optim.agc",
)
"""Settings a resumed run may change (extend training; lower a learning rate after a NaN stop, as the
NaN message advises); every other key must match the saved run."""


def named_configs() -> list[str]:
    """Names `--config` accepts besides a path: `smoke`, `quickstart`, `paper`, ..."""
    return sorted(f.stem for f in CONFIG_DIR.glob("*.yaml"))


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
        return cls(**kwargs)
    except TypeError as e:  # pragma: no cover - defensive
        raise ConfigError(str(e)) from e


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


def parse_overrides(pairs: Sequence[str], flag: str = "--set") -> dict[str, Any]:
    """Parse `--set key=value` strings; values are YAML (`3`, `1e-4`, `true`, `[a, b]`)."""
    try:
        return parse_key_values(pairs, flag, structured=True, example="model.deter=512")
    except OverrideError as e:
        raise ConfigError(str(e)) from None


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
    data = to_plain(dict(data))
    _check_sections(data)
    explicit = _flatten_keys(data)
    data = _apply_dotted(data, overrides or {}, explicit)
    _check_sections(data)
    _apply_size_preset(data, explicit)
    _apply_suite_preset(data, explicit)
    return _build(Config, data, "")


def resolve_config_path(name_or_path: str | Path) -> Path:
    """`smoke` -> the packaged smoke.yaml (`CONFIG_DIR`, which configs/wm links to); a path is used as given."""
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
        raise ConfigError(f"config {path} is not valid YAML: {yaml_problem(e)}.") from None
    if data is None:
        names = named_configs()
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
    return [k for k in config_diff(saved, current.to_dict()) if k not in CONFIG_KEYS_FREE_ON_RESUME]
