"""Typed settings: frozen dataclasses read from YAML files, `key=value` flags and dicts, checked field by field.

One mechanism for both halves: `muse-wm`'s run config (`muse_jax.config`) and every `muse-llm` agent's and
env's `Options`. A settings class is a frozen dataclass whose fields carry

- a type (`int`, `float`, `bool`, `str`, `Literal[...]`, `tuple[T, ...]`, `T | None`, a nested settings
  dataclass = a section), enforced by `coerce` when data is read;
- range rules beside the field (`setting(default, Allowed(...))`), enforced by `validate`;
- a docstring: the string literal under the field, as in the rest of the code, read back by
  `field_docs` for `--list-options`.

`Settings(root)` is parametrised by the root dataclass and names its keys in errors with its own noun
("config key", "react option"): an unknown key is refused with the closest valid name ("Did you mean
..."), a wrong type with the expected one. Booleans have one spelling, YAML's `true`/`false`; `maybe`
or `2` is an error, never silently false.

Why not tyro or dacite now: both build dataclasses from dicts/argv, but neither keeps range rules
beside a field, and neither produces the one-line errors (with a suggestion and the valid keys) the
docs (docs/errors.md) document and tests pin; dacite would also need a custom hook per type to refuse `"maybe"` for
a bool. The public surface here (`Settings.build`, `setting`, `Allowed`, `validate`, `field_docs`,
`read_yaml_mapping`) is small and library-shaped, so the internals can be swapped later without
touching callers.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import math
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from muse_common.overrides import BoundedLoader, load_yaml, yaml_problem


class SettingsError(ValueError):
    """A settings problem; the message names the key and what is allowed."""


# ---- range rules beside the field --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Allowed:
    """One range rule of a field: `ok(value, section)` is True when the value is allowed; `words` says what
    is allowed after "allowed:" in the error and may name sibling fields as `{name}`."""

    ok: Callable[[Any, Any], bool]
    words: str
    upper: bool = False
    """True for an upper bound (`at_most`): a numeric field without one gets the generic bound of `validate`."""


def setting(default: Any, *rules: Allowed) -> Any:
    """A dataclass field with its default and its range rules (see `validate`)."""
    return dataclasses.field(default=default, metadata={"allowed": rules})


def finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def integer_at_least(low: int) -> Allowed:
    return Allowed(lambda v, _: v >= low, f"an integer >= {low}")


def number_at_least(low: float) -> Allowed:
    return Allowed(lambda v, _: finite(v) and v >= low, f"a finite number >= {low}")


def number_above(low: float) -> Allowed:
    return Allowed(lambda v, _: finite(v) and v > low, f"a finite number > {low}")


def at_most(high: float, why: str) -> Allowed:
    """An upper bound with its reason (shown in the error): every numeric setting has one, so a typo such as
    `model.deter=1e12` or `regulation.horizon=1e9` is one line, not a 90-line traceback or a killed process."""
    return Allowed(lambda v, _: not finite(v) or v <= high, f"at most {high:g} ({why})", upper=True)


INT_MAX = 2**31 - 1
"""The generic upper bound of an integer setting without its own: a 32-bit integer, what JAX, numpy seeds
and the env libraries take; a bigger count is a typo (a run of 2**31 steps would take years)."""
FLOAT_MAX = 1e9
"""The generic upper bound of a float setting without its own: no rate, weight, ratio or scale here is near
it, so a bigger value is a typo."""


def _generic_upper(value: Any) -> Allowed | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return at_most(INT_MAX, "a 32-bit integer; a bigger count is a typo")
    return at_most(FLOAT_MAX, "no setting of this kind is near it; a bigger value is a typo")


def validate(node: Any, prefix: str = "", *, noun: str = "config key",
             error: type[Exception] = SettingsError) -> None:
    """Check every field's `Allowed` rules, sections included; `error` names the first key out of range."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            validate(value, f"{prefix}{f.name}.", noun=noun, error=error)
            continue
        rules = tuple(f.metadata.get("allowed", ()))
        if not any(r.upper for r in rules):
            generic = _generic_upper(value)
            rules += (generic,) if generic else ()
        for allowed in rules:
            if value is None:  # `T | None` fields: None means "not set", no range applies
                continue
            if not allowed.ok(value, node):
                siblings = {g.name: getattr(node, g.name) for g in dataclasses.fields(node)}
                raise error(f"{noun} '{prefix}{f.name}' = {value!r} is out of range; "
                            f"allowed: {allowed.words.format(**siblings)}.")


# ---- reading data into a dataclass -------------------------------------------------------------------
def fields_of(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def to_plain(x: Any) -> Any:
    """Dataclass dicts -> plain YAML/JSON data (tuples become lists)."""
    if isinstance(x, dict):
        return {k: to_plain(v) for k, v in x.items()}
    if isinstance(x, tuple | list):
        return [to_plain(v) for v in x]
    return x


def _type_words(tp: Any) -> str:
    """How a field's type reads in `--list-options`: `int`, `true|false`, `a|b`, `int or none`."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "|".join(str(c) for c in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join("none" if a is type(None) else _type_words(a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        (item, *_rest) = typing.get_args(tp) or (Any,)
        return f"list of {_type_words(item)}"
    if tp is bool:
        return "true|false"
    return getattr(tp, "__name__", str(tp))


def _printable(text: str) -> str:
    """`text` with control characters escaped (a key from input stays on the error's one line)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


class Settings:
    """Reads nested data into the root dataclass `root`, naming keys in errors as `noun` ("config key")."""

    def __init__(self, root: type, *, noun: str = "config key", error: type[Exception] = SettingsError):
        self.root, self.noun, self.error = root, noun, error

    # -- errors
    def unknown_key(self, key: str, valid: Sequence[str]) -> Exception:
        key = _printable(key)
        close = difflib.get_close_matches(key.split(".")[-1], valid, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        return self.error(f"unknown {self.noun} '{key}'.{hint} Valid keys here: {', '.join(sorted(valid))}.")

    # -- values
    def coerce(self, key: str, value: Any, tp: Any) -> Any:
        """Convert a YAML/CLI value to the annotated type, or raise naming the key and the expected type."""
        noun, err = self.noun, self.error
        origin = typing.get_origin(tp)
        if origin is Literal:
            choices = typing.get_args(tp)
            if value not in choices:
                raise err(f"{noun} '{key}' = {value!r} is not allowed; choose one of {list(choices)}.")
            return value
        if origin in (tuple, list):
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, list | tuple):
                raise err(f"{noun} '{key}' must be a list, got {value!r}.")
            (item_tp, *_rest) = typing.get_args(tp) or (Any,)
            return tuple(self.coerce(key, v, item_tp) for v in value)
        if origin in (typing.Union, types.UnionType):
            if value is None and type(None) in typing.get_args(tp):
                return None
            problems = []
            for option in typing.get_args(tp):
                try:
                    return self.coerce(key, value, option)
                except err as e:
                    problems.append((option, e))
            real = [e for option, e in problems if option is not type(None)]
            if len(real) == 1:  # `T | None`: say what T wants
                raise real[0]
            raise err(f"{noun} '{key}' = {value!r} is not allowed; give {_type_words(tp)}.")
        if tp is type(None):
            if value is None or (isinstance(value, str) and value.lower() in ("", "none", "null")):
                return None
            raise err(f"{noun} '{key}' must be none, got {value!r}.")
        if tp is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            raise err(f"{noun} '{key}' must be true or false, got {value!r}.")
        if tp is int:
            if isinstance(value, bool):
                raise err(f"{noun} '{key}' must be an integer, got {value!r}.")
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
            raise err(f"{noun} '{key}' must be an integer, got {value!r}.")
        if tp is float:
            if isinstance(value, bool):
                raise err(f"{noun} '{key}' must be a number, got {value!r}.")
            try:
                return float(value)
            except (TypeError, ValueError):
                raise err(f"{noun} '{key}' must be a number, got {value!r}.") from None
        if tp is str:
            if not isinstance(value, str):
                raise err(f"{noun} '{key}' must be a string, got {value!r}.")
            return value
        return value

    # -- sections
    def _build(self, cls: type, data: Mapping[str, Any], prefix: str) -> Any:
        hints = typing.get_type_hints(cls)
        fields = fields_of(cls)
        kwargs = {}
        for key, value in data.items():
            full = f"{prefix}{key}"
            if key not in fields:
                raise self.unknown_key(full, list(fields))
            tp = hints[key]
            if dataclasses.is_dataclass(tp):
                if not isinstance(value, Mapping):
                    raise self.error(f"{self.noun} '{full}' is a section; give a mapping of {list(fields_of(tp))}.")
                kwargs[key] = self._build(tp, value, f"{full}.")
            else:
                kwargs[key] = self.coerce(full, value, tp)
        try:
            return cls(**kwargs)
        except TypeError as e:  # pragma: no cover - defensive
            raise self.error(str(e)) from e

    def check_sections(self, data: Mapping[str, Any]) -> None:
        """Every section key (model, env, ...) must hold a mapping: `model: 5` names the section."""
        hints = typing.get_type_hints(self.root)
        for key, value in data.items():
            tp = hints.get(key)
            if tp is not None and dataclasses.is_dataclass(tp) and not isinstance(value, Mapping):
                raise self.error(f"{self.noun} '{key}' is a section, not a value: give a mapping such as "
                                 f"'{key}: {{{next(iter(fields_of(tp)))}: ...}}' (keys: {', '.join(fields_of(tp))}); "
                                 f"got {value!r}.")

    def apply_dotted(self, data: dict[str, Any], overrides: Mapping[str, Any], explicit: set[str]) -> dict[str, Any]:
        """Write `section.key: value` overrides into nested `data`, refusing unknown keys; record them in `explicit`."""
        for dotted, value in overrides.items():
            node = data
            parts = dotted.split(".")
            cls: type = self.root
            for i, part in enumerate(parts[:-1]):
                fields = fields_of(cls)
                if part in fields and not dataclasses.is_dataclass(typing.get_type_hints(cls)[part]):
                    here = ".".join(parts[: i + 1])
                    raise self.error(f"{self.noun} '{here}' is a value, not a section, so '{_printable(dotted)}' "
                                     "names nothing; "
                                     f"give {here}=VALUE.")
                if part not in fields:
                    raise self.unknown_key(".".join(parts[: i + 1]), list(fields))
                cls = typing.get_type_hints(cls)[part]
                node = node.setdefault(part, {})
            if parts[-1] not in fields_of(cls):
                raise self.unknown_key(dotted, list(fields_of(cls)))
            node[parts[-1]] = value
            explicit.add(dotted)
        return data

    def build(self, data: Mapping[str, Any] | None = None) -> Any:
        """The root dataclass from nested data: every key known, every value of its type; ranges are checked
        by the dataclass itself (`__post_init__` calling `validate`) or here when it has none."""
        data = to_plain(dict(data or {}))
        self.check_sections(data)
        out = self._build(self.root, data, "")
        if "__post_init__" not in vars(self.root):
            validate(out, noun=self.noun, error=self.error)
        return out


def build_options(cls: type, data: Any, owner: str) -> Any:
    """An agent's or env's `Options` (frozen dataclass `cls`) from a mapping of `key=value` options; an
    instance of `cls` passes through. Errors name the option as "`owner` option 'key'"."""
    if isinstance(data, cls):
        return data
    return Settings(cls, noun=f"{owner} option").build(dict(data or {}))


def flatten_keys(data: Mapping[str, Any], prefix: str = "") -> set[str]:
    """Dotted names of the leaves of nested data."""
    keys = set()
    for k, v in data.items():
        if isinstance(v, Mapping):
            keys |= flatten_keys(v, f"{prefix}{k}.")
        else:
            keys.add(f"{prefix}{k}")
    return keys


# ---- documentation ----------------------------------------------------------------------------------
def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal written under it in the class body), "" when none."""
    docs = {f.name: "" for f in dataclasses.fields(cls)}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):  # a subclass's doc wins
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):  # no source (frozen app): names and types still list
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in zip(body, body[1:], strict=False):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def describe(cls: type) -> str:
    """`--list-options` text: the class docstring, then one block per field (name, type, default, rules, doc)."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    lines = [" ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())]
    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
                for f in dataclasses.fields(cls)}
    for f in dataclasses.fields(cls):
        default = defaults[f.name]
        shown = "none" if default is None else str(default).lower() if isinstance(default, bool) else repr(default)
        # a rule naming a sibling field (`{beta}`) shows that field's default, as the error shows its value
        rules = "; ".join(_words(a.words, defaults) for a in f.metadata.get("allowed", ()))
        lines.append(f"  {f.name} ({_type_words(hints[f.name])}, default {shown}"
                     + (f"; allowed: {rules}" if rules else "") + ")")
        if docs.get(f.name):
            lines.append(f"      {docs[f.name]}")
    return "\n".join(lines) + "\n"


def _words(words: str, values: dict[str, Any]) -> str:
    """A rule's words with `{name}` filled from `values` (left as written when it names something else)."""
    try:
        return words.format(**values)
    except (KeyError, IndexError, ValueError):
        return words


# ---- YAML files -------------------------------------------------------------------------------------
class _UniqueKeyLoader(BoundedLoader):
    """The bounded SafeLoader (depth, expanded size) that also refuses a key given twice in one mapping (plain
    YAML keeps the last silently)."""

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


def read_yaml_mapping(path: Path, *, error: type[Exception] = SettingsError, what: str = "config",
                      empty_hint: str = "give the settings.") -> dict[str, Any]:
    """The top-level mapping of a YAML settings file, or `error` naming the file and what is wrong
    (unreadable, not UTF-8 text, a syntax error with its line and column, a key given twice, empty, not a
    mapping, not a regular file). `what` names the file's kind; `empty_hint` follows "is empty;"."""
    if path.exists() and not path.is_file() and not path.is_dir():  # reading a named pipe would wait forever
        raise error(f"{what} {path} is not a regular file (a named pipe, socket or device); give a YAML file.")
    if str(path).strip() in ("", "."):
        raise error(f"{what} path is empty ('{path}'); give a YAML file.")
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise error(f"{what} {path} is a folder; give a YAML file.") from None
    except OSError as e:
        raise error(f"{what} {path} cannot be read ({e.strerror or e}).") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{what} {path} is not a UTF-8 text file (byte {e.start} is 0x{raw[e.start]:02x}); "
                    "give a YAML file.") from None
    try:
        data = load_yaml(text, _UniqueKeyLoader)
    except yaml.YAMLError as e:
        raise error(f"{what} {path} is not valid YAML: {yaml_problem(e)}.") from None
    if data is None:
        raise error(f"{what} {path} is empty; {empty_hint}")
    if not isinstance(data, Mapping):
        raise error(f"{what} {path}: the top level must be a mapping of sections (model:, env:, ...), "
                    f"got {type(data).__name__}.")
    return dict(data)
