"""`--agent metagent-p`: the Metagent-P agent (paper 002) on `minecraft` and `plancraft`.

Options (`--agent-opt key=value`, listed with `muse-llm run --agent metagent-p --list-options`): the
Table 3 ladder rung `ablation=base|planner|verifier|full` (default: the full agent), or the single
switches experience=, verifier=, metacognitive=; max_tokens=N, max_replans=N|none (per-episode re-plan
cap; default none, the paper's), alpha=/beta= (eq. 7 weights), replan_limit=N, decompose=true|false
(eq. 1's sub-goal level), regulation=llm|message-rules (the latter an ablation, not the paper's),
rule_evidence=N (env confirmations before a rule may veto; default 0, the paper's check before
execution), rule_veto_limit=N|none (default none), memory_file=PATH (pools saved after every episode).
Defaults are `agent.Config`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from llm_side.agents.metagent_p.agent import LADDER, Config, MetagentPAgent
from llm_side.agents.metagent_p.reflector import REGULATIONS
from muse_common.settings import Allowed, build_options, integer_at_least, setting

ENVS = ("minecraft", "plancraft")

__all__ = ["Config", "MetagentPAgent", "Options", "make_agent", "build_config", "config_from"]


@dataclasses.dataclass(frozen=True)
class KnobOptions:
    """The knobs Metagent-P and DEPS share (paper 002 §3; defaults are `agent.Config`'s)."""

    scene: bool = Config.scene
    """Show the scene (inventory, surroundings) in the planner's prompt; DEPS plans without it."""
    decompose: bool = Config.decompose
    """Eq. 1's first level: decompose the task into sub-goals (Minecraft; Plancraft tasks are one target)."""
    regulation: str = setting(Config.regulation, Allowed(lambda v, _: v in REGULATIONS,
                                                         f"one of {', '.join(REGULATIONS)}"))
    """`llm` (the paper's) or `message-rules` (an ablation with hand-written fixes, not the paper's)."""
    max_tokens: int = setting(Config.max_tokens, integer_at_least(1))
    """Token limit of a planner reply (verifier and reflector replies: at most 128)."""
    max_replans: int | None = setting(Config.max_replans, integer_at_least(0))
    """Replans per episode, then the agent goes on without replanning; none = no cap (the paper's: the env's
    step budget bounds an episode, and paper 002 reports replanning counts of 13-28)."""
    plan_retries: int = setting(Config.plan_retries, integer_at_least(0))
    """Retries of a planner reply that does not parse."""
    alpha: float = setting(Config.alpha, Allowed(lambda v, o: abs(v + o.beta - 1.0) <= 1e-6,
                                                 "alpha + beta = 1 (beta={beta})"))
    """Eq. 7 weight of C_history, the success rate of similar past plans, in the reflector's confidence."""
    beta: float = Config.beta
    """Eq. 7 weight of C_LLM, the LLM's own judgement, in the reflector's confidence."""
    replan_limit: int = setting(Config.replan_limit, integer_at_least(0))
    """Replans of one sub-goal before the reflector gives it up."""
    max_evaluations: int = setting(Config.max_evaluations, integer_at_least(0))
    """Reflector re-evaluations while its confidence is <= 0.5."""
    rule_evidence: int = setting(Config.rule_evidence, integer_at_least(0))
    """Confirmations by the environment before a verifier rule may veto an action; 0 = the paper's check of
    symbolic rules before execution."""
    rule_veto_limit: int | None = setting(Config.rule_veto_limit, integer_at_least(0))
    """Vetoes of one action per episode before the action runs anyway; none = no cap (the paper's)."""
    memory_file: str | None = Config.memory_file
    """JSON file the experience pools are loaded from and saved to after every episode; none = in memory."""


@dataclasses.dataclass(frozen=True)
class Options(KnobOptions):
    """Metagent-P's options (paper 002): the Table 3 ablation rung or its switches, and the knobs."""

    ablation: Literal["base", "planner", "verifier", "full"] | None = None
    """Table 3 rung: base (planner), planner (+ experience pools), verifier (+ verifier), full
    (+ metacognitive reflector); none = the full agent. A switch (experience, verifier, metacognitive)
    overrides the rung."""
    experience: bool | None = None
    """Experience pools in the planner's prompt; none = as the rung sets it."""
    verifier: bool | None = None
    """The verifier checks each action before it runs; none = as the rung sets it."""
    metacognitive: bool | None = None
    """The metacognitive reflector (eq. 7) judges failures; none = as the rung sets it."""


def config_from(opts: KnobOptions, base: Mapping[str, Any]) -> Config:
    """`agent.Config` from `base` (a rung of the ladder, DEPS's settings) overridden by every option set."""
    values = dict(base)
    for f in dataclasses.fields(opts):
        value = getattr(opts, f.name)
        if f.name != "ablation" and (value is not None or f.name == "memory_file"):
            values[f.name] = value
    values["memory_file"] = values.get("memory_file") or None
    return Config(**values)


def build_config(opts: Options | Mapping[str, Any] | None) -> Config:
    """Agent options -> Config; unknown keys and bad values raise ValueError naming the fix."""
    opts = build_options(Options, opts, "metagent-p")
    return config_from(opts, LADDER[opts.ablation] if opts.ablation else {})


def make_agent(env_name: str, llm: Any, opts: Options | Mapping[str, Any] | None = None) -> MetagentPAgent:
    if env_name not in ENVS:
        raise ValueError(f"agent 'metagent-p' runs on {' and '.join(ENVS)}, not env '{env_name}'")
    return MetagentPAgent(llm, env_name, build_config(opts))
