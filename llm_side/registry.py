"""Names on the `muse-llm` command line -> factories, imported lazily so that `muse-llm tasks`
never pays for torch and an env's heavy package is imported only when that env is used.

An env factory is `make_env(opts) -> TextEnv` and an agent factory `make_agent(env_name: str, llm: LLM,
opts) -> Agent`, where `opts` is the module's frozen `Options` dataclass (`AGENT_OPTIONS`, `ENV_OPTIONS`)
or a mapping that `muse_common.settings.build_options` turns into one, refusing an unknown key (with the
closest valid one) or a value of the wrong type. An agent factory raises ValueError naming the env when
the pair makes no sense.

Third-party envs and agents are a registered extension point: a package declares them under the Python
entry-point groups `muse_llm.envs` and `muse_llm.agents` (`[project.entry-points."muse_llm.envs"]` in its
pyproject.toml, `mine = "my_pkg.envs:make_env"`), and `--env mine` finds them once that package is
installed. Nothing else is imported: a name from the command line or a settings file is looked up here,
never imported as a `module:attr` path, so a settings file someone sends cannot run code.
A plugin env factory gets its `--env-opt` values as keywords, a plugin agent factory the mapping.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

ENVS: dict[str, str] = {
    "alfworld": "llm_side.envs.alfworld:make_env",
    "scienceworld": "llm_side.envs.scienceworld:make_env",
    "minecraft": "llm_side.envs.minecraft:make_env",
    "plancraft": "llm_side.envs.plancraft:make_env",
}

AGENTS: dict[str, str] = {
    "react": "llm_side.agents.react:make_agent",
    "reflexion": "llm_side.agents.reflexion:make_agent",
    "muse": "llm_side.agents.muse:make_agent",
    "refrea": "llm_side.agents.refrea:make_agent",
    "cot": "llm_side.agents.baselines:make_cot",
    "saycan": "llm_side.agents.baselines:make_saycan",
    "metagent-p": "llm_side.agents.metagent_p:make_agent",
    "deps": "llm_side.agents.metagent_p.deps:make_agent",
}


AGENT_OPTIONS: dict[str, str] = {
    "react": "llm_side.agents.react:Options",
    "reflexion": "llm_side.agents.reflexion:Options",
    "muse": "llm_side.agents.muse:Options",
    "refrea": "llm_side.agents.refrea:Options",
    "cot": "llm_side.agents.baselines:CoTOptions",
    "saycan": "llm_side.agents.baselines:SayCanOptions",
    "metagent-p": "llm_side.agents.metagent_p:Options",
    "deps": "llm_side.agents.metagent_p.deps:Options",
}
"""Each agent's `Options` dataclass, beside its factory: the `--agent-opt` keys, types, rules and docs."""

ENV_OPTIONS: dict[str, str] = {name: path.replace(":make_env", ":Options") for name, path in ENVS.items()}
"""Each env's `Options` dataclass, beside its factory: the `--env-opt` keys, types, rules and docs."""

AGENT_ENVS: dict[str, tuple[str, ...]] = {
    "metagent-p": ("minecraft", "plancraft"),
    "deps": ("minecraft", "plancraft"),
}
"""Agents that run on some envs only. The others (react, reflexion, muse, refrea, cot, saycan) are
env-generic: their prompts come from the env (`react_examples`, `instructions`), so they run on every env."""


def agent_envs(agent: str) -> tuple[str, ...]:
    """The registered envs `agent` runs on."""
    return AGENT_ENVS.get(agent, tuple(ENVS))


ENTRY_POINT_GROUPS: dict[str, str] = {"env": "muse_llm.envs", "agent": "muse_llm.agents"}
"""The Python entry-point group third-party envs and agents register under (see the module docstring)."""


def plugins(kind: str) -> dict[str, Any]:
    """Installed third-party `kind`s ("env" or "agent"): name -> importlib.metadata EntryPoint. A plugin never
    replaces a built-in of the same name."""
    from importlib.metadata import entry_points

    table = ENVS if kind == "env" else AGENTS
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUPS[kind]) if ep.name not in table}


def names(kind: str) -> list[str]:
    """Every name `--env` / `--agent` takes: the built-ins, then the installed plugins."""
    table = ENVS if kind == "env" else AGENTS
    return [*table, *sorted(plugins(kind))]


def is_plugin(kind: str, name: str) -> bool:
    """Whether `name` is an installed third-party `kind` (not a built-in)."""
    table = ENVS if kind == "env" else AGENTS
    return name not in table and name in plugins(kind)


def unknown_message(kind: str, name: str) -> str:
    """The one line for a name that is neither built in nor registered (a `module:factory` path included)."""
    how = (f"a third-party {kind} is installed as a package that registers it under the entry-point group "
           f"{ENTRY_POINT_GROUPS[kind]}")
    if ":" in name:
        return (f"{kind} '{name}' is not a registered {kind}: a module:factory path is never imported or run "
                f"(a settings file must not run code); {how}; choose one of: {', '.join(names(kind))}.")
    return f"unknown {kind} '{name}'; choose one of: {', '.join(names(kind))} ({how})."


def _load(table: dict[str, str], kind: str, name: str) -> Callable[..., Any]:
    if name in table:
        module, attr = table[name].split(":")
        return getattr(importlib.import_module(module), attr)
    found = plugins(kind).get(name) if kind in ENTRY_POINT_GROUPS else None
    if found is None:
        raise ValueError(unknown_message(kind, name))
    try:
        factory = found.load()
    except AttributeError as exc:
        raise ValueError(f"{kind} '{name}' (entry point {found.value} in group {found.group}) cannot be "
                         f"loaded: {exc}") from None
    if not callable(factory):
        raise ValueError(f"{kind} '{name}' (entry point {found.value}) is not a factory function.")
    return factory


def env_factory(name: str) -> Callable[..., Any]:
    return _load(ENVS, "env", name)


def agent_factory(name: str) -> Callable[..., Any]:
    return _load(AGENTS, "agent", name)


def agent_options(name: str) -> type:
    """The `Options` dataclass of a registered agent."""
    return _load(AGENT_OPTIONS, "agent", name)


def env_options(name: str) -> type:
    """The `Options` dataclass of a registered env."""
    return _load(ENV_OPTIONS, "env", name)
