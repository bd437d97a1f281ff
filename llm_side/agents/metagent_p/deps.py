"""`--agent deps`: the DEPS baseline (Wang et al., 2023) as paper 002 compares it: an LLM planner and
an LLM reflector (describe the failure, explain, re-plan), no verifier, no experience pools, and no
scene information in the planner's prompt. DEPS plans one flat workflow per (re)plan: paper 002 credits
the two-level decomposition of eq. 1 to Metagent-P's planner. The failure explanation reaches the
planner in the same words as Metagent-P's (`agent.advice`), naming no agent component."""

from __future__ import annotations

from typing import Any

from llm_side.agents.metagent_p import ENVS, build_config
from llm_side.agents.metagent_p.agent import LADDER, MetagentPAgent

DEPS = {**LADDER["base"], "scene": False, "decompose": False}


def make_agent(env_name: str, llm: Any, options: dict[str, Any]) -> MetagentPAgent:
    if env_name not in ENVS:
        raise ValueError(f"agent 'deps' runs on {' and '.join(ENVS)}, not env '{env_name}'")
    opts = dict(options or {})
    if "ablation" in opts or set(opts) & {"experience", "verifier", "metacognitive"}:
        raise ValueError("agent 'deps' has no ablation switches; use --agent metagent-p ablation=base instead")
    return MetagentPAgent(llm, env_name, build_config(opts, defaults=DEPS), name="deps")
