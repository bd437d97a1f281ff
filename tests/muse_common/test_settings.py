"""muse_common.settings on a small settings class of its own (the muse-wm config and the LLM options are
tested where they live)."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest

from muse_common.settings import (
    Allowed,
    Settings,
    SettingsError,
    build_options,
    describe,
    field_docs,
    integer_at_least,
    read_yaml_mapping,
    setting,
)


@dataclasses.dataclass(frozen=True)
class Inner:
    """A section."""

    low: int = setting(1, integer_at_least(0))
    """Lower end."""
    high: int = setting(5, Allowed(lambda v, s: v > s.low, "more than low={low}"))
    """Upper end."""


@dataclasses.dataclass(frozen=True)
class Root:
    """A root."""

    flag: bool = True
    """A switch."""
    mode: Literal["a", "b"] = "a"
    """A choice."""
    limit: int | None = None
    """Optional count."""
    inner: Inner = Inner()


READ = Settings(Root, noun="test key")


def test_types_rules_and_suggestions() -> None:
    assert READ.build({"flag": "false", "limit": "3", "inner": {"high": 9}}) == Root(False, "a", 3, Inner(1, 9))
    for data, words in [
        ({"flag": "maybe"}, "test key 'flag' must be true or false, got 'maybe'"),
        ({"flag": 1}, "must be true or false, got 1"),  # one spelling: YAML's true/false
        ({"limit": "many"}, "test key 'limit' must be an integer, got 'many'"),  # T | None says what T wants
        ({"mode": "c"}, "choose one of ['a', 'b']"),
        ({"inner": {"hihg": 2}}, "unknown test key 'inner.hihg'. Did you mean 'high'?"),
        ({"inner": {"high": 0}}, "test key 'inner.high' = 0 is out of range; allowed: more than low=1."),
        ({"inner": 3}, "'inner' is a section"),
    ]:
        with pytest.raises(SettingsError) as e:
            READ.build(data)
        assert words in str(e.value), (data, str(e.value))


def test_dotted_overrides_and_options() -> None:
    data = READ.apply_dotted({}, {"inner.low": 2, "mode": "b"}, explicit := set())
    assert READ.build(data) == Root(mode="b", inner=Inner(low=2)) and explicit == {"inner.low", "mode"}
    with pytest.raises(SettingsError, match="unknown test key 'inner.lo'. Did you mean 'low'"):
        READ.apply_dotted({}, {"inner.lo": 1}, set())
    assert build_options(Inner, {"low": "2"}, "thing").low == 2
    assert build_options(Inner, Inner(), "thing") == Inner()
    with pytest.raises(SettingsError, match="unknown thing option 'lo'"):
        build_options(Inner, {"lo": 1}, "thing")


def test_docs_are_read_from_the_source() -> None:
    assert field_docs(Root) == {"flag": "A switch.", "mode": "A choice.", "limit": "Optional count.", "inner": ""}
    text = describe(Inner)
    assert "high (int, default 5; allowed: more than low=1)" in text and "Upper end." in text  # {low} filled in


def test_yaml_refuses_a_key_given_twice(tmp_path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("a: 1\nb: 2\na: 3\n")
    with pytest.raises(SettingsError, match=r"key 'a' is given twice \(first on line 1\)"):
        read_yaml_mapping(p, what="settings")
    p.write_text("")
    with pytest.raises(SettingsError, match="settings .* is empty; give the settings."):
        read_yaml_mapping(p, what="settings")
