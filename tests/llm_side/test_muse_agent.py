"""MUSE-LLM agent: 5 rollouts in one batched call at temperature 0.5, M_sa picks the best first
action, competence recorded, adaptation refits M_sa from replay and is undone for the next task;
one real ALFWorld game with the real offline model and the packaged sentence encoder."""

from __future__ import annotations

import functools
import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from llm_side.agents import self_awareness as sa
from llm_side.agents.muse import MuseAgent, load_replay, make_agent
from llm_side.backends.scripted import ScriptedLLM
from llm_side.harness.contracts import EpisodeOutcome, Observation

sys.path.insert(0, str(Path(__file__).parent))
from test_alfworld import first_task, shared_env, smollm2  # noqa: E402


class BowEmbedder:
    """Hashed bag of words: a deterministic stand-in for the sentence encoder in unit tests."""

    name = "bow-test"
    dim = 32

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


class CountingLLM(ScriptedLLM):
    def __init__(self, fn):
        super().__init__(fn)
        self.calls = []

    def complete(self, prompt, **kw):
        self.calls.append(kw)
        return super().complete(prompt, **kw)


ROLLOUTS = [" look\nNothing happens.\n> look\nNothing happens.", " win\nYou won.", " look around\nNothing.",
            "", " look\nNothing happens."]


@functools.lru_cache(maxsize=1)
def _trained_state():
    msa = sa.SelfAwarenessModel(BowEmbedder(), hidden=32)
    data = [sa.SAExample("win", "", sa.chunk_text("", [("win", "You won.")]), 1.0),
            sa.SAExample("win", "", sa.chunk_text("", [("look", "Nothing happens.")]), 0.0)] * 8
    msa.fit(data, epochs=40, lr=2e-2)
    return msa.mlp.state_dict()


def _trained_msa():
    """An M_sa that prefers 'win' chunks (trained once per process, copied per test)."""
    msa = sa.SelfAwarenessModel(BowEmbedder(), hidden=32)
    msa.mlp.load_state_dict(_trained_state())
    return msa


def _begin(agent, episode=0, task_id="t"):
    agent.begin_episode(Observation("Room.\nYour task is to: win.", "win"), task_id=task_id, episode=episode,
                        env=object())


def test_batched_rollouts_best_first_action_and_competence():
    llm = CountingLLM(lambda p, i: ROLLOUTS[i % 5] if p.endswith(">") else " a plan")
    agent = MuseAgent(llm, _trained_msa())
    _begin(agent)
    d = agent.act("Room.", None)
    assert llm.calls[0]["n"] == 5 and llm.calls[0]["temperature"] == 0.5 and len(llm.calls) == 1
    assert d.action == "win"
    assert 0.5 < d.competence <= 1.0 and d.competence == pytest.approx(max(d.info["rollout_scores"]), abs=1e-4)
    assert d.info["valid_rollouts"] == 4 and d.info["rollouts"] == 5  # the empty rollout is dropped
    scores, actions = d.info["rollout_scores"], d.info["rollout_actions"]  # the choice, recorded
    assert len(actions) == len(scores) == 4 and actions[int(np.argmax(scores))] == d.action == "win"


def test_vote_control_takes_the_majority_first_action_where_msa_takes_the_best():
    """The same five rollouts: M_sa picks the one 'win' rollout, the vote the first action two rollouts share."""
    llm = CountingLLM(lambda p, i: ROLLOUTS[i % 5] if p.endswith(">") else " a plan")
    paper, vote = MuseAgent(llm, _trained_msa()), MuseAgent(llm, _trained_msa(), select="vote")
    for agent in (paper, vote):
        _begin(agent)
    d_msa, d_vote = paper.act("Room.", None), vote.act("Room.", None)
    assert d_msa.action == "win" and d_vote.action == "look"
    assert d_vote.info["rollout_actions"] == ["look", "win", "look around", "look"]
    assert d_vote.competence == pytest.approx(d_vote.info["rollout_scores"][0], abs=1e-4)  # the chosen one's score
    assert d_vote.competence < d_msa.competence


@pytest.mark.parametrize("select", ["msa", "vote"])
def test_what_it_does_depends_on_what_it_sees(select):
    """Closed loop: the same agent, two observation streams, different actions. The world model's rollouts read
    the last observation in the prompt, and either rule follows them."""
    def rollouts(prompt, i):
        if not prompt.endswith(">"):
            return " a plan"
        return " take key\nYou take the key." if "key" in prompt.rsplit("\n>", 2)[-2] else " look\nNothing."

    actions = []
    for observation in ("You see a key on the table.", "You see a closed door."):
        agent = MuseAgent(ScriptedLLM(rollouts), _trained_msa(), select=select)
        _begin(agent)
        agent.act("Room.", None)  # the first step sees the episode's first observation
        actions.append(agent.act(observation, None).action)
    assert actions == ["take key", "look"]


def test_choose_ties_go_to_the_earliest_rollout_and_bad_selections_are_refused():
    from llm_side.agents.muse import choose

    assert choose([0.1, 0.9, 0.2], ["a", "b", "c"], "vote") == 0  # all distinct: the first sample
    assert choose([0.1, 0.9, 0.2, 0.3], ["a", "b", "b", "a"], "vote") == 0  # a tie: the earliest
    assert choose([0.1, 0.9, 0.2, 0.3], ["a", "b", "c", "c"], "vote") == 2
    assert choose([0.1, 0.9, 0.2, 0.3], ["a", "b", "c", "c"], "msa") == 1
    with pytest.raises(ValueError, match="select must be one of msa, vote"):
        MuseAgent(ScriptedLLM(["x"]), _trained_msa(), select="best")
    from llm_side.agents.muse import Options
    from muse_common.settings import build_options

    assert build_options(Options, {"select": "vote"}, "muse").select == "vote"  # --agent-opt select=vote
    with pytest.raises(ValueError, match="select"):
        build_options(Options, {"select": "best"}, "muse")


def test_all_rollouts_invalid_gives_invalid_action():
    agent = MuseAgent(ScriptedLLM(lambda p, i: "" if p.endswith(">") else " plan"), _trained_msa())
    _begin(agent)
    d = agent.act("Room.", None)
    assert d.action == "" and d.info["invalid"] and d.competence is None


def test_adaptation_refits_then_resets_for_next_task_and_resumes_identically():
    msa = _trained_msa()
    replay = [sa.SAExample("win", "", sa.chunk_text("", [("win", "You won.")]), 1.0)] * 4
    llm = ScriptedLLM(lambda p, i: " look" if p.endswith(">") else " plan")
    agent = MuseAgent(llm, msa, adapt_episodes=2, replay=replay, adapt_epochs=5)
    base = {k: v.clone() for k, v in msa.mlp.state_dict().items()}
    for e in range(2):
        _begin(agent, e)
        agent.act("Room.", None)
        agent.end_episode(EpisodeOutcome("t", e, False, 1, None, [("look", "Nothing happens.")], task="win"))
        assert len(agent.episode_extras()["chunk_competence"]) == 1
    assert agent.episode_extras()["msa_adapted"] is True
    adapted = {k: v.clone() for k, v in msa.mlp.state_dict().items()}
    assert any(not torch.equal(base[k], adapted[k]) for k in base)
    mem = agent.memory()
    assert len(mem["sa_new"]) == 2 and mem["sa_adapted"] is True

    agent.load_memory({})  # next task: back to pre-deployment weights
    assert all(torch.equal(base[k], msa.mlp.state_dict()[k]) for k in base)
    agent.load_memory(mem)  # resumed task: the same refit
    assert all(torch.allclose(adapted[k], msa.mlp.state_dict()[k]) for k in base)


def test_msa_save_load_and_replay(tmp_path):
    msa = _trained_msa()
    msa.save(tmp_path)
    again = sa.SelfAwarenessModel.load(tmp_path, BowEmbedder())
    texts = [sa.chunk_text("", [("win", "You won.")])]
    assert np.allclose(msa.predict(["win"], texts), again.predict(["win"], texts))
    assert load_replay(tmp_path) == []


@pytest.mark.slow
def test_muse_real_alfworld_smollm2(tmp_path):
    alfworld_env, llm, task = shared_env(), smollm2(), first_task()
    from llm_side.harness.runner import run_eval
    from muse_common.files import read_jsonl

    agent = make_agent("alfworld", llm, {"rollout_tokens": "16", "max_tokens": "16"})
    agent.reflection_tokens = 16
    run_eval(alfworld_env, agent, env_name="alfworld", agent_name="muse", task_ids=[task], episodes=1,
             max_steps=2, out_dir=tmp_path, progress=False)
    (rec,) = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert rec["steps"] == 2 and len(rec["competence"]) == 2
    assert all(isinstance(c, float) and 0.0 <= c <= 1.0 for c in rec["competence"])
    assert all(len(i["rollout_scores"]) == i["valid_rollouts"] for i in rec["step_info"] if "rollout_scores" in i)
    assert len(rec["chunk_competence"]) == 1 and isinstance(rec["plan"], str)
    assert isinstance(rec["reflection"], str)


# -- the rollout horizon (MUSE §4.1.3) ---------------------------------------------------------------
def test_rollout_budget_follows_the_context_window_and_states_the_cpu_default():
    from llm_side.agents.muse import CPU_ROLLOUT_TOKENS, DEFAULT_CONTEXT_WINDOW, rollout_budget

    assert rollout_budget("context", 3000, 32768, on_cpu=True) == 32768 - 3000  # the paper: up to the window
    assert rollout_budget("auto", 3000, 32768, on_cpu=False) == 32768 - 3000
    assert rollout_budget("auto", 3000, 32768, on_cpu=True) == CPU_ROLLOUT_TOKENS == 64
    assert rollout_budget("context", 100, None, on_cpu=False) == DEFAULT_CONTEXT_WINDOW - 100
    assert rollout_budget("context", 9000, 8192, on_cpu=False) == 1
    assert rollout_budget(64, 3000, 32768, on_cpu=False) == 64
    for bad in (0, "far", True):
        with pytest.raises(ValueError, match="rollout_tokens"):
            rollout_budget(bad, 0, None, on_cpu=False)


class WindowLLM(CountingLLM):
    context_window = 2000
    on_cpu = False


LONG_ROLLOUT = (" think: win it\nOK.\n\n> look\nNothing happens.\n> look\nNothing happens.\n\n"
                "> look\nNothing happens.\n> look\nNothing happens.\n> win\nYou won.")


def test_rollouts_run_to_the_window_and_are_scored_past_blank_lines():
    llm = WindowLLM(lambda p, i: LONG_ROLLOUT if p.endswith(">") else " a plan")
    agent = MuseAgent(llm, _trained_msa())
    _begin(agent)
    d = agent.act("Room.", None)
    prompt = llm.prompts[0]
    assert llm.calls[0]["max_tokens"] == 2000 - (len(prompt) + 3) // 4 == d.info["rollout_tokens"]
    assert llm.calls[0]["stop"] == ["Here is the task"]  # not a blank line
    assert d.info["rollout_pairs"] == [6] * 5  # every pair of the rollout, blank lines skipped
    four = MuseAgent(WindowLLM(lambda p, i: LONG_ROLLOUT), _trained_msa(), score_pairs=4, rollout_tokens=50)
    _begin(four)
    d4 = four.act("Room.", None)
    assert d4.info["rollout_pairs"] == [4] * 5 and d4.info["rollout_tokens"] == 50
    # the last pair ('win') is what makes a full rollout look competent to this M_sa
    assert d.competence > d4.competence


def test_muse_options_reject_bad_horizon():
    with pytest.raises(ValueError, match="rollout_tokens"):
        MuseAgent(ScriptedLLM(["x"]), _trained_msa(), rollout_tokens="far")
    with pytest.raises(ValueError, match="score_pairs"):
        MuseAgent(ScriptedLLM(["x"]), _trained_msa(), score_pairs=0)
