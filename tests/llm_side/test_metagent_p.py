"""Metagent-P: parsers, rule scoring (eq. 5), confidence (eq. 7), verifier, reflector, pools, and a
real run with the offline model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_side.agents.metagent_p import build_config, make_agent
from llm_side.agents.metagent_p.memory import FailureCase, Pool, SuccessCase
from llm_side.agents.metagent_p.parsing import (
    extract_json,
    parse_reflection,
    parse_scores,
    parse_verdict,
    parse_workflow,
)
from llm_side.agents.metagent_p.reflector import Reflector, confidence
from llm_side.agents.metagent_p.verifier import Verifier, parse_rule_text, rule_score
from llm_side.backends.scripted import ScriptedLLM
from llm_side.envs.minecraft import make_env
from llm_side.envs.minecraft.data import canonical
from muse_common.files import read_jsonl

sys.path.insert(0, str(Path(__file__).parent))
from metagent_fakes import GOOD_SCORES, BagOfWordsEmbedder, agent_with, play  # noqa: E402


# ---- parsers: never raise, recover what is there ------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_parsers_never_raise_on_arbitrary_text(text):
    for parse in (extract_json, parse_workflow, parse_verdict, parse_scores, parse_reflection):
        parse(text)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["find", "approach", "mine", "craft"]), min_size=1, max_size=5),
       st.integers(1, 5), st.sampled_from(["", "Sure! Here is the plan:\n", "```json\n"]))
def test_workflow_round_trip_with_times_and_noise(names, times, prefix):
    wf = {"workflow": [{"times": str(times), "actions": [{"name": n, "args": {"obj": "log"}} for n in names]}]}
    got = parse_workflow(prefix + json.dumps(wf) + ",\n trailing prose")
    assert [a["name"] for a in got] == names * times


def test_parsers_repair_and_reject():
    assert parse_workflow("{'workflow': [{'name': 'find', 'args': {'obj': 'log'}},]}") == [
        {"name": "find", "args": {"obj": "log"}}]
    assert parse_workflow('{"workflow": [') is None and parse_workflow("no json here") is None
    ok, sugg, rules = parse_verdict('x {"return": {"success": false, "suggestion": "get sticks"}, '
                                    '"craft, ladder": ["Rule1: Check if inventory contains 7 stick"]}')
    assert (ok, sugg, rules) == (False, "get sticks", {"craft, ladder": ["Rule1: Check if inventory contains 7 stick"]})
    assert parse_scores(GOOD_SCORES) == (0.9, 0.9, 0.95)
    assert parse_scores("Common-Sense Consistency: 0.8\nCondition Clarity: 0.7\nAction Feasibility: 90") == (
        0.8, 0.7, 0.9)
    assert parse_reflection('{"rational": true, "suggestion": "go on", "confidence": 0.7}') == (True, "go on", 0.7)


# ---- formulas pinned ---------------------------------------------------------------------------
def test_rule_score_is_eq5_with_paper_weights():
    assert rule_score(1, 0, 0) == pytest.approx(0.3)
    assert rule_score(0, 1, 0) == pytest.approx(0.3)
    assert rule_score(0, 0, 1) == pytest.approx(0.4)
    assert rule_score(0.9, 0.8, 0.85) == pytest.approx(0.3 * 0.9 + 0.3 * 0.8 + 0.4 * 0.85)


def test_confidence_is_eq7_and_weights_must_sum_to_one():
    assert confidence(0.2, 0.6) == pytest.approx(0.4)
    assert confidence(1.0, 0.0, alpha=0.7, beta=0.3) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="sum to 1"):
        confidence(0.5, 0.5, alpha=0.6, beta=0.6)


def test_rules_are_kept_only_above_085():
    v = Verifier(ScriptedLLM(['{"common_sense_consistency": 0.85, "condition_clarity": 0.85, '
                              '"action_feasibility": 0.85}']), canon=canonical)
    assert v.learn("craft, ladder", "Rule1: Check if inventory contains 7 stick") is None  # exactly 0.85
    v = Verifier(ScriptedLLM([GOOD_SCORES]), canon=canonical)
    rule = v.learn("craft, ladder", "Rule1: Check if inventory contains 7 stick and a crafting table")
    assert rule is not None and rule.score == pytest.approx(0.3 * 0.9 + 0.3 * 0.9 + 0.4 * 0.95)
    assert [(c.item, c.count) for c in rule.conditions] == [("stick", 7), ("crafting_table", 1)]
    assert parse_rule_text("Rule2: Check if inventory contains 3 cobblestone and 2 stick")[0].count == 3
    assert parse_rule_text("IF night THEN sleep") == []


def test_verifier_checks_rule_pool_first_then_llm():
    verdict = ('{"return": {"success": false, "suggestion": "Mine cobblestone first."}, '
               '"craft, stone pickaxe": ["Rule1: Check if inventory contains crafting table", '
               '"Rule2: Check if inventory contains 3 cobblestone and 2 stick"]}')
    llm = ScriptedLLM(lambda p, i: GOOD_SCORES if "Rule:" in p else verdict)
    v = Verifier(llm, canon=canonical)
    act = {"name": "craft", "args": {"obj": {"stone pickaxe": 1}, "platform": "crafting table"}}
    fb = v.check(act, {"crafting_table": 1, "stick": 2})
    assert (fb.ok, fb.source) == (False, "llm") and len(v) == 2  # two rules learned bottom-up
    calls = len(llm.prompts)
    v.observe(act, {"crafting_table": 1, "stick": 2}, failed=True)  # ran without cobblestone and failed
    fb = v.check(act, {"crafting_table": 1, "stick": 2})
    assert (fb.ok, fb.source) == (False, "rule") and "3 cobblestone" in fb.suggestion
    assert v.check(act, {"crafting_table": 1, "stick": 2, "cobblestone": 3}).ok
    assert len(llm.prompts) == calls  # covered by rules: no LLM call


def test_reflector_reevaluates_below_05():
    replies = ['{"rational": true, "suggestion": "a", "confidence": 0.2}',
               '{"rational": true, "suggestion": "b", "confidence": 0.9}']
    r = Reflector(ScriptedLLM(replies), BagOfWordsEmbedder(), alpha=0.2, beta=0.8)
    ev = r.evaluate("mine, stone", ["mine stone"], "Failed: x", ["dig-down 12"], None, ["craft furnace"])
    assert ev.c_history == pytest.approx(0.0)  # 0.2 * 0 + 0.8 * 0.2 = 0.16 <= 0.5: re-evaluated
    assert ev.tries == 2 and ev.suggestion == "b" and ev.confidence == pytest.approx(0.8 * 0.9) and ev.accepted
    same = Reflector(ScriptedLLM(replies), BagOfWordsEmbedder()).evaluate(
        "mine, stone", [], "Failed: x", ["craft furnace"], None, ["craft furnace"])
    assert same.c_history == pytest.approx(1.0) and same.tries == 1  # 0.5 * 1 + 0.5 * 0.2 = 0.6 accepted
    assert r.monitor(failed=True, replans_of_subgoal=0) and not r.monitor(False, 3) and r.monitor(False, 4)


def test_pools_retrieve_by_similarity_and_round_trip():
    emb = BagOfWordsEmbedder()
    pool = Pool(SuccessCase, emb)
    pool.add(SuccessCase("iron_pickaxe", "forest", ["find oak_log"], {}))
    pool.add(SuccessCase("oak_planks", "desert", ["craft oak_planks"], {}))
    assert pool.retrieve("task: oak_planks; scene: desert", k=1)[0][1].task == "oak_planks"
    fresh = Pool(SuccessCase, emb)
    fresh.load_json(pool.to_json() + [{"junk": 1}])
    assert len(fresh) == 2
    fp = Pool(FailureCase, emb)
    fp.add(FailureCase("mine, iron_ore", ["mine iron_ore"], "y=40", "use a stone pickaxe"))
    assert fp.retrieve("subgoal: mine, iron_ore", k=3)[0][1].suggestion == "use a stone pickaxe"


# ---- the agent ---------------------------------------------------------------------------------
PLAN = json.dumps({"workflow": [
    {"times": "1", "actions": [{"name": "find", "args": {"obj": "log"}}, {"name": "approach", "args": {"obj": "log"}}]},
    {"times": "2", "actions": [{"name": "mine", "args": {"obj": "log", "tool": None}}]},
    {"times": "1", "actions": [{"name": "craft", "args": {"obj": {"planks": 1}, "materials": {"log": 1}}}]}]})


def scripted(prompt: str, i: int) -> str:
    if "Rule:" in prompt:
        return GOOD_SCORES
    if "Break the task into" in prompt:
        return '{"subgoals": ["obtain 1 oak_planks"]}'
    if "execution constraints" in prompt:
        return ('{"return": {"success": true, "suggestion": ""}, '
                '"craft, planks": ["Rule1: Check if inventory contains 1 log"]}')
    if "RESPONSE FORMAT" in prompt:
        return PLAN
    return '{"rational": false, "suggestion": "find a tree", "confidence": 0.8}'


def test_agent_plans_verifies_executes_and_grows_pools(tmp_path):
    mem = tmp_path / "pools.json"
    agent = agent_with(scripted, memory_file=mem)
    won, traj = play(agent, make_env(hazards="false"), "craft_planks")
    assert won and [a for a, _ in traj][-1] == "craft oak_planks"
    ex = agent.episode_extras()
    assert ex["success_pool"] == 1 and ex["rule_pool"] == 1 and ex["replans"] == 0
    llm = agent.llm
    n = len(llm.prompts)
    assert play(agent, make_env(hazards="false"), "craft_planks", seed=2)[0]
    first_plan_prompt = next(p for p in llm.prompts[n:] if "RESPONSE FORMAT" in p)
    assert 'based on experience: task oak_planks: plan ["find oak_log"' in first_plan_prompt
    saved = json.loads(mem.read_text())
    assert saved["rules"][0]["key"] == "craft, oak_planks" and saved["success"][0]["task"] == "oak_planks"
    again = make_agent("minecraft", ScriptedLLM(scripted), {"memory_file": str(mem)})
    assert len(again.successes) == 2 and len(again.verifier) == 1
    again.load_memory({})  # the runner's "fresh task" keeps cross-task pools
    assert len(again.successes) == 2


def test_malformed_plans_retry_then_fall_back_without_crashing():
    agent = agent_with(lambda p, i: "I think you should {{{ chop" if "RESPONSE FORMAT" in p else "nonsense",
                       plan_retries=2, max_replans=3)
    llm = agent.llm
    env = make_env(hazards="false")
    _, traj = play(agent, env, "mine_log", steps=6)
    assert traj[0][0] == "find oak_log"  # exploratory step of this task (its target is oak_log)
    assert sum("Break the task into" in p for p in llm.prompts[:3]) == 3  # decomposition: 1 try + 2 retries
    assert sum("current sub-goal" in p for p in llm.prompts[3:6]) == 3  # actions: 1 try + 2 retries
    assert agent.episode_extras()["plan_fallbacks"] >= 1


def test_failed_action_triggers_reflection_and_replanning():
    bad = json.dumps({"workflow": [{"name": "mine", "args": {"obj": "iron_ore", "tool": "wooden_pickaxe"}}]})
    agent = agent_with(lambda p, i: bad if "RESPONSE FORMAT" in p else scripted(p, i), ablation="planner")
    play(agent, make_env(hazards="false"), "mine_iron_ore", steps=3)
    ex = agent.episode_extras()
    assert ex["reflections"] >= 1 and ex["replans"] >= 1 and ex["failure_pool"] >= 1


def test_options_ladder_and_errors():
    assert build_config({"ablation": "base"}).verifier is False
    assert build_config({"ablation": "verifier"}).metacognitive is False
    assert build_config({}).metacognitive is True
    with pytest.raises(ValueError, match="unknown metagent-p option"):
        build_config({"colour": "red"})
    with pytest.raises(ValueError, match="ablation"):
        build_config({"ablation": "everything"})
    with pytest.raises(ValueError, match="alfworld"):
        make_agent("alfworld", ScriptedLLM(["x"]), {})


@pytest.mark.slow
def test_real_model_runs_metagent_p_on_real_tasks(tmp_path):
    from llm_side.backends import load_llm
    from llm_side.harness.runner import run_eval

    # tiny budget: one plan, one verification (LLM, no rule yet), at most one replan, one step
    agent = make_agent("minecraft", load_llm("smollm2"), {"max_tokens": "48", "plan_retries": "0",
                                                          "max_replans": "1", "max_evaluations": "1"})
    summary = run_eval(make_env(), agent, env_name="minecraft", agent_name="metagent-p",
                       task_ids=["craft_planks"], episodes=1, max_steps=1, out_dir=tmp_path, progress=False)
    (rec,) = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert rec["task"] == "craft_planks" and rec["steps"] == 1 and len(rec["observations"]) == 1
    assert all(isinstance(a, str) and a for a in rec["actions"])
    assert {"replans", "rule_pool", "success_pool", "failure_pool"} <= set(rec)
    assert set(rec["memory"]) == {"success", "failure", "rules"}
    assert agent.verifier.llm_calls >= 1 and agent.planner.calls >= 1  # the real model was asked
    assert summary["complete"] and summary["agent"] == "metagent-p" and rec["reason"] is None
