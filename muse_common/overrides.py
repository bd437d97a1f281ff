"""`key=value` command-line options, parsed the same way for both halves.

`muse-wm --set model.deter=256`, `muse-llm --env-opt max_steps=30` and `--agent-opt ...` all go through
`parse_key_values`. Values are read as YAML so that `3`, `1e-4`, `true` arrive typed. The halves differ
in one deliberate way, chosen by `structured`:

- `structured=True` (`--set`): a value may be any YAML (`[reach-v3, push-v3]`, `{a: 1}`); text that is
  not valid YAML is an error naming the flag, the pair and the line/column, since a config value that
  silently became a string would fail later with a less clear message.
- `structured=False` (`--env-opt`, `--agent-opt`): only YAML scalars are converted; anything else
  (a path, `[`, `{x: 1}`) stays the text the user typed, because env and agent options are scalars
  checked by their own owners.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml


class OverrideError(ValueError):
    """A malformed `key=value` option; the message names the flag and the pair."""


def yaml_problem(e: yaml.YAMLError) -> str:
    """`<problem> at line L, column C` from a YAML error (1-based, as editors count)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e).splitlines()[0]
    if mark is None:
        return str(problem)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"


def _scalar_or_text(raw: str) -> Any:
    """A YAML scalar when the text is one (true, 3, 0.5), else the text itself."""
    try:
        parsed = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    return parsed if isinstance(parsed, bool | int | float | str) or parsed is None else raw


def parse_key_values(pairs: Sequence[str] | None, flag: str, *, structured: bool,
                     example: str = "") -> dict[str, Any]:
    """`["a=1", "b=x"]` -> `{"a": 1, "b": "x"}`; later pairs win. An empty value is "".

    `flag` (e.g. "--set") names the option in errors; `example` (e.g. "model.deter=512") is shown
    when a pair has no `=`. See the module docstring for `structured`.
    """
    out: dict[str, Any] = {}
    for pair in pairs or ():
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            hint = f", e.g. {flag} {example}" if example else ""
            raise OverrideError(f"{flag} expects key=value{hint}; got '{pair}'.")
        if not raw.strip():
            value: Any = ""
        elif not structured:
            value = _scalar_or_text(raw)
        else:
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError as e:
                raise OverrideError(f"{flag} {pair}: the value is not valid YAML ({yaml_problem(e)}); quote a text "
                                    "value and close brackets, e.g. key='a: b' or key=[a, b].") from None
        out[key.strip()] = value
    return out
