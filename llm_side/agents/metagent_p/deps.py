"""`--agent deps`: the DEPS baseline (Wang et al., 2023) as paper 002 compares it: an LLM planner and
an LLM reflector (describe the failure, explain, re-plan), no verifier, no experience pools, and no
scene information in the planner's prompt. DEPS plans one flat workflow per (re)plan: paper 002 credits
the two-level decomposition of eq. 1 to Metagent-P's planner. The failure explanation reaches the
planner in the same words as Metagent-P's (`agent.advice`), naming no agent component."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from llm_side.agents.metagent_p import ENVS, KnobOptions, config_from
from llm_side.agents.metagent_p.agent import LADDER, MetagentPAgent
from muse_common.settings import build_options

DEPS = {**LADDER["base"], "scene": False, "decompose": False}


@dataclasses.dataclass(frozen=True)
class Options(KnobOptions):
    """DEPS's options: Metagent-P's knobs without the ablation switches (for those, use --agent metagent-p
    ablation=base); the scene and the sub-goal level are off, as DEPS plans."""

    scene: bool = False
    """Show the scene in the planner's prompt (DEPS: no visual information)."""
    decompose: bool = False
    """Eq. 1's sub-goal level (DEPS plans one flat workflow)."""


def make_agent(env_name: str, llm: Any, opts: Options | Mapping[str, Any] | None = None) -> MetagentPAgent:
    if env_name not in ENVS:
        raise ValueError(f"agent 'deps' runs on {' and '.join(ENVS)}, not env '{env_name}'")
    if isinstance(opts, Mapping) and set(opts) & {"ablation", "experience", "verifier", "metacognitive"}:
        raise ValueError("agent 'deps' has no ablation switches; use --agent metagent-p ablation=base instead")
    return MetagentPAgent(llm, env_name, config_from(build_options(Options, opts, "deps"), DEPS), name="deps")
