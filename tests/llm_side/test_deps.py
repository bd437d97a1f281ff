"""The DEPS baseline: LLM planner + LLM reflector, no verifier, no experience, no scene."""

from __future__ import annotations

import json

import pytest

from llm_side.agents.metagent_p.deps import make_agent
from llm_side.backends.scripted import ScriptedLLM
from llm_side.envs.minecraft import make_env
from llm_side.harness.runner import run_eval
from llm_side.registry import agent_factory
from muse_common.files import read_jsonl

BAD = json.dumps({"workflow": [{"name": "mine", "args": {"obj": "iron_ore", "tool": "wooden_pickaxe"}}]})


def test_deps_replans_from_llm_reflection_without_verifier_or_pools(tmp_path):
    llm = ScriptedLLM(lambda p, i: BAD if "RESPONSE FORMAT" in p else
                      '{"rational": false, "suggestion": "find iron ore first"}')
    agent = agent_factory("deps")("minecraft", llm, {"max_replans": "2"})
    assert agent.name == "deps" and not agent.cfg.verifier and not agent.cfg.experience
    run_eval(make_env(hazards="false"), agent, env_name="minecraft", agent_name="deps",
             task_ids=["mine_iron_ore"], episodes=1, max_steps=3, out_dir=tmp_path, progress=False)
    (rec,) = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert not rec["success"] and rec["replans"] >= 1 and rec["reflections"] >= 1
    assert rec["rule_pool"] == 0 and rec["success_pool"] == 0 and rec["failure_pool"] == 0
    assert not any("execution constraints" in p for p in llm.prompts)  # no verifier
    plan_prompts = [p for p in llm.prompts if "RESPONSE FORMAT" in p]
    assert "find iron ore first" in plan_prompts[1] and "current environment: unknown" in plan_prompts[0]
    assert not any("Break the task into" in p for p in llm.prompts)  # one flat workflow, no eq. 1 levels
    # the advice names no agent component a small model could take for a game object ("find reflector")
    advice = [p.split("the reflection is:")[-1] for p in plan_prompts[1:]]
    assert advice and not any(w in a.lower() for a in advice for w in ("reflector", "verifier", "planner"))


def test_deps_rejects_ablation_switches_and_other_envs():
    with pytest.raises(ValueError, match="metagent-p ablation"):
        make_agent("minecraft", ScriptedLLM(["x"]), {"verifier": "true"})
    with pytest.raises(ValueError, match="scienceworld"):
        make_agent("scienceworld", ScriptedLLM(["x"]), {})


@pytest.mark.slow
def test_real_model_runs_deps_on_a_real_task(tmp_path):
    from llm_side.backends import load_llm

    agent = make_agent("minecraft", load_llm("smollm2"), {"max_tokens": "48", "plan_retries": "0",
                                                          "max_replans": "1"})
    summary = run_eval(make_env(), agent, env_name="minecraft", agent_name="deps", task_ids=["mine_log"],
                       episodes=1, max_steps=2, out_dir=tmp_path, progress=False)
    (rec,) = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert rec["agent"] == "deps" and 1 <= rec["steps"] <= 2 and rec["reason"] is None
    assert all(isinstance(o, str) and o for o in rec["observations"])
    assert rec["replans"] <= 1 and summary["complete"]
