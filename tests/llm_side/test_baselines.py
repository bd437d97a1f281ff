"""CoT and SayCan (unit tests with scripted models), and every Table-1 baseline (cot, saycan, react,
reflexion) on real ScienceWorld games with the real offline model for a few steps."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_side.agents import baselines
from llm_side.agents.baselines import CoTAgent, SayCanAgent, heuristic_value, parse_cot, parse_rating, saycan_scores
from llm_side.backends.scripted import ScriptedLLM
from llm_side.harness.contracts import Observation


class WordEmbedder:
    """Bag-of-words vectors over a fixed vocabulary (cosine = word overlap), L2-normalised."""

    name, dim = "words", 32
    VOCAB = ["open", "close", "door", "kitchen", "go", "to", "look", "around", "pick", "up", "dove", "focus", "on"]

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, self.VOCAB.index(w) if w in self.VOCAB else self.dim - 1] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)


class ValidEnv:
    name, default_max_steps = "valid-env", 5
    VALID = ["open door to kitchen", "close door to kitchen", "look around", "focus on dove"]

    def __init__(self):
        self.asked = 0

    def admissible_actions(self):
        self.asked += 1
        return list(self.VALID)


def _begin(agent, env=None):
    agent.begin_episode(Observation(text="You are in the hallway.", task="Find the dove."), task_id="t",
                        episode=0, env=env or ValidEnv())


# ---- parsers ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,action", [
    ("The door is closed, so I open it.\nAction: open door to kitchen", "open door to kitchen"),
    ("Thought...\n**Action:** go to kitchen\n", "go to kitchen"),
    ("Action: look around\nmore thinking\nAction: > pick up dove", "pick up dove"),
])
def test_parse_cot_takes_last_action_line(text, action):
    assert parse_cot(text).action == action


@pytest.mark.parametrize("text", ["I will think about it.", "", None, "Action:   \n"])
def test_parse_cot_marks_unusable_replies_invalid(text):
    parsed = parse_cot(text)
    assert parsed.action == "" and parsed.invalid


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=400))
def test_parse_cot_never_raises(text):
    parsed = parse_cot(text)
    assert (parsed.action == "") == bool(parsed.invalid)
    assert "\n" not in parsed.action and len(parsed.action) <= 200


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=50))
def test_parse_rating_is_a_digit_or_none(text):
    r = parse_rating(text)
    assert r is None or 0 <= r <= 9


def test_saycan_scores_and_repeat_discount():
    assert heuristic_value(["a", "b"], Counter({"a": 3})).tolist() == [0.25, 1.0]
    assert saycan_scores(np.array([0.9, 0.5]), np.array([0.25, 1.0])).tolist() == [0.225, 0.5]


# ---- agents with scripted models --------------------------------------------------------------------------
def test_cot_thinks_then_acts_and_survives_malformed_output():
    agent = CoTAgent(ScriptedLLM([" The door is shut.\nAction: open door to kitchen", "no idea"]))
    _begin(agent)
    assert agent.act("You are in the hallway.", None).action == "open door to kitchen"
    bad = agent.act("The door is now open.", None)
    assert bad.action == "" and bad.info["invalid"] == "no 'Action:' line"
    assert "> open door to kitchen\nThe door is now open." in agent.llm.prompts[-1]


def test_saycan_picks_the_valid_action_nearest_the_proposals_and_avoids_loops():
    llm = ScriptedLLM([" open the kitchen door", " open door", " go to kitchen", " open kitchen", " look"])
    env = ValidEnv()
    agent = SayCanAgent(llm, embedder=WordEmbedder())
    _begin(agent, env)
    d = agent.act("You are in the hallway.", None)
    assert d.action == "open door to kitchen" and env.asked == 1 and d.info["n_valid"] == 4
    assert len(d.info["proposals"]) == 5
    # the same proposals again: the repeat discount (1/2) now favours another action
    d2 = agent.act("The door is now open.", ["open door to kitchen", "close door to kitchen"])
    assert env.asked == 1 and d2.action == "close door to kitchen"


def test_saycan_ignores_thoughts_when_real_proposals_exist():
    agent = SayCanAgent(ScriptedLLM([" think: look around first", " focus on dove"]), embedder=WordEmbedder(),
                        n_candidates=2)
    _begin(agent)
    d = agent.act("hall", None)
    assert d.info["proposals"] == ["focus on dove"] and d.action == "focus on dove"


def test_saycan_llm_value_reranks_top_actions():
    def reply(prompt, i):
        if prompt.endswith("Rating:"):
            return " 9" if "'close door to kitchen'" in prompt else " 1"
        return " open door"

    agent = SayCanAgent(ScriptedLLM(reply), embedder=WordEmbedder(), value="llm", value_top_k=2)
    _begin(agent)
    d = agent.act("hall", None)
    # relevance 0.35 x value 1.0 beats 'open door to kitchen' at 0.71 x 0.2; unrated actions score 0
    assert d.action == "close door to kitchen" and d.info["value"] == 1.0
    assert sum(p.endswith("Rating:") for p in agent.llm.prompts) == 2


def test_saycan_without_valid_actions_uses_most_common_proposal():
    agent = SayCanAgent(ScriptedLLM([" look around", " go to kitchen", " look around"]), embedder=WordEmbedder(),
                        n_candidates=3)
    agent.begin_episode(Observation(text="hall", task="t"), task_id="t", episode=0, env=object())
    assert agent.act("hall", None).action == "look around"


def test_factories_check_options():
    with pytest.raises(ValueError, match="saycan"):
        baselines.make_saycan("scienceworld", ScriptedLLM(["x"]), {"value": "oracle"})
    with pytest.raises(ValueError, match="unknown cot option 'beam'"):
        baselines.make_cot("scienceworld", ScriptedLLM(["x"]), {"beam": 3})
    assert baselines.make_saycan("alfworld", ScriptedLLM(["x"]), {"n_candidates": "3"}).n_candidates == 3


# ---- real ScienceWorld + real model ------------------------------------------------------------------------
def _agent(name: str, llm, options):
    from llm_side.registry import agent_factory

    return agent_factory(name)("scienceworld", llm, options)


@pytest.mark.slow
@pytest.mark.parametrize("name,options,task", [
    ("cot", {"max_tokens": 48}, "7-1/var93"),
    ("saycan", {"n_candidates": 2, "max_tokens": 12}, "4-1/var0"),
    ("react", {"max_tokens": 24}, "6-2/var0"),
    ("reflexion", {"max_tokens": 24}, "3-1/var0"),
])
def test_baseline_runs_on_real_scienceworld_with_real_model(sw_env, tmp_path, name, options, task):
    from llm_side.backends import load_llm
    from llm_side.harness.records import load_records
    from llm_side.harness.runner import run_eval

    agent = _agent(name, load_llm("smollm2"), options)
    summary = run_eval(sw_env, agent, env_name="scienceworld", agent_name=name, task_ids=[task], episodes=1,
                       max_steps=3, out_dir=tmp_path, progress=False)
    (rec,) = load_records(tmp_path)
    assert summary["episodes"] == 1 and rec["agent"] == name and rec["task"] == task
    assert rec["reason"] is None and 1 <= rec["steps"] <= 3 and len(rec["observations"]) == rec["steps"]
    assert rec["score"] is not None and 0.0 <= rec["score"] <= 100.0
    assert rec["task_text"].startswith("Your task is")
    if name == "saycan":  # every executed action comes from the env's valid-action listing
        assert all(info["n_valid"] > 0 for info in rec["step_info"])
        assert all(not o.startswith("No known action") for o in rec["observations"])
    if name == "reflexion":
        assert rec["memory"] and isinstance(rec["memory"], dict)
