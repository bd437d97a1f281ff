"""Names on the `muse-llm` command line -> factories, imported lazily so that `muse-llm tasks`
never pays for torch and an env's heavy package is imported only when that env is used.

An env factory is `make_env(opts) -> TextEnv` and an agent factory `make_agent(env_name: str, llm: LLM,
opts) -> Agent`, where `opts` is the module's frozen `Options` dataclass (`AGENT_OPTIONS`, `ENV_OPTIONS`)
or a mapping that `muse_common.settings.build_options` turns into one, refusing an unknown key (with the
closest valid one) or a value of the wrong type. An agent factory raises ValueError naming the env when
the pair makes no sense.
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


def _load(table: dict[str, str], kind: str, name: str) -> Callable[..., Any]:
    if name not in table:
        raise ValueError(f"unknown {kind} '{name}'; choose one of: {', '.join(sorted(table))}.")
    module, attr = table[name].split(":")
    return getattr(importlib.import_module(module), attr)


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
