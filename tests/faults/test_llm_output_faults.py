"""Fault 8: LLM output that is empty, overlong, not an action or not valid JSON never crashes a parser.

Property tests (hypothesis) feed random and adversarial text to every parser that reads model
output: the ReAct action parser, the rollout parser, Metagent-P's JSON parsers (plans, verdicts,
rule scores, reflections), RefRea's insight cleaner and the Minecraft action grammar.
"""

from __future__ import annotations

import math
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_side.agents import prompting
from llm_side.agents.metagent_p import parsing
from llm_side.agents.refrea import clean_insight

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text that looks like what a small model writes: JSON fragments, brackets, quotes, prose, numbers.
_TOKENS = st.sampled_from(['{', '}', '[', ']', '"', "'", ':', ',', '\\', '\n', ' ', 'true', 'None', 'NaN',
                           '1e999', '-0.5', '42', 'success', 'confidence', 'workflow', 'actions', 'times',
                           'name', 'args', 'craft', '> go to desk 1', 'Action:', 'think:', '```json'])
LLM_TEXT = st.one_of(st.text(max_size=400), st.lists(_TOKENS, max_size=80).map("".join))


@PROPS
@given(LLM_TEXT)
def test_parse_action_never_raises_and_is_bounded(text: str) -> None:
    p = prompting.parse_action(text)
    assert isinstance(p.action, str)
    assert (p.action == "") == (p.invalid is not None), p
    assert p.is_think or len(p.action) <= prompting.MAX_ACTION_CHARS
    assert "\n" not in p.action


@pytest.mark.parametrize(("text", "why"), [
    ("", "empty"), ("   \n\n  ", "empty"), (None, "no text"), ("...!!! 123", "no words"),
    ("go " * 200, "overlong"),
])
def test_parse_action_marks_garbage_invalid(text: str | None, why: str) -> None:
    p = prompting.parse_action(text)
    assert p.action == "" and p.invalid is not None and why in p.invalid


@PROPS
@given(LLM_TEXT, st.integers(1, 10))
def test_parse_rollout_never_raises(text: str, max_pairs: int) -> None:
    pairs = prompting.parse_rollout(text, max_pairs=max_pairs)
    assert len(pairs) <= max_pairs
    assert all(isinstance(a, str) and isinstance(o, str) for a, o in pairs)


@PROPS
@given(LLM_TEXT)
def test_metagent_json_parsers_never_raise(text: str) -> None:
    wf = parsing.parse_workflow(text)
    assert wf is None or (0 < len(wf) <= 200 + 16 * 200 and all(a["name"] for a in wf))
    verdict = parsing.parse_verdict(text)
    assert verdict is None or isinstance(verdict[0], bool)
    scores = parsing.parse_scores(text)
    assert scores is None or all(0.0 <= s <= 1.0 and math.isfinite(s) for s in scores)
    refl = parsing.parse_reflection(text)
    assert refl is None or 0.0 <= refl[2] <= 1.0


@pytest.mark.parametrize("text", [
    "", "{", "[[[[", '{"workflow": [{"times": "many", "actions": [{"name": ""}]}]}',
    '{"workflow": [{"times": 1e308, "actions": [{"name": "mine", "args": 3}]}]}',
    "[" * 5000 + "]" * 5000, '{"a": ' * 3000, "not json at all", '{"success": "maybe"}',
])
def test_metagent_parsers_on_adversarial_json(text: str) -> None:
    wf = parsing.parse_workflow(text)
    assert wf is None or len(wf) <= 216  # `times` is clamped: a plan cannot explode
    verdict = parsing.parse_verdict(text)
    assert verdict is None or isinstance(verdict[1], str)
    refl = parsing.parse_reflection(text)
    assert refl is None or 0.0 <= refl[2] <= 1.0
    scores = parsing.parse_scores(text)
    assert scores is None or all(0.0 <= x <= 1.0 for x in scores)


@pytest.mark.parametrize("text", ['{"common": NaN, "clarity": 0.5, "feasibility": 0.5}',
                                  '{"common": 170, "clarity": -3, "feasibility": 1e999}'])
def test_scores_out_of_range_and_nan_never_leak(text: str) -> None:
    s = parsing.parse_scores(text)
    assert s is None or all(0.0 <= x <= 1.0 and math.isfinite(x) for x in s)


@PROPS
@given(LLM_TEXT)
def test_refrea_insight_cleaner_bounded(text: str) -> None:
    out = clean_insight(text)
    assert isinstance(out, str) and "\n" not in out
    assert out == "" or any(c.isalpha() for c in out)


@PROPS
@given(st.text(alphabet=string.printable, max_size=200))
def test_minecraft_action_grammar_raises_only_its_own_error(text: str) -> None:
    """The world's parser may refuse text, but only with ActionError (recorded as an invalid action)."""
    from llm_side.envs.minecraft.world import ActionError, parse_action

    try:
        parse_action(text)
    except ActionError:
        pass


GARBAGE = ["", "   ", "x" * 5000, "{", '{"workflow": [{"times": 99999, "actions": [{"name": ""}]}]}',
           "Sure! Here is the plan: craft everything.", "[1, 2, 3]", '{"success": "maybe", "return": 7}',
           "\x00\x01\x02", "null", '{"common": "high", "clarity": NaN}']


@pytest.mark.slow
def test_metagent_p_on_real_env_survives_only_garbage_llm_output(tmp_path) -> None:  # noqa: ANN001
    """Every reply is garbage (plans, verdicts, scores): bounded retries, then the safe fallback; never
    'agent error'. (ReAct on garbage runs in test_eval_resume_faults via scripted_agents.)"""
    agent_name = "metagent-p"
    from llm_side import registry
    from llm_side.backends.scripted import ScriptedLLM
    from llm_side.envs.minecraft import make_env
    from llm_side.harness.runner import run_eval
    from muse_common.files import read_jsonl

    llm = ScriptedLLM(GARBAGE)
    agent = registry.agent_factory(agent_name)("minecraft", llm, {})
    run_eval(make_env(), agent, env_name="minecraft", agent_name=agent_name, task_ids=["mine_log", "craft_planks"],
             episodes=1, max_steps=5, out_dir=tmp_path, progress=False)
    recs = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert len(recs) == 2
    for r in recs:
        assert not (r["reason"] or "").startswith("agent error"), r["reason"]
        assert r["steps"] >= 1 and r["plan_fallbacks"] >= 1, r  # the garbage plan was refused, fallback used
    assert len(llm.prompts) <= 2 * 5 * 10, f"{len(llm.prompts)} LLM calls for 10 steps: retries are unbounded"
