"""A `muse-llm run --agent scripted-test` factory for the fault tests (a muse_llm.agents entry point,
registered by muse_fault_plugins-0.dist-info beside this file).

It plugs a ScriptedLLM into the real ReAct agent, so the real CLI, runner and Minecraft env run
without a model. The replies mix valid actions with garbage (empty, overlong, JSON, no words) so
every run also exercises invalid-action handling. Each call sleeps a little so a kill lands mid-run.
"""

from __future__ import annotations

import os
import time
from typing import Any

from llm_side.agents.react import ReActAgent
from llm_side.backends.scripted import ScriptedLLM

REPLIES = ["> find oak_log", "", "> approach oak_log", "x" * 500, "> mine oak_log", '{"action": "mine"}',
           "!!! ???", "> craft oak_planks"]


def _reply(prompt: str, i: int) -> str:
    time.sleep(float(os.environ.get("SCRIPTED_REPLY_SECONDS", "0.05")))  # slower: two writers overlap
    return REPLIES[i % len(REPLIES)]


def make_agent(env_name: str, llm: Any, options: dict[str, Any]) -> ReActAgent:
    return ReActAgent(ScriptedLLM(_reply))
