"""Algorithm 3 end to end on a tiny budget: `muse-llm alfworld-pipeline` collect -> train-sa -> SFT -> DPO
-> deploy on one real ALFWorld game with the packaged SmolLM2 and real prompts.

The collection actor plays a fixed script so that the run holds the outcome turns the paper's DPO rule
needs (fail -> success -> fail on one task): episode 0 and 2 only `look`, episode 1 follows ALFWorld's
hand-coded expert. Everything else is real: the reflections are SmolLM2's answers to the real
reflection prompts (with the two Reflexion examples, so a DPO pair is ~1800 tokens, past trl's old
1024 default), sampled at temperature 1 with a new seed per call, because SmolLM2 writes the same
sentence after every episode at one seed (and identical texts form no pair); SFT and DPO fine-tune
SmolLM2 on the run-time prompts, and MUSE deploys the fine-tuned actor, the DPO'd reflection model and
the trained M_sa. The actor prompts have no few-shot games (`shots=0`) so that SFT rows are ~500 tokens
on a CPU."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


class ScriptedCollector:
    """Actor: `look`, except in a task's episode 1 (one reflection in memory), where it plays the expert.
    Reflections (and anything else): the real packaged model."""

    name = "scripted-collector"

    def __init__(self, env: Any, real: Any):
        self.env, self.real = env, real
        self.calls = 0

    def complete(self, prompt: str, **kw: Any) -> list[str]:
        if prompt.endswith(">"):  # the actor's cue
            memory = prompt.rsplit("Your memory for the task below:", 1)
            episode = len(re.findall(r"^Trial \d+:", memory[1], flags=re.M)) if len(memory) == 2 else 0
            action = (self.env.expert_action() or "look") if episode == 1 else "look"
            return [f" {action}"] * int(kw.get("n", 1))
        self.calls += 1
        tokens = min(int(kw.get("max_tokens", 48)), 48)
        return self.real.complete(prompt, **dict(kw, temperature=1.0, max_tokens=tokens, seed=self.calls))


class _SharedEnv:
    """The test's env for every stage (closed by the test, not by a stage), with the Reflexion examples
    of the default env (`shots=0` drops them too)."""

    def __init__(self, env: Any, reflexion_examples: str):
        self._env = env
        self._reflexion_examples = reflexion_examples

    def reflexion_examples(self) -> str:
        return self._reflexion_examples

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def close(self) -> None:
        return None


def test_alfworld_pipeline_trains_every_model_and_deploys_them(tmp_path, monkeypatch):
    pytest.importorskip("alfworld")
    from llm_side import cli
    from llm_side import pipeline_alfworld as pipe
    from llm_side.backends import load_llm
    from llm_side.envs.alfworld import make_env
    from muse_common.files import read_jsonl

    env = make_env(expert="true", shots="0")  # no few-shot games in the actor prompt: short SFT rows on a CPU
    from llm_side.envs import alfworld_data

    examples = alfworld_data.reflexion_examples()
    monkeypatch.setattr(pipe, "_env", lambda cfg, expert=False: _SharedEnv(env, examples))
    try:
        common = ["--out", str(tmp_path), "--model", "smollm2", "--limit", "1", "--max-steps", "6"]
        cfg = pipe.PipelineConfig(out=tmp_path, model="smollm2", limit=1, collect_episodes=3, max_steps=6,
                                  progress=False)
        pipe.stage_collect(cfg, llm=ScriptedCollector(env, load_llm("smollm2")))
        collected = list(read_jsonl(tmp_path / "collect" / "episodes.jsonl"))
        assert [r["success"] for r in collected] == [False, True, False]
        for stage, extra in (("train-sa", ["--sa-epochs", "3"]), ("sft", ["--sft-steps", "3"]),
                             ("dpo", ["--dpo-steps", "1"]),
                             ("deploy", ["--adapt-episodes", "0", "--test-episodes", "1", "--max-steps", "2",
                                         "--agent-opt", "n_rollouts=3", "--agent-opt", "rollout_tokens=96"])):
            assert cli.main(["alfworld-pipeline", "--stage", stage, *common, *extra]) == 0, stage
    finally:
        env.close()

    sft_metrics = json.loads((tmp_path / "actor_sft" / "metrics.json").read_text())
    offered = sum(len(r["actions"]) for r in collected if r["success"])
    assert sft_metrics["rows"] + sft_metrics["effect"]["heldout_rows"] == offered == 5  # the expert's five steps
    assert sft_metrics["rows"] == sft_metrics["rows_trained"]
    assert sft_metrics["rows_left_out"] == 0 and sft_metrics["lora_delta"] > 0
    dpo_metrics = json.loads((tmp_path / "reflection_dpo" / "metrics.json").read_text())
    assert dpo_metrics["pairs_trained"] >= 1 and dpo_metrics["max_length"] > 1024 and dpo_metrics["steps"] == 1

    deployed = list(read_jsonl(tmp_path / "deploy_adapt" / "episodes.jsonl"))
    assert len(deployed) == 1 and deployed[0]["msa_source"] == str(tmp_path / "msa")
    assert deployed[0]["actor_model"] == f"hf:{tmp_path / 'actor_sft' / 'merged'}"
    assert deployed[0]["reflection_model"] == f"hf:{tmp_path / 'reflection_dpo' / 'merged'}"
    pairs = [n for info in deployed[0]["step_info"] or [] for n in info.get("rollout_pairs", [])]
    assert pairs and max(pairs) > 1, f"the fine-tuned actor's rollouts held {pairs} action/observation pairs"
