"""ReAct agent and the shared prompt/parse helpers: parsers never crash (hypothesis), prompts carry
the env's few-shot examples and the transcript, malformed output is an invalid action; one real
ALFWorld game with the real offline model through the runner."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_side.agents import prompting
from llm_side.agents.base import few_shot_head
from llm_side.agents.react import ReActAgent, make_agent
from llm_side.backends.scripted import ScriptedLLM
from llm_side.harness.contracts import Decision, EpisodeOutcome, Observation

sys.path.insert(0, str(Path(__file__).parent))
from test_alfworld import first_task, shared_env, smollm2  # noqa: E402

# -- parsers -----------------------------------------------------------------------------------------


@given(st.text(max_size=600))
@settings(max_examples=300, deadline=None)
def test_parse_action_never_crashes_and_is_bounded(text):
    p = prompting.parse_action(text)
    assert isinstance(p.action, str)
    assert p.is_think or len(p.action) <= prompting.MAX_ACTION_CHARS
    assert (p.invalid is None) == bool(p.action)
    assert "\n" not in p.action


@given(st.text(max_size=400))
@settings(max_examples=200, deadline=None)
def test_parse_rollout_never_crashes(text):
    pairs = prompting.parse_rollout(text, max_pairs=4)
    assert len(pairs) <= 4
    assert all(isinstance(a, str) and isinstance(o, str) for a, o in pairs)


@pytest.mark.parametrize("raw, want", [
    (" go to desk 1", "go to desk 1"),
    ("> take apple 1 from diningtable 1\nYou pick up", "take apple 1 from diningtable 1"),
    ("Action: open fridge 1", "open fridge 1"),
    ("\n\n  \"examine mug 2\"  ", "examine mug 2"),
    (" think:   I need a mug.", "think: I need a mug."),
    ("THINK: plan", "think: plan"),
])
def test_parse_action_cleans(raw, want):
    assert prompting.parse_action(raw).action == want


@pytest.mark.parametrize("raw, reason", [("", "empty"), ("  \n\n", "empty"), ("> ???", "no words"),
                                         (None, "no text"), ("x" * 500, "overlong")])
def test_parse_action_invalid(raw, reason):
    p = prompting.parse_action(raw)
    assert p.action == "" and p.invalid is not None and p.invalid.startswith(reason)


def test_parse_rollout_pairs():
    text = " go to desk 1\nOn the desk 1, you see a mug 1.\n> take mug 1 from desk 1\nYou pick up the mug 1.\n> look"
    assert prompting.parse_rollout(text) == [("go to desk 1", "On the desk 1, you see a mug 1."),
                                             ("take mug 1 from desk 1", "You pick up the mug 1."), ("look", "")]


@given(st.lists(st.text(min_size=1, max_size=50), max_size=30), st.integers(min_value=1, max_value=200))
@settings(max_examples=100, deadline=None)
def test_fit_to_budget_keeps_head_tail_and_recent(items, budget):
    out = prompting.fit_to_budget("HEAD\n", items, ">", budget)
    assert out.startswith("HEAD\n") and out.endswith(">")
    if sum(prompting.approx_tokens(x) for x in ["HEAD\n", *items, ">"]) <= budget:
        assert out == "HEAD\n" + "".join(items) + ">"


def test_match_admissible():
    assert prompting.match_admissible("Go To  Desk 1", ["look", "go to desk 1"]) == "go to desk 1"
    assert prompting.match_admissible("fly", ["look"]) is None and prompting.match_admissible("x", None) is None


# -- agent with a scripted LLM -------------------------------------------------------------------------

class ExamplesEnv:
    """Only the optional hooks matter here."""

    name = "toy"
    default_max_steps = 5

    def react_examples(self, task_id):
        return f"EXAMPLES FOR {task_id}\n"


def _obs():
    return Observation(text="You are in a room.\nYour task is to: find a mug.", task="find a mug")


def test_react_prompt_examples_transcript_and_stop():
    llm = ScriptedLLM([" think: find the mug", " go to desk 1", "> take mug 1 from desk 1"])
    agent = ReActAgent(llm)
    agent.begin_episode(_obs(), task_id="t1", episode=0, env=ExamplesEnv())
    d0 = agent.act("You are in a room.", None)
    d1 = agent.act("OK.", None)
    d2 = agent.act("On the desk 1, you see a mug 1.", None)
    assert [d.action for d in (d0, d1, d2)] == ["think: find the mug", "go to desk 1", "take mug 1 from desk 1"]
    assert all(isinstance(d, Decision) and d.competence is None for d in (d0, d1, d2))
    last = llm.prompts[-1]
    assert last.startswith("Interact with the environment") and "EXAMPLES FOR t1" in last
    assert "Here is the task.\nYou are in a room.\nYour task is to: find a mug.\n" in last
    assert last.endswith("> think: find the mug\nOK.\n> go to desk 1\nOn the desk 1, you see a mug 1.\n>")


def test_prompt_states_the_task_when_the_first_observation_does_not():
    """ScienceWorld's first observation is the room, not the task: the task line goes in (once)."""
    llm = ScriptedLLM([" look around"])
    agent = ReActAgent(llm)
    agent.begin_episode(Observation(text="This room is called the hallway.", task="Boil water."), task_id="t",
                        episode=0, env=ExamplesEnv())
    agent.act("This room is called the hallway.", None)
    assert "Here is the task.\nBoil water.\nThis room is called the hallway.\n>" in llm.prompts[-1]
    agent.begin_episode(_obs(), task_id="t", episode=1, env=ExamplesEnv())
    agent.act("You are in a room.", None)
    assert llm.prompts[-1].count("find a mug") == 1  # already in the first observation


def test_react_malformed_output_is_invalid_action_not_crash():
    agent = ReActAgent(ScriptedLLM(["", "x" * 1000, "  "]))
    agent.begin_episode(_obs(), task_id="t", episode=0, env=object())
    for _ in range(3):
        d = agent.act("obs", None)
        assert d.action == "" and d.info["invalid"]
    agent.end_episode(EpisodeOutcome("t", 0, False, 3, None, [("", "Nothing happens.")] * 3))
    assert agent.episode_extras()["invalid_actions"] == 3
    assert agent.memory() == {}


def test_generic_head_without_hooks_and_options():
    assert "one action per line" in few_shot_head(object(), "t")
    assert make_agent("alfworld", ScriptedLLM(["x"]), {"max_tokens": "12"}).max_tokens == 12
    with pytest.raises(ValueError, match="max_tokens"):
        make_agent("alfworld", ScriptedLLM(["x"]), {"max_tokens": "many"})


def test_context_budget_drops_old_steps():
    agent = ReActAgent(ScriptedLLM([" look"]), context_tokens=110)
    agent.begin_episode(_obs(), task_id="t", episode=0, env=object())
    for i in range(30):
        agent.act(f"observation number {i} " * 3, None)
    prompt = agent.build_prompt()
    assert "earlier steps omitted" in prompt and "observation number 29" in prompt
    assert "observation number 1 " not in prompt


# -- real ALFWorld + real offline model ---------------------------------------------------------------

@pytest.mark.slow
def test_react_real_alfworld_smollm2(tmp_path):
    alfworld_env, llm, task = shared_env(), smollm2(), first_task()
    from llm_side.harness.runner import run_eval
    from muse_common.files import read_jsonl

    agent = make_agent("alfworld", llm, {"max_tokens": "24"})
    summary = run_eval(alfworld_env, agent, env_name="alfworld", agent_name="react", task_ids=[task],
                       episodes=1, max_steps=3, out_dir=tmp_path, progress=False)
    (rec,) = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert rec["task"] == task and rec["agent"] == "react" and rec["steps"] == 3
    assert len(rec["actions"]) == len(rec["observations"]) == 3
    assert all(isinstance(a, str) for a in rec["actions"]) and isinstance(rec["success"], bool)
    assert rec["competence"] is None and rec["reason"] is None
    assert "Your task is to:" in rec["first_observation"] and rec["task_text"]
    assert isinstance(rec["invalid_actions"], int)
    assert summary["success_rate"] in (0.0, 1.0)


# -- a thought is never dropped ------------------------------------------------------
LONG_THOUGHT = ("think: Now I put the first cellphone in sofa. Next, I need to find the second cellphone. I have "
                "visited coffeetable (1), so the second cellphone is more likely to appear in diningtable (1), "
                "sidetable (1-2), drawer (1-4), sofa (1), dresser (1), garbagecan (1). I can check one by one, "
                "starting with coffeetable 1.")


def test_every_thought_of_the_alfworld_examples_is_kept_whole():
    from llm_side.envs import alfworld_data

    try:
        prompts = alfworld_data.react_prompts()
    except alfworld_data.AlfworldDataMissing:
        pytest.skip("shared ALFWorld prompts not present")
    thoughts = [line.strip().lstrip("> ") for text in prompts.values() for line in text.splitlines()
                if line.strip().lstrip("> ").startswith("think:")]
    assert len(thoughts) == 91 and sum(len(t) > prompting.MAX_ACTION_CHARS for t in thoughts) == 19
    for t in thoughts:
        p = prompting.parse_action(" " + t)
        assert p.is_think and p.invalid is None and p.action == "think: " + t[len("think:"):].strip()
    longest = prompting.longest_example_thought("\n".join(prompts.values()))
    assert longest == LONG_THOUGHT and len(longest) == 312
    # these prompts run 2.7-2.9 characters a token (Qwen2.5: 86 tokens, SmolLM2: 92 for this thought); the
    # default line limit holds the longest thought even at 2 characters a token
    assert ReActAgent(ScriptedLLM(["x"])).max_tokens >= len(longest) // 2


def test_react_keeps_a_long_thought_and_asks_for_enough_tokens():
    asked = []

    class Recording(ScriptedLLM):
        def complete(self, prompt, **kw):
            asked.append(kw["max_tokens"])
            return super().complete(prompt, **kw)

    agent = ReActAgent(Recording([" " + LONG_THOUGHT]))
    agent.begin_episode(_obs(), task_id="t", episode=0, env=object())
    d = agent.act("You are in a room.", None)
    assert d.action == LONG_THOUGHT and "invalid" not in d.info
    assert asked == [prompting.THOUGHT_TOKENS]
    # an env command of the same length is still rambling, recorded as invalid
    assert prompting.parse_action("go to " + "x" * 300).invalid.startswith("overlong")
