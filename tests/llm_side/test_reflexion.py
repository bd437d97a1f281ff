"""Reflexion: reflections after failures and successes, carried in memory(), consolidated past the
bound, bad memory rejected clearly; one real ALFWorld game with the real offline model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llm_side.agents.reflexion import ReflexionAgent, clean_reflection, make_agent, reflection_prompt
from llm_side.backends.scripted import ScriptedLLM
from llm_side.harness.contracts import EpisodeOutcome, Observation

sys.path.insert(0, str(Path(__file__).parent))
from test_alfworld import first_task, shared_env, smollm2  # noqa: E402


class ReflEnv:
    name = "toy"
    default_max_steps = 5

    def reflexion_examples(self):
        return "REFLEXION EXAMPLE"


def _episode(agent, episode, success, llm_action=" look"):
    agent.begin_episode(Observation("Room.\nYour task is to: win.", "win"), task_id="t", episode=episode, env=ReflEnv())
    agent.act("Room.", None)
    agent.end_episode(EpisodeOutcome("t", episode, success, 1, None, [("look", "Nothing happens.")], task="win"))


def _llm():
    def reply(prompt, i):
        if prompt.startswith("Here are lessons"):
            return " Merged: always look first, then win."
        if prompt.rstrip().endswith("New plan:"):
            return f" plan {i}: do the right thing.\n\nrambling"
        return " look"
    return ScriptedLLM(reply)


def test_reflects_on_failure_and_success_and_carries_memory():
    llm = _llm()
    agent = ReflexionAgent(llm, max_reflections=5)
    _episode(agent, 0, success=False)
    refl_prompt = llm.prompts[-1]
    assert "unsuccessful" in refl_prompt and "REFLEXION EXAMPLE" in refl_prompt and "STATUS: FAIL" in refl_prompt
    assert "> look\nNothing happens." in refl_prompt
    mem = agent.memory()
    assert len(mem["reflections"]) == 1 and mem["reflections"][0]["success"] is False
    assert mem["reflections"][0]["text"].startswith("plan") and "rambling" not in mem["reflections"][0]["text"]
    extras = agent.episode_extras()
    assert extras["reflection"] == mem["reflections"][0]["text"] and extras["reflection_prompt"] == refl_prompt

    _episode(agent, 1, success=True)
    act_prompt = [p for p in llm.prompts if p.endswith(">")][-1]
    assert "Your memory for the task below:\nTrial 0: plan" in act_prompt
    assert "You completed the task" in llm.prompts[-1] and "Plans from past attempts:\nTrial #0" in llm.prompts[-1]
    assert [r["success"] for r in agent.memory()["reflections"]] == [False, True]


def test_no_success_reflection_when_disabled():
    agent = ReflexionAgent(_llm(), reflect_on_success=False)
    _episode(agent, 0, success=True)
    assert agent.memory() == {"reflections": []} and "reflection" not in agent.episode_extras()


def test_consolidates_when_memory_grows():
    llm = _llm()
    agent = ReflexionAgent(llm, max_reflections=2)
    for e in range(3):
        _episode(agent, e, success=False)
    refl = agent.memory()["reflections"]
    assert len(refl) == 1 and refl[0]["consolidated"] and "Merged" in refl[0]["text"]
    assert any(p.startswith("Here are lessons") for p in llm.prompts)


def test_memory_round_trip_and_bad_memory():
    a = ReflexionAgent(_llm())
    _episode(a, 0, success=False)
    b = ReflexionAgent(_llm())
    b.load_memory(a.memory())
    assert b.memory() == a.memory()
    b.load_memory({})
    assert b.memory() == {"reflections": []}
    with pytest.raises(ValueError, match="Reflexion memory"):
        b.load_memory({"reflections": ["not a dict"]})


def test_reflection_helpers_and_options():
    p = reflection_prompt("SCEN", True, ["old"], "")
    assert p.endswith("New plan:") and "STATUS: SUCCESS" in p and "Trial #0: old" in p
    assert clean_reflection("  a\n\nb") == "a" and len(clean_reflection("x" * 5000)) == 600
    agent = make_agent("alfworld", _llm(), {"max_reflections": "2", "reflect_on_success": "false"})
    assert agent.max_reflections == 2 and agent.reflect_on_success is False
    with pytest.raises(ValueError, match="max_reflections"):
        ReflexionAgent(_llm(), max_reflections=0)


@pytest.mark.slow
def test_reflexion_real_alfworld_smollm2_two_episodes(tmp_path):
    alfworld_env, llm, task = shared_env(), smollm2(), first_task()
    from llm_side.harness.runner import run_eval
    from muse_common.files import read_jsonl

    agent = make_agent("alfworld", llm, {"max_tokens": "24"})
    agent.reflection_tokens = 32
    run_eval(alfworld_env, agent, env_name="alfworld", agent_name="reflexion", task_ids=[task],
             episodes=2, max_steps=2, out_dir=tmp_path, progress=False)
    recs = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert [r["episode"] for r in recs] == [0, 1]
    for r in recs:
        assert r["steps"] == 2 and isinstance(r["reflection"], str) and r["reflection_prompt"].endswith("New plan:")
    # memory after episode 1 holds both reflections, the first as written after episode 0
    assert len(recs[1]["memory"]["reflections"]) == 2
    assert recs[1]["memory"]["reflections"][0] == recs[0]["memory"]["reflections"][0]


def test_reflexion_takes_fine_tuned_actor_and_reflection_models(monkeypatch):
    """The `--reflexion-trained` reading: Reflexion acts with actor_model and reflects with reflection_model
    (the run's model reflects when only the actor is given), and its records name both."""
    from llm_side.agents import reflexion
    from llm_side.backends.scripted import ScriptedLLM

    loaded = {}

    def fake_load(spec):
        loaded[spec] = ScriptedLLM(["look"])
        loaded[spec].name = spec
        return loaded[spec]

    monkeypatch.setattr("llm_side.backends.load_llm", fake_load)
    base = ScriptedLLM(["look"])
    base.name = "base"
    agent = reflexion.make_agent("alfworld", base, {"actor_model": "hf:A", "reflection_model": "hf:R"})
    assert agent.llm is loaded["hf:A"] and agent.reflection_llm is loaded["hf:R"]
    assert {k: agent.episode_extras()[k] for k in ("actor_model", "reflection_model")} == {
        "actor_model": "hf:A", "reflection_model": "hf:R"}
    only_actor = reflexion.make_agent("alfworld", base, {"actor_model": "hf:A"})
    assert only_actor.reflection_llm is base
    plain = reflexion.make_agent("alfworld", base, {})
    assert plain.llm is base and "actor_model" not in plain.episode_extras()
