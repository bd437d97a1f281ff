"""`--agent metagent-p`: the Metagent-P agent (paper 002) on `minecraft` and `plancraft`.

Options (`--agent-opt key=value`): ablation=base|planner|verifier|full (Table 3 ladder, default
full), or the single switches experience=, verifier=, metacognitive=; max_tokens=N, max_replans=N|none
(per-episode re-plan cap; default none, the paper's), alpha=/beta= (eq. 7 weights), replan_limit=N,
decompose=true|false (eq. 1's sub-goal level), regulation=llm|message-rules (the latter an ablation, not
the paper's), rule_evidence=N (env confirmations before a rule may veto; default 0, the paper's check
before execution), rule_veto_limit=N|none (default none), memory_file=PATH (pools saved after every
episode).
"""

from __future__ import annotations

from typing import Any

from llm_side.agents.metagent_p.agent import LADDER, Config, MetagentPAgent

ENVS = ("minecraft", "plancraft")

__all__ = ["Config", "MetagentPAgent", "make_agent", "build_config"]


def _bool(v: Any) -> bool:
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def build_config(options: dict[str, Any], defaults: dict[str, Any] | None = None) -> Config:
    """Agent options -> Config; unknown keys and bad values raise ValueError naming the fix."""
    opts = dict(options or {})
    values: dict[str, Any] = dict(defaults or {})
    ablation = opts.pop("ablation", None)
    if ablation is not None:
        if ablation not in LADDER:
            raise ValueError(f"unknown ablation '{ablation}'; choose one of: {', '.join(LADDER)}")
        values.update(LADDER[ablation])
    fields = {f: t for f, t in Config.__annotations__.items()}
    for k, v in opts.items():
        if k not in fields:
            raise ValueError(f"unknown metagent-p option '{k}'; known: ablation, {', '.join(sorted(fields))}")
        t = str(fields[k])
        try:
            if t == "int | None":
                values[k] = None if str(v).strip().lower() in ("", "none", "off") else int(v)
            elif t == "bool":
                values[k] = _bool(v)
            elif t == "int":
                values[k] = int(v)
            elif t == "float":
                values[k] = float(v)
            else:
                values[k] = None if v in (None, "", "none") else str(v)
        except ValueError as e:
            raise ValueError(f"metagent-p option {k}={v!r} is not a valid {t}") from e
    return Config(**values)


def make_agent(env_name: str, llm: Any, options: dict[str, Any]) -> MetagentPAgent:
    if env_name not in ENVS:
        raise ValueError(f"agent 'metagent-p' runs on {' and '.join(ENVS)}, not env '{env_name}'")
    return MetagentPAgent(llm, env_name, build_config(options))
