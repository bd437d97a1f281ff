"""`--env plancraft`: the Plancraft package's dataset as a TextEnv, run by the Metagent-P planner and
verifier."""

from __future__ import annotations

import json

import pytest

from llm_side.agents.metagent_p import make_agent
from llm_side.backends.scripted import ScriptedLLM
from llm_side.envs.plancraft import PlancraftEnv, make_env
from llm_side.harness.contracts import TextEnv
from llm_side.harness.runner import run_eval
from muse_common.files import read_jsonl

QUARTZ = "VAL0491"  # smelt nether_quartz_ore ([I19]) into quartz
IMPOSSIBLE = "VAL0382"


def test_splits_ids_and_errors():
    env = make_env()
    assert isinstance(env, TextEnv)
    ids = env.task_ids()
    assert len(ids) == 110 and QUARTZ in ids and IMPOSSIBLE in ids
    assert len(env.task_ids("test.small")) == 117
    assert env.example_of(IMPOSSIBLE).impossible
    with pytest.raises(ValueError, match="split"):
        make_env(split="dev")
    with pytest.raises(ValueError, match="unknown plancraft task"):
        env.reset("VAL9999")


def test_env_steps_real_package_and_scores_success():
    env = PlancraftEnv()
    obs = env.reset(QUARTZ)
    assert "Craft an item of type: quartz" in obs.text and "nether_quartz_ore [I19] quantity 1" in obs.text
    r = env.step("move: from [I30] to [A1] with quantity 1")  # empty source: nothing happens
    assert not r.done and not r.won
    r = env.step("smelt: from [I19] to [I20] with quantity 1")
    assert r.done and r.won and r.reward == 1.0
    env.reset(IMPOSSIBLE)
    r = env.step("impossible: no recipe uses these items")
    assert r.done and r.won


def _scripted(plan: list[dict]):
    def reply(prompt: str, i: int) -> str:
        if "RESPONSE FORMAT" in prompt:
            return json.dumps({"workflow": plan})
        if "execution constraints" in prompt:
            return ('{"return": {"success": true, "suggestion": ""}, '
                    '"smelt": ["Rule1: Check if source slot is not empty"]}')
        if "Rule:" in prompt:
            return '{"common_sense_consistency": 1, "condition_clarity": 0.9, "action_feasibility": 0.9}'
        return '{"rational": false, "suggestion": "check the recipe", "confidence": 0.3}'

    return ScriptedLLM(reply)


def test_metagent_p_planner_and_verifier_solve_an_example(tmp_path):
    llm = _scripted([{"name": "smelt", "args": {"from": "[I19]", "to": "[I20]", "quantity": 1}}])
    agent = make_agent("plancraft", llm, {"ablation": "verifier"})
    run_eval(make_env(), agent, env_name="plancraft", agent_name="metagent-p", task_ids=[QUARTZ], episodes=1,
             max_steps=5, out_dir=tmp_path, progress=False)
    (rec,) = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert rec["success"] and rec["actions"] == ["smelt: from [I19] to [I20] with quantity 1"]
    assert rec["rule_pool"] == 1  # the slot rule was learned from the verifier's answer
    obs = make_env().reset(QUARTZ).text
    inv = agent.controller.inventory(obs)
    assert inv["nether_quartz_ore"] == 1 and inv["[I19]"] == 1
    from_empty = {"name": "smelt", "args": {"from": "[I30]", "to": "[I20]"}}
    # paper 002: the pool's rule is checked before execution and vetoes smelting from an empty slot
    ok = agent.verifier.check({"name": "smelt", "args": {"from": "[I19]", "to": "[I20]"}}, inv)
    empty = agent.verifier.check(from_empty, inv)
    assert (ok.ok, ok.source, empty.ok, empty.source) == (True, "rule", False, "rule")


@pytest.mark.slow
def test_real_model_runs_one_plancraft_example(tmp_path):
    from llm_side.backends import load_llm

    agent = make_agent("plancraft", load_llm("smollm2"), {"ablation": "verifier", "max_tokens": "48",
                                                          "plan_retries": "0", "max_replans": "1"})
    summary = run_eval(make_env(), agent, env_name="plancraft", agent_name="metagent-p", task_ids=[QUARTZ],
                       episodes=1, max_steps=2, out_dir=tmp_path, progress=False)
    (rec,) = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert rec["env"] == "plancraft" and 1 <= rec["steps"] <= 2 and rec["reason"] is None
    assert all(a.startswith(("move:", "smelt:", "impossible:")) for a in rec["actions"])
    assert agent.planner.calls >= 1 and summary["complete"]
