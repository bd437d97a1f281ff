"""`muse-llm alfworld-pipeline` from collection to deployment with a packaged model and nothing scripted:
the real SmolLM2 (the smallest packaged model) collects with Reflexion and wins nothing, so the pipeline
seeds the collection with ALFWorld's hand-coded expert (records marked expert), trains M_sa on both
outcomes, fine-tunes the actor on the expert's steps and measures it against the base on held-out rows,
skips DPO (the agent turned no failure into a success) and deploys MUSE with the trained parts.

Tiny budget for CI: one game, `shots=0` (short prompts), 4 SFT steps, a 2-step deployment."""

from __future__ import annotations

import json

import pytest

from muse_common.files import read_jsonl

# long: test_pipeline_alfworld.py runs every stage in CI; this unscripted variant (expert seeding) is `pytest -m long`
pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def test_alfworld_pipeline_seeds_the_expert_trains_and_deploys(tmp_path, capsys):
    pytest.importorskip("alfworld")
    from llm_side import cli

    common = ["--out", str(tmp_path), "--model", "smollm2", "--limit", "1", "--env-opt", "shots=0"]
    stages = (("collect", ["--collect-episodes", "1", "--max-steps", "8"]),
              ("train-sa", ["--sa-epochs", "3"]),
              ("sft", ["--sft-steps", "4", "--sft-heldout", "2"]),
              ("dpo", []),
              ("deploy", ["--adapt-episodes", "0", "--test-episodes", "1", "--max-steps", "2",
                          "--agent-opt", "n_rollouts=2", "--agent-opt", "rollout_tokens=48"]))
    for stage, extra in stages:
        assert cli.main(["alfworld-pipeline", "--stage", stage, *common, *extra]) == 0, stage
    err = capsys.readouterr().err

    own = list(read_jsonl(tmp_path / "collect" / "episodes.jsonl"))
    seed = list(read_jsonl(tmp_path / "collect_expert" / "episodes.jsonl"))
    assert [r["success"] for r in own] == [False] and own[0]["agent"] == "reflexion"
    assert [(r["success"], r["expert"], r["agent"]) for r in seed] == [(True, True, "alfworld-expert")]
    assert "seeding with ALFWorld's hand-coded expert on 1 of 1 train games" in err

    msa = json.loads((tmp_path / "msa" / "train_metrics.json").read_text())
    assert 0 < msa["positive"] < msa["examples"]  # the agent's failure and the expert's success

    sft = json.loads((tmp_path / "actor_sft" / "metrics.json").read_text())
    assert sft["rows_expert"] == len(seed[0]["actions"]) == sft["rows"] + sft["effect"]["heldout_rows"]
    assert sft["steps"] == 4 and sft["base_model"] == "smollm2" and sft["effect"]["heldout_rows"] == 2
    assert isinstance(sft["effect"]["differs"], bool) and "SFT effect:" in err
    assert [f"SFT step {i}/4" in err for i in range(1, 5)] == [True] * 4
    dpo = json.loads((tmp_path / "reflection_dpo" / "metrics.json").read_text())
    assert dpo["skipped"] and "DPO: skipped" in err

    deployed = list(read_jsonl(tmp_path / "deploy_adapt" / "episodes.jsonl"))
    assert len(deployed) == 1 and deployed[0]["msa_source"] == str(tmp_path / "msa")
    assert deployed[0]["actor_model"] == f"hf:{tmp_path / 'actor_sft' / 'merged'}"
    assert deployed[0]["reflection_model"] == "smollm2"  # no DPO'd model: the base reflects
    assert json.loads((tmp_path / "deploy_adapt" / "paper_metrics.json").read_text())["episodes"] == 1
