"""RefRea: the memory rules (Algorithm 1) pinned with scripted models and a fake embedder, and one
real run on ScienceWorld with the offline model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_side.agents import refrea
from llm_side.agents.refrea import RefReaAgent, clean_insight, drop_latest, meta_due, promote, select_action
from llm_side.backends.scripted import ScriptedLLM
from llm_side.harness.contracts import EpisodeOutcome, Observation, StepResult


class ExactEmbedder:
    """Same text -> cosine 1, different text -> cosine 0 (a test double for the similarity check)."""

    name, dim = "exact", 64

    def __init__(self):
        self._index: dict[str, int] = {}  # one axis per distinct text: no hash collisions, no flakes

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i, self._index.setdefault(t.strip().lower(), len(self._index) % self.dim)] = 1.0
        return out


class RewardEnv:
    """Keeps `last_result` like the ScienceWorld env; no examples, so agents use generic prompts."""

    name, default_max_steps = "reward-env", 5

    def __init__(self):
        self.last_result = None

    def give(self, reward: float) -> None:
        self.last_result = StepResult(observation="ok", reward=reward, done=False, won=False)


# ---- pure rules -----------------------------------------------------------------------------------------
def test_promote_on_positive_reward_moves_new_into_target():
    m_new, m_target = promote(["b", "c"], ["a"], reward=8.0)
    assert m_new == [] and m_target == ["a", "b", "c"]


@pytest.mark.parametrize("reward", [0.0, -3.0])
def test_no_promotion_without_positive_reward(reward):
    assert promote(["b"], ["a"], reward) == (["b"], ["a"])


def test_promote_does_not_duplicate():
    assert promote(["a", "b"], ["a"], 1.0) == ([], ["a", "b"])


def test_drop_latest_and_meta_schedule():
    assert drop_latest(["x", "y"]) == ["x"] and drop_latest([]) == []
    assert [t for t in range(11) if meta_due(t, 5)] == [0, 5, 10]


def test_low_similarity_drops_only_the_latest_insight_and_resamples_up_to_limit():
    """Eq. 8: one disagreement drops M^New_latest once; the resamples reuse that memory (no further drops)."""
    seen = []

    def sample(m_new, attempt):
        seen.append(list(m_new))
        return f"action {attempt}"

    sel = select_action(sample, ["i1", "i2", "i3"], "reference", lambda a, b: 0.1, tau=0.8, max_samples=5)
    assert sel.samples == 5 and len(sel.similarities) == 5
    assert seen == [["i1", "i2", "i3"], ["i1", "i2"], ["i1", "i2"], ["i1", "i2"], ["i1", "i2"]]
    assert sel.m_new == ["i1", "i2"] and sel.action == "action 4"  # the last sample is executed


def test_similar_first_sample_keeps_memory():
    sel = select_action(lambda m, i: "go to kitchen", ["i1"], "go to kitchen", lambda a, b: 1.0, tau=0.8)
    assert sel.samples == 1 and sel.m_new == ["i1"] and sel.action == "go to kitchen"


def test_resampling_stops_when_similarity_reaches_tau():
    sims = iter([0.2, 0.5, 0.85, 0.99])
    sel = select_action(lambda m, i: f"a{i}", ["i1", "i2", "i3"], "ref", lambda a, b: next(sims), tau=0.8)
    assert sel.samples == 3 and sel.m_new == ["i1", "i2"] and sel.action == "a2"


def test_tau_zero_never_resamples():
    sel = select_action(lambda m, i: "x", ["i1"], "ref", lambda a, b: 0.0, tau=0.0)
    assert sel.samples == 1 and sel.m_new == ["i1"]


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_clean_insight_never_raises_and_is_bounded(text):
    out = clean_insight(text)
    assert isinstance(out, str) and len(out) <= refrea.MAX_INSIGHT_CHARS
    assert out == "" or any(c.isalpha() for c in out)


# ---- the agent with scripted models --------------------------------------------------------------------
def _reply(prompt: str, i: int) -> str:
    if prompt.startswith(refrea.META_PROMPT[:30]):
        return "Insight: open the door first\n"
    if "New insights" in prompt:
        return "> eat the door"  # the exploratory memory leads astray
    return "> open door to kitchen"


def _agent(**kw) -> tuple[RefReaAgent, ScriptedLLM, RewardEnv]:
    llm = ScriptedLLM(_reply)
    agent = RefReaAgent(llm, embedder=ExactEmbedder(), meta_interval=1, **kw)
    env = RewardEnv()
    agent.begin_episode(Observation(text="You are in the hallway.", task="Open the door."), task_id="t",
                        episode=0, env=env)
    return agent, llm, env


def test_agent_drops_disagreeing_insight_then_promotes_on_reward():
    agent, llm, env = _agent()
    d0 = agent.act("You are in the hallway.", None)  # t=0: no insight yet; meta adds one afterwards
    assert d0.action == "open door to kitchen" and d0.info["samples"] == 1
    assert agent.m_new == ["open the door first"]
    d1 = agent.act("Nothing happens.", None)  # reasoning with M_new disagrees -> insight dropped, resample
    assert d1.info["samples"] == 2 and d1.action == "open door to kitchen"
    assert d1.info["similarities"][0] < 0.8 <= d1.info["similarities"][1]
    assert agent.m_new == ["open the door first"]  # meta at t=1 added a fresh insight
    env.give(reward=8.0)
    agent.act("The door is now open.", None)
    assert agent.m_target == ["open the door first"]
    assert any("Validated insights:\n- open the door first" in p for p in llm.prompts)


def test_agent_resample_limit_is_five_samples():
    llm = ScriptedLLM(["> look around"])
    ref = ScriptedLLM(["> open door to kitchen"])
    agent = RefReaAgent(llm, reference_llm=ref, embedder=ExactEmbedder(), meta_interval=100)
    agent.begin_episode(Observation(text="hall", task="task"), task_id="t", episode=0, env=RewardEnv())
    d = agent.act("hall", None)
    reasoning_calls = [p for p in llm.prompts if not p.startswith(refrea.META_PROMPT[:30])]
    assert d.info["samples"] == 5 and len(reasoning_calls) == 5 and len(ref.prompts) == 1


def test_agent_drops_one_insight_per_disagreeing_step_not_one_per_resample():
    """Eq. 8 / Algorithm 1 line 9: five disagreeing samples cost M^New its latest entry only."""
    llm = ScriptedLLM(["> look around"])
    ref = ScriptedLLM(["> open door to kitchen"])
    agent = RefReaAgent(llm, reference_llm=ref, embedder=ExactEmbedder(), meta_interval=100)
    agent.load_memory({"m_new": ["a", "b", "c"], "m_target": ["t"]})
    agent.begin_episode(Observation(text="hall", task="task"), task_id="t", episode=0, env=RewardEnv())
    agent._t = 1  # past the t=0 meta-cognition call
    d = agent.act("hall", None)
    assert d.info["samples"] == 5 and agent.m_new == ["a", "b"] and agent.m_target == ["t"]
    prompts = [p for p in llm.prompts if not p.startswith(refrea.META_PROMPT[:30])]
    assert "- c" in prompts[0] and all("- c" not in p and "- b" in p for p in prompts[1:])


def test_no_reference_ablation_never_calls_reference_model():
    ref = ScriptedLLM(["> anything"])
    agent, llm, _ = _agent(no_reference=True, reference_llm=ref)
    agent.act("hall", None)
    d = agent.act("hall", None)
    assert ref.prompts == [] and d.info["samples"] == 1 and d.info["similarity"] is None
    assert d.action == "eat the door"  # exploratory memory is fed to the reasoning model unchecked


def test_no_metacognition_ablation_hides_memory_from_reasoning_and_caps_samples():
    llm = ScriptedLLM(_reply)
    ref = ScriptedLLM(["> something else"])
    agent = RefReaAgent(llm, reference_llm=ref, embedder=ExactEmbedder(), no_metacognition=True)
    agent.load_memory({"m_target": ["validated tip"], "m_new": ["new tip"]})
    agent.begin_episode(Observation(text="hall", task="task"), task_id="t", episode=0, env=RewardEnv())
    d = agent.act("hall", None)
    reasoning = [p for p in llm.prompts if not p.startswith(refrea.META_PROMPT[:30])]
    assert d.info["samples"] == 3 and all("tip" not in p for p in reasoning)
    assert "validated tip" in ref.prompts[0] and "new tip" not in ref.prompts[0]


def test_memory_round_trip_and_final_step_reward_promotes():
    agent, _, env = _agent()
    agent.act("hall", None)
    env.give(reward=100.0)
    agent.end_episode(EpisodeOutcome(task_id="t", episode=0, success=True, steps=1, score=100.0, trajectory=[]))
    mem = agent.memory()
    assert mem["m_target"] == ["open the door first"] and mem["solved"] and mem["trials"] == 1
    fresh = RefReaAgent(ScriptedLLM(["> x"]), embedder=ExactEmbedder())
    fresh.load_memory(mem)
    assert fresh.memory() == mem
    fresh.load_memory({})
    assert fresh.memory()["m_target"] == []


def test_malformed_output_is_an_invalid_action_not_a_crash():
    agent = RefReaAgent(ScriptedLLM(["", "\n\n", "!!!"]), embedder=ExactEmbedder(), no_reference=True)
    agent.begin_episode(Observation(text="hall", task="task"), task_id="t", episode=0, env=RewardEnv())
    d = agent.act("hall", None)
    assert d.action == "" and "invalid" in d.info


def test_make_agent_rejects_bad_options():
    with pytest.raises(ValueError, match="unknown refrea option 'tua'. Did you mean 'tau'"):
        refrea.make_agent("scienceworld", ScriptedLLM(["x"]), {"tua": 0.5})
    with pytest.raises(ValueError, match="true or false"):
        refrea.make_agent("scienceworld", ScriptedLLM(["x"]), {"no_reference": "maybe"})
    with pytest.raises(ValueError, match="tau"):
        refrea.make_agent("scienceworld", ScriptedLLM(["x"]), {"tau": 1.5})
    a = refrea.make_agent("scienceworld", ScriptedLLM(["x"]), {"tau": "0.6", "no_metacognition": True,
                                                               "reference_model": "same"})
    assert a.tau == 0.6 and a.no_metacognition and a.max_samples == 3


def test_the_reference_is_the_acting_model_by_default_and_paired_is_a_named_variant(monkeypatch):
    """Paper 003's main setting: one model in both roles (reference_model=same, greedy) with the reasoning
    model's first sample drawn at a temperature; `paired` picks another packaged model, never the actor's own
    (a served `openai:URL:qwen1.5b` actor gets qwen0.5b)."""
    from llm_side.backends import LazyLLM

    acting = LazyLLM("smollm2")
    same = refrea.make_agent("scienceworld", acting, {})
    assert same.reference_llm is acting and same.temperature == refrea.FIRST_TEMPERATURE > 0
    assert refrea.default_reference("qwen0.5b") == "qwen1.5b" == refrea.default_reference("smollm2")
    assert refrea.default_reference("qwen1.5b") == "qwen0.5b"
    assert refrea.default_reference("openai:http://127.0.0.1:8080/v1:qwen1.5b") == "qwen0.5b"
    checked = []
    monkeypatch.setattr("llm_side.backends.check_available", checked.append)
    agent = refrea.make_agent("scienceworld", LazyLLM("qwen0.5b"), {"reference_model": "paired"})
    assert agent.reference_llm.name == "qwen1.5b" and checked == ["qwen1.5b"]
    served = LazyLLM("openai:http://127.0.0.1:8080/v1:qwen1.5b")
    assert refrea.make_agent("scienceworld", served, {"reference_model": "paired"}).reference_llm.name == "qwen0.5b"
    assert refrea.make_agent("scienceworld", acting, {"reference_model": "gemma270m"}).reference_llm.name == "gemma270m"
    with pytest.warns(UserWarning, match="is the acting model"):
        refrea.make_agent("scienceworld", served, {"reference_model": "qwen1.5b"})

    def missing(spec):
        raise RuntimeError(f"model '{spec}' is not installed: pip install X")
    monkeypatch.setattr("llm_side.backends.check_available", missing)
    with pytest.raises(ValueError, match="reference model: model 'qwen1.5b' is not installed.*reference_model=same"):
        refrea.make_agent("scienceworld", acting, {"reference_model": "paired"})


def test_the_reference_decodes_greedily_and_the_first_sample_is_drawn_hot():
    calls = []

    class Recorder:
        name = "rec"

        def complete(self, prompt, **kw):
            calls.append(kw["temperature"])
            return ["look"]

    agent = RefReaAgent(Recorder(), embedder=ExactEmbedder(), meta_interval=100)
    agent.begin_episode(Observation(text="Room.", task="t"), task_id="t", episode=0, env=None)
    agent.act("Room.", None)
    assert calls == [0.0, refrea.FIRST_TEMPERATURE, 0.0]  # reference greedy, reasoning sample, greedy insight


def test_summary_reports_the_similarity_distribution():
    from llm_side.harness.summary import summarize

    recs = [{"env": "sw", "agent": "refrea", "task": "t", "success": False, "steps": 3, "tau": 0.8,
             "similarities": [1.0, 1.0, 0.5]},
            {"env": "sw", "agent": "refrea", "task": "t", "success": True, "steps": 1, "tau": 0.8,
             "similarities": [0.9]}]
    sim = summarize(recs)["similarity"]
    assert sim["steps"] == 4 and sim["max"] == 1.0 and sim["min"] == 0.5 and sim["median"] == 0.95
    assert sim["share_identical"] == 0.5 and sim["share_below_tau"] == 0.25 and sim["tau"] == 0.8
    assert "similarity" not in summarize([dict(recs[0], similarities=None)])


# ---- real run --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_refrea_runs_on_real_scienceworld_with_real_model(sw_env, tmp_path):
    from llm_side.backends import load_llm
    from llm_side.harness.records import load_records
    from llm_side.harness.runner import run_eval

    llm = load_llm("smollm2")
    # the paper's setting: the acting model is its own reference
    agent = refrea.make_agent("scienceworld", llm, {"max_samples": 2, "meta_interval": 2, "max_tokens": 16,
                                                    "meta_tokens": 24, "reference_model": "same"})
    task = sw_env.expand_task_ids(["4-1"])[0]
    summary = run_eval(sw_env, agent, env_name="scienceworld", agent_name="refrea", task_ids=[task],
                       episodes=1, max_steps=3, out_dir=tmp_path, progress=False)
    (rec,) = load_records(tmp_path)
    assert summary["episodes"] == 1 and rec["task"] == task and rec["reason"] is None
    assert 1 <= rec["steps"] <= 3 and len(rec["actions"]) == rec["steps"] == len(rec["step_info"])
    for info in rec["step_info"]:
        assert 1 <= info["samples"] <= 2 and isinstance(info["reference_action"], str)
        assert -1.0 <= info["similarity"] <= 1.0
    assert set(rec["memory"]) == {"m_target", "m_new", "trials", "solved"} and rec["memory"]["trials"] == 1
    assert 0.0 <= rec["score"] <= 100.0 and len(rec["similarities"]) == rec["steps"]
    assert summary["similarity"]["steps"] == rec["steps"]


# ---- tau sweep (Figure 3) ---------------------------------------------------------------------------------
class DoorEnv:
    """Locked on the first try; won by 'open door' from the second step on."""

    name, default_max_steps = "door", 3

    def __init__(self):
        self.last_result = None

    def task_ids(self, split=None):
        return ["door-0", "door-1"]

    def reset(self, task_id, seed=0):
        self.last_result, self.t = None, 0
        return Observation(text="A closed door.", task="Open the door.")

    def step(self, action):
        self.t += 1
        won = action == "open door" and self.t > 1
        self.last_result = StepResult(observation="Opened." if won else "Nothing.", reward=1.0 if won else 0.0,
                                      done=won, won=won, score=100.0 if won else 0.0)
        return self.last_result

    def admissible_actions(self):
        return None

    def restart(self):
        pass

    def close(self):
        pass


def test_tau_sweep_writes_points_and_plot(tmp_path):
    from llm_side import sweep
    from llm_side.run_spec import RunSpec

    def make(tau):  # reasoning says 'open door' only without exploratory memory; reference always does
        return RefReaAgent(ScriptedLLM(_door_reply), embedder=ExactEmbedder(), tau=tau, meta_interval=1)

    spec = RunSpec(env="door", agent="refrea", model="scripted", tasks=("door-0", "door-1"), max_steps=3)
    points = sweep.sweep_tau(DoorEnv(), spec, taus=[0.0, 0.8], out_dir=tmp_path, progress=False, make_agent=make)
    assert [p["tau"] for p in points] == [0.0, 0.8] and all(p["episodes"] == 2 for p in points)
    assert points[1]["mean_score"] == 100.0 and points[1]["mean_similarity"] == 1.0
    assert points[0]["mean_score"] == 0.0 and points[0]["mean_similarity"] < 1.0  # tau=0 follows bad memory
    saved = __import__("json").loads((tmp_path / "sweep.json").read_text())
    assert saved["points"] == points and (tmp_path / "sweep.png").stat().st_size > 1000
    assert (tmp_path / "tau_0.8" / "episodes.jsonl").exists()
    run = __import__("json").loads((tmp_path / "tau_0.8" / "run.json").read_text())  # each tau is a resumable run
    assert run["agent_opt"] == {"tau": 0.8} and run["tasks"] == ["door-0", "door-1"] and run["max_steps"] == 3
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        sweep.sweep_tau(DoorEnv(), spec, taus=[1.5], out_dir=tmp_path / "bad", progress=False, make_agent=make)
    assert sweep.parse_taus("0,0.5") == [0.0, 0.5]


@pytest.mark.parametrize("argv", [["--taus", "0,2"], ["--taus", "low"], ["--agent-opt", "tau=0.3"]])
def test_sweep_cli_rejects_bad_input_before_starting_anything(argv, tmp_path, capsys, monkeypatch):
    from llm_side import registry, sweep

    monkeypatch.setattr(registry, "env_factory", lambda name: pytest.fail("env started on bad input"))
    assert sweep.main(["--out", str(tmp_path), *argv]) == 2
    assert "sweep-tau: error:" in capsys.readouterr().err


def _door_reply(prompt: str, i: int) -> str:
    if prompt.startswith(refrea.META_PROMPT[:30]):
        return "try kicking it"
    return "> kick door" if "New insights" in prompt else "> open door"
