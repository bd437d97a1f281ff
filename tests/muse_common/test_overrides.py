"""One `key=value` parser for `muse-wm --set` and `muse-llm --env-opt/--agent-opt`."""

from __future__ import annotations

import pytest

from muse_common.overrides import OverrideError, parse_key_values


def test_structured_values_are_yaml_and_later_pairs_win():
    got = parse_key_values(["model.deter=64", "env.tasks=[reach-v3, push-v3]", "a=1e-4", "a=true", "b="], "--set",
                           structured=True)
    assert got == {"model.deter": 64, "env.tasks": ["reach-v3", "push-v3"], "a": True, "b": ""}


def test_structured_bad_yaml_names_flag_pair_and_column():
    with pytest.raises(OverrideError, match=r"^--set model.deter=\[: the value is not valid YAML \(.*line 1, column 2"):
        parse_key_values(["model.deter=["], "--set", structured=True)


def test_scalar_values_keep_anything_else_as_typed_text():
    got = parse_key_values(["n=3", "p=/x/y", "e=[", "m={x: 1}", "l=[1, 2]"], "--agent-opt", structured=False)
    assert got == {"n": 3, "p": "/x/y", "e": "[", "m": "{x: 1}", "l": "[1, 2]"}


@pytest.mark.parametrize("pair", ["model.deter", "=3", " =x"])
def test_a_pair_without_key_or_equals_names_the_flag(pair):
    with pytest.raises(OverrideError, match=rf"^--env-opt expects key=value; got '{pair}'\.$"):
        parse_key_values([pair], "--env-opt", structured=False)
    with pytest.raises(OverrideError, match=r"e\.g\. --set model\.deter=512"):
        parse_key_values([pair], "--set", structured=True, example="model.deter=512")
