"""One compiled function per (kind, graph, extra) per process.

Adapting task after task, resuming in-process or running the test suite builds the same train and
policy steps many times; keyed on the NNX graph definition (hashable, and equal for equal
structures and static configs) they are compiled once. Unhashable keys are not cached.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_JITTED: dict[Any, Callable] = {}


def memo_jit(kind: str, graphdef: Any, extra: Any, build: Callable[[], Callable]) -> Callable:
    """`build()` the first time this (kind, graphdef, extra) is asked for, the same function after."""
    key = (kind, graphdef, extra)
    try:
        hash(key)
    except TypeError:
        return build()
    if key not in _JITTED:
        _JITTED[key] = build()
    return _JITTED[key]
