"""Metagent-P's behaviour pinned to paper 002: LLM regulation, eq. 7 without a successful
plan, the replanning count of section 3.1.3, two-level planning (eq. 1) with rules as prompt guidance,
and a verifier that cannot deadlock the agent. A scripted LLM plays the model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from llm_side.agents.metagent_p import build_config, make_agent
from llm_side.agents.metagent_p.reflector import Reflector, confidence, simulator_message_regulation
from llm_side.agents.metagent_p.verifier import Verifier
from llm_side.backends.scripted import ScriptedLLM
from llm_side.envs.minecraft import make_env, report_tables
from llm_side.envs.minecraft.data import canonical

sys.path.insert(0, str(Path(__file__).parent))
from metagent_fakes import GOOD_SCORES, BagOfWordsEmbedder, agent_with, play  # noqa: E402

COMPONENTS = ("reflector", "verifier", "planner")


def workflow(*actions: tuple[str, str]) -> str:
    return json.dumps({"workflow": [{"name": n, "args": {"obj": o}} for n, o in actions]})


def reflection_lines(prompts: list[str]) -> list[str]:
    return [p.rsplit("the reflection is:", 1)[-1].split("\n", 1)[0] for p in prompts if "RESPONSE FORMAT" in p]


# ---- point 2: eq. 7 with and without a retrievable successful plan ---------------------------------
def test_confidence_without_a_successful_plan_shifts_the_weight_to_c_llm():
    assert confidence(None, 0.8) == pytest.approx(0.8)  # C_history undefined: conf = C_LLM, can accept
    assert confidence(0.2, 0.8) == pytest.approx(0.5)  # eq. 7 with alpha = beta = 0.5: not above 0.5
    reply = ['{"rational": true, "suggestion": "go on", "confidence": 0.7}']
    none = Reflector(ScriptedLLM(reply), BagOfWordsEmbedder()).evaluate("g", [], "Failed: x", ["a"], None, None)
    assert none.c_history is None and none.confidence == pytest.approx(0.7) and none.accepted and none.tries == 1
    far = Reflector(ScriptedLLM(reply), BagOfWordsEmbedder(), max_evaluations=2).evaluate(
        "g", [], "Failed: x", ["dig-down 12"], None, ["craft furnace"])
    assert far.c_history == pytest.approx(0.0) and far.confidence == pytest.approx(0.35)
    assert not far.accepted and far.tries == 2 and not Reflector.keeps_plan(far)  # unaccepted -> regulate


# ---- point 1: regulation is the LLM's, prompted with the evaluation ------------------------------------
def test_regulation_prompts_the_llm_with_the_evaluation_and_replans_its_subgoals():
    def reply(p, i):
        if "Break the task into" in p:
            return '{"subgoals": ["mine 1 iron_ore"]}'
        if "Revise the list of sub-goals" in p:
            return '{"subgoals": ["craft 1 stone_pickaxe", "mine 1 iron_ore"]}'
        if "review the plan" in p:
            return '{"rational": false, "suggestion": "get a stone pickaxe first", "confidence": 0.9}'
        if "current sub-goal: craft 1 stone_pickaxe" in p:
            return workflow(("craft", "stone_pickaxe"))
        return workflow(("mine", "iron_ore"))

    agent = agent_with(reply, verifier="false")
    assert build_config({}).regulation == "llm" and agent.ablation() == "custom"
    play(agent, make_env(hazards="false"), "mine_iron_ore", steps=2)
    prompts = agent.llm.prompts
    reg = next(p for p in prompts if "Revise the list of sub-goals" in p)
    assert "get a stone pickaxe first" in reg and "confidence 0.90" in reg and '"mine 1 iron_ore"' in reg
    after = prompts[prompts.index(reg) + 1:]
    replan = next(p for p in after if "RESPONSE FORMAT" in p)
    assert "current sub-goal: craft 1 stone_pickaxe" in replan and "get a stone pickaxe first" in replan
    assert agent.subgoals == ["mine 1 iron_ore"] and agent.recoveries == 1


def test_rule_based_regulation_is_an_ablation_that_is_off_by_default():
    broke = "OK: mined stone. Your wooden_pickaxe broke!"
    plan = simulator_message_regulation(broke, [{"name": "mine", "args": {}}])
    assert plan[0] == {"name": "craft", "args": {"obj": {"wooden_pickaxe": 1}, "platform": "crafting_table"}}
    assert make_agent("minecraft", ScriptedLLM(["x"]), {"regulation": "message-rules"}).ablation() == \
        "full+message-rules"
    assert make_agent("minecraft", ScriptedLLM(["x"]), {}).ablation() == "full"
    with pytest.raises(ValueError, match="regulation"):
        build_config({"regulation": "regex"})


# ---- point 5: two-level planning (eq. 1) and rules as prompt guidance ------------------------------
def test_task_is_decomposed_then_each_subgoal_is_planned_with_rules_as_guidance():
    def reply(p, i):
        if "Rule:" in p:
            return GOOD_SCORES
        if "execution constraints" in p:
            return ('{"return": {"success": true, "suggestion": ""}, '
                    '"craft, planks": ["Rule1: Check if inventory contains 1 log"]}')
        if "Break the task into" in p:
            return '{"subgoals": ["mine 1 oak_log", "craft 4 oak_planks"]}'
        if "current sub-goal: mine 1 oak_log" in p:
            return workflow(("find", "log"), ("approach", "log"), ("mine", "log"))
        if "current sub-goal: craft 4 oak_planks" in p:
            return workflow(("craft", "planks"))
        return '{"rational": true, "suggestion": "", "confidence": 0.9}'

    agent = agent_with(reply)
    won, traj = play(agent, make_env(hazards="false"), "craft_planks")
    assert won and [a for a, _ in traj] == ["find oak_log", "approach oak_log", "mine oak_log", "craft oak_planks"]
    plans = [p for p in agent.llm.prompts if "RESPONSE FORMAT" in p]
    assert "Break the task into" in plans[0]
    assert "current sub-goal: mine 1 oak_log" in plans[1] and "current sub-goal: craft 4 oak_planks" in plans[2]
    assert agent.replans == 0  # planning the next sub-goal is not a re-plan
    # the rule learned bottom-up while checking "craft planks" reaches the next planner prompt top-down
    n = len(agent.llm.prompts)
    play(agent, make_env(hazards="false"), "craft_planks", seed=2)
    guided = [p for p in agent.llm.prompts[n:] if "current sub-goal: craft 4 oak_planks" in p]
    assert guided and "known rules: craft oak_planks: Check if inventory contains 1 log" in guided[0]


def test_by_default_a_pooled_rule_is_checked_before_execution_and_always_vetoes():
    """Paper 002 §2.3: symbolic rules are checked before an action runs; no evidence or veto cap first."""
    v = Verifier(ScriptedLLM([GOOD_SCORES]), canon=canonical)
    v.learn("mine, stone", "Rule1: Check if inventory contains 1 wooden_pickaxe")
    mine = {"name": "mine", "args": {"obj": "stone"}}
    for _ in range(5):  # never confirmed by the env, vetoed every time
        fb = v.check(mine, {})
        assert not fb.ok and fb.source == "rule" and "1 wooden_pickaxe" in fb.suggestion
    assert v.check(mine, {"wooden_pickaxe": 1}).ok
    assert build_config({}).rule_evidence == 0 and build_config({}).rule_veto_limit is None
    assert build_config({"rule_veto_limit": "none", "rule_evidence": "1"}).rule_evidence == 1


# ---- point 12 (option rule_evidence / rule_veto_limit): wrong rules cannot block an episode ------------
def test_rules_veto_only_after_evidence_and_are_dropped_when_the_blocked_step_succeeds():
    v = Verifier(ScriptedLLM([GOOD_SCORES]), canon=canonical, min_evidence=1, veto_limit=2)
    v.learn("find, oak_log", "Rule1: Check if inventory contains oak_log")
    find = {"name": "find", "args": {"obj": "oak_log"}}
    assert len(v) == 1 and v.check(find, {}).ok  # a candidate (no evidence yet) cannot veto
    assert v.guidance("find oak_log") == ["find oak_log: Check if inventory contains oak_log"]
    v.observe(find, {}, failed=False)  # ran without oak_log and succeeded: the rule is wrong
    assert len(v) == 0 and v.dropped == 1
    v.learn("mine, oak_log", "Rule1: Check if inventory contains oak_log")
    mine = {"name": "mine", "args": {"obj": "oak_log"}}
    v.observe(mine, {}, failed=True)  # a failure while the condition was false: confirmed (by chance)
    assert not v.check(mine, {}).ok and not v.check(mine, {}).ok  # trusted: vetoes, veto_limit times
    assert v.check(mine, {}).ok  # then the step runs ...
    v.observe(mine, {}, failed=False)  # ... and succeeds: the bad rule is dropped
    assert len(v) == 0 and v.dropped == 2


def test_llm_verdict_vetoes_an_action_once_per_episode():
    no = '{"return": {"success": false, "suggestion": "get a log"}}'
    v = Verifier(ScriptedLLM([no]), canon=canonical)
    find = {"name": "find", "args": {"obj": "sand"}}
    first = v.check(find, {})
    assert not first.ok and first.source == "llm" and "find sand" in first.suggestion
    assert v.check(find, {}).ok  # the second time the environment decides
    v.begin_episode()
    assert not v.check(find, {}).ok


def test_a_verifier_that_says_no_to_everything_does_not_stop_a_sand_task():
    """The rule deadlock: the model's rules ("check if inventory contains oak_log") veto every step;
    the agent still mines sand, and never runs a plan written for another task."""
    def reply(p, i):
        if "Rule:" in p:
            return GOOD_SCORES
        if "execution constraints" in p:
            obj = json.loads(p.rsplit("action: ", 1)[1].split("\n")[0])["args"].get("obj")
            return ('{"return": {"success": false, "suggestion": "get oak_log"}, '
                    f'"{json.loads(p.rsplit("action: ", 1)[1].split(chr(10))[0])["name"]}, {obj}": '
                    '["Rule1: Check if inventory contains oak_log"]}')
        if "Break the task into" in p:
            return '{"subgoals": ["mine 1 sand"]}'
        if "RESPONSE FORMAT" in p:
            return workflow(("find", "sand"), ("approach", "sand"), ("mine", "sand"))
        return '{"rational": false, "suggestion": "find sand", "confidence": 0.9}'

    agent = agent_with(reply, max_replans=12, rule_evidence=1, rule_veto_limit=2)
    won, traj = play(agent, make_env(hazards="false"), "mine_sand", steps=12)
    assert won and not any("oak_log" in a for a, _ in traj)
    assert agent.verifier.dropped >= 1 and agent.replans < 12
    for line in reflection_lines(agent.llm.prompts):
        assert not any(w in line.lower() for w in COMPONENTS), line


def test_garbage_planner_explores_this_tasks_target_not_another_tasks():
    agent = agent_with(lambda p, i: "no json", max_replans=2, plan_retries=0)
    _, traj = play(agent, make_env(hazards="false"), "mine_sand", steps=3)
    assert traj[0][0] == "find sand" and not any("oak_log" in a for a, _ in traj)


# ---- replanning is not capped by default: RC can exceed 12 (paper 002 reports 13-28) -----------------
@pytest.mark.parametrize("cap, expected", [(None, 20), ("12", 12)])
def test_replanning_is_uncapped_by_default(cap, expected):
    """A planner that mines logs without finding them first: every step fails and is re-planned."""
    def reply(p, i):
        if "Break the task into" in p:
            return '{"subgoals": ["mine 1 oak_log"]}'
        if "review the plan" in p:
            return '{"rational": false, "suggestion": "mine again", "confidence": 0.9}'
        if "Revise the list" in p:
            return '{"subgoals": ["mine 1 oak_log"]}'
        if "RESPONSE FORMAT" in p:
            return workflow(("mine", "oak_log"))
        return '{"return": {"success": true, "suggestion": ""}}'

    opts = {} if cap is None else {"max_replans": cap}
    agent = agent_with(reply, **opts)
    assert agent.cfg.max_replans == (None if cap is None else 12)
    won, traj = play(agent, make_env(hazards="false"), "mine_log", steps=21)
    assert not won and sum(o.startswith("Failed") for _, o in traj) == expected + 1
    assert agent.episode_extras()["recoveries"] == agent.replans == expected


# ---- point 3: replanning count = recoveries from failed states in successful episodes ---------------
def test_recoveries_count_replans_after_failed_steps_only():
    verdicts = iter(["false"])

    def reply(p, i):
        if "Break the task into" in p:
            return '{"subgoals": ["mine 1 dirt"]}'
        if "execution constraints" in p:  # one pre-execution veto, then yes
            return '{"return": {"success": ' + next(verdicts, "true") + ', "suggestion": "look first"}}'
        if "review the plan" in p:
            return '{"rational": false, "suggestion": "find and approach dirt first", "confidence": 0.9}'
        if "Revise the list" in p:
            return '{"subgoals": ["mine 1 dirt"]}'
        if "find and approach dirt first" in p:
            return workflow(("find", "dirt"), ("approach", "dirt"), ("mine", "dirt"))
        return workflow(("mine", "dirt"))  # mining before finding it fails in the world

    agent = agent_with(reply)
    won, traj = play(agent, make_env(hazards="false"), "mine_dirt")
    assert won and traj[0][1].startswith("Failed")
    ex = agent.episode_extras()
    assert ex["recoveries"] == 1  # one failed state recovered from
    assert ex["replans"] == 2 and ex["verifier_blocks"] == 1  # the veto is a re-plan but no failed state


def test_report_rc_averages_recoveries_over_successful_episodes_only():
    recs = [
        {"env": "minecraft", "task": "mine_log", "agent": "metagent-p", "success": True, "recoveries": 1,
         "replans": 5},
        {"env": "minecraft", "task": "mine_log", "agent": "metagent-p", "success": True, "recoveries": 3,
         "replans": 9},
        {"env": "minecraft", "task": "mine_log", "agent": "metagent-p", "success": False, "recoveries": 7,
         "replans": 12},
        {"env": "minecraft", "task": "craft_iron_pickaxe", "agent": "metagent-p", "success": False,
         "recoveries": 4, "replans": 6},
    ]
    (_, t2), (_, t8), *_ = report_tables(recs)
    assert "| metagent-p | 66.67 / 2.0 | - | - | 0.00 / - | - |" in t2  # (1 + 3) / 2 successes
    assert "| basic | mine_log | 66.67 / 2.0 |" in t8


# ---- the prompts' placeholders never reach the agent as content -------------------------------------------
def test_template_placeholders_are_refused_and_re_asked():
    from llm_side.agents.metagent_p import parsing

    assert parsing.parse_reflection('{"rational": false, "suggestion": "...", "confidence": 0.6}') is None
    assert parsing.parse_reflection('{"rational": true, "suggestion": "", "confidence": 0.9}') == (True, "", 0.9)
    assert parsing.parse_subgoals('{"subgoals": ["sub-goal", "sub-goal"]}') is None
    assert parsing.parse_subgoals('{"subgoals": ["sub-goal", "mine 1 dirt"]}') == ["mine 1 dirt"]
    assert parsing.parse_verdict('{"return": {"success": false, "suggestion": "Your suggestion here"}}')[1] == ""
    assert parsing.parse_workflow('{"workflow": [{"times": "n", "actions": [{"name": "action name", '
                                  '"args": {"arg name": 1}}]}]}') is None
    replies = iter(['{"rational": false, "suggestion": "...", "confidence": 0.6}',
                    '{"rational": false, "suggestion": "craft a crafting table first", "confidence": 0.9}'])
    ev = Reflector(ScriptedLLM(lambda p, i: next(replies)), None).evaluate(
        "craft 1 wooden_pickaxe", ["find wooden_pickaxe"], "Failed: no wooden_pickaxe in sight", [], None, None)
    assert ev.suggestion == "craft a crafting table first" and ev.tries == 2 and ev.accepted


def test_an_llm_that_copies_the_templates_never_feeds_them_back():
    """Held-out craft_crafting_table: the evaluator's suggestion was the template's literal '...'."""
    def reply(p, i):
        if "Break the task into" in p:
            return '{"subgoals": ["sub-goal", "sub-goal"]}'
        if "review the plan" in p:
            return '{"rational": false, "suggestion": "...", "confidence": 0.6}'
        if "Revise the list" in p:
            return '{"subgoals": ["sub-goal"]}'
        if "RESPONSE FORMAT" in p:
            return workflow(("mine", "oak_log"))
        return '{"return": {"success": true, "suggestion": "Your suggestion here"}}'

    agent = agent_with(reply)
    play(agent, make_env(hazards="false"), "mine_log", steps=4)
    later = "\n".join(agent.llm.prompts[1:])
    assert "Advice: ..." not in later and "current sub-goal: sub-goal" not in later
    assert "Your suggestion here" not in "\n".join(p for p in agent.llm.prompts[1:] if "execution constraints" not in p)
    assert all(ev.suggestion != "..." for ev in agent.reflector.evaluations)
