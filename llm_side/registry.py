"""Names on the `muse-llm` command line -> factories, imported lazily so that `muse-llm tasks`
never pays for torch and an env's heavy package is imported only when that env is used.

An env factory is `make_env(**options) -> TextEnv`. An agent factory is
`make_agent(env_name: str, llm: LLM, options: dict) -> Agent`; it raises ValueError naming the env
when the pair makes no sense.
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


ENV_OPTIONS: dict[str, dict[str, tuple[type, float | None]]] = {
    "alfworld": {"data": (str, None), "split": (str, None), "cache_games": (int, 0), "max_steps": (int, 1),
                 "expert": (bool, None), "shots": (int, 0)},
    "scienceworld": {"split": (str, None), "variations_per_task": (int, 1), "simplifications": (str, None),
                     "step_timeout_s": (float, 0), "jar_path": (str, None)},
    "minecraft": {"hazards": (bool, None), "max_steps": (int, 1)},
    "plancraft": {"split": (str, None), "max_steps": (int, 1), "resolution": (str, None)},
}
"""`--env-opt` types and smallest values, checked by the CLI before the env is built (an option not
listed here is passed through and the env's factory judges it)."""

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
