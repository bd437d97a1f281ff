"""Every registered agent and env declares a frozen `Options` dataclass (muse_common.settings): unknown
keys are refused with the closest valid name, wrong types with the expected one, and every field has a
docstring that `muse-llm run --list-options` prints."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from llm_side import registry
from llm_side.cli import main
from muse_common.settings import build_options, field_docs

OWNERS = [("agent", a) for a in registry.AGENTS] + [("env", e) for e in registry.ENVS]


def _options(kind: str, name: str) -> type:
    try:
        return registry.agent_options(name) if kind == "agent" else registry.env_options(name)
    except ImportError as e:  # an env whose package is an optional extra
        pytest.skip(f"{kind} {name} cannot be imported here: {e}")


def _make(kind: str, name: str, opts: dict) -> object:
    factory = registry.agent_factory(name) if kind == "agent" else registry.env_factory(name)
    return factory(registry.agent_envs(name)[0], None, opts) if kind == "agent" else factory(**opts)


@pytest.mark.parametrize(("kind", "name"), OWNERS)
def test_unknown_option_is_refused_with_a_suggestion(kind: str, name: str) -> None:
    cls = _options(kind, name)
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    field = dataclasses.fields(cls)[0].name
    typo = field[:-1] if len(field) > 3 else field + "x"
    with pytest.raises(ValueError, match=rf"unknown {name} option '{typo}'\. Did you mean '{field}'\?"):
        _make(kind, name, {typo: 1})


@pytest.mark.parametrize(("kind", "name"), OWNERS)
def test_wrong_types_are_refused_and_every_field_is_documented(kind: str, name: str) -> None:
    cls = _options(kind, name)
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        assert docs[f.name], f"{name} option '{f.name}' has no docstring"
        kinds = {hints[f.name]} | set(typing.get_args(hints[f.name]))
        if bool in kinds:
            with pytest.raises(ValueError, match=rf"{name} option '{f.name}' must be true or false, got 'maybe'"):
                build_options(cls, {f.name: "maybe"}, name)
            assert getattr(build_options(cls, {f.name: "false"}, name), f.name) is False
        elif int in kinds:
            with pytest.raises(ValueError, match=rf"{name} option '{f.name}'"):
                build_options(cls, {f.name: "many"}, name)
    assert build_options(cls, {}, name) == cls()  # the defaults are valid


def test_list_options_prints_every_field_with_its_doc(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--agent", "reflexion", "--env", "minecraft", "--list-options"]) == 0
    out = capsys.readouterr().out
    for cls in (registry.agent_options("reflexion"), registry.env_options("minecraft")):
        for name, doc in field_docs(cls).items():
            assert f"  {name} (" in out and doc in out, name
    assert "reflect_on_success (true|false, default true)" in out


def test_reflexion_refuses_what_it_used_to_ignore() -> None:
    """react, reflexion and muse took any key and any boolean spelling before; now both are errors."""
    make = registry.agent_factory("reflexion")
    with pytest.raises(ValueError, match="Did you mean 'reflect_on_success'"):
        make("alfworld", None, {"reflect_on_sucess": "false"})
    with pytest.raises(ValueError, match="must be true or false, got 'maybe'"):
        make("alfworld", None, {"reflect_on_success": "maybe"})
