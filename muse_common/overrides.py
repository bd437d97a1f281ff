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

YAML_MAX_BYTES = 1 << 20
"""The biggest settings text read (1 MiB): the shipped configs are a few KiB."""
YAML_MAX_DEPTH = 64
"""The deepest nesting of mappings and lists: a config has three levels; 5000 would overflow the parser's stack."""
YAML_MAX_NODES = 100_000
"""The most values a settings text may hold once its aliases are expanded: a 478-byte alias bomb expands to
billions and would hang the program or exhaust memory; the biggest real config holds some hundreds."""


class YAMLLimitError(yaml.MarkedYAMLError):
    """A settings text past one of the limits above; `yaml_problem` names the limit, line and column."""


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader with limits on nesting depth and on the expanded size of the document (aliases counted
    each time they are used), checked while composing, before anything is built: so no settings text can
    hang the program, exhaust its memory or overflow its stack."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > YAML_MAX_DEPTH:
                raise YAMLLimitError(None, None, f"nesting deeper than {YAML_MAX_DEPTH} levels (a settings file "
                                     "has a few)", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            _check_expanded_size(node)
        return node


def _check_expanded_size(root: Any) -> None:
    """Refuse a node graph whose expansion (every alias use counted) passes YAML_MAX_NODES; linear in the
    graph's distinct nodes (sizes are memoised), so checking a bomb is as cheap as checking a small file."""
    sizes: dict[int, int] = {}
    order: list[Any] = []
    stack, seen = [root], set()
    while stack:  # children before parents, without recursion
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        order.append(node)
        stack.extend(_children(node))
    for node in reversed(order):
        size = 1 + sum(sizes.get(id(c), 1) for c in _children(node))
        sizes[id(node)] = min(size, YAML_MAX_NODES + 1)
        if size > YAML_MAX_NODES:
            raise YAMLLimitError(None, None, f"more than {YAML_MAX_NODES} values once its aliases (*name) are "
                                 "expanded (an alias bomb?)", node.start_mark)


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def load_yaml(text: str, loader: type[BoundedLoader] = BoundedLoader) -> Any:
    """YAML text -> data through `loader` (BoundedLoader or a subclass): safe (no tags that build objects),
    bounded (size, depth, expanded size). Errors are yaml.YAMLError, named by `yaml_problem`."""
    if len(text) > YAML_MAX_BYTES:
        raise YAMLLimitError(None, None, f"longer than {YAML_MAX_BYTES} characters (a settings file is a few KiB)",
                             None)
    return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass


class OverrideError(ValueError):
    """A malformed `key=value` option; the message names the flag and the pair."""


def yaml_problem(e: yaml.YAMLError) -> str:
    """`<problem> at line L, column C` from a YAML error (1-based, as editors count)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e).splitlines()[0]
    if mark is None:
        return str(problem)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"


def _shown(pair: str, limit: int = 80) -> str:
    """A `key=value` pair as an error line shows it: one line, at most `limit` characters."""
    text = pair.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _scalar_or_text(raw: str) -> Any:
    """A YAML scalar when the text is one (true, 3, 0.5), else the text itself."""
    try:
        parsed = load_yaml(raw)
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
            raise OverrideError(f"{flag} expects key=value{hint}; got '{_shown(pair)}'.")
        if not raw.strip():
            value: Any = ""
        elif not structured:
            value = _scalar_or_text(raw)
        else:
            try:
                value = load_yaml(raw)
            except yaml.YAMLError as e:
                raise OverrideError(f"{flag} {_shown(pair)}: the value is not valid YAML ({yaml_problem(e)}); quote a "
                                    "text value and close brackets, e.g. key='a: b' or key=[a, b].") from None
        out[key.strip()] = value
    return out
