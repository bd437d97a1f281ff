"""M_sa (Algorithm 2): chunking into 4 action-observation pairs, plan extraction, BCE training lowers
the loss, save/load with a clear embedder-mismatch error; on real recorded ALFWorld episodes with the
packaged sentence encoder, training lowers the loss and the harness computes its AUROC."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from llm_side.agents import self_awareness as sa
from llm_side.training.self_awareness import METRICS_FILE, split_by_task, train_msa
from muse_common import metrics

sys.path.insert(0, str(Path(__file__).parent))
from test_alfworld import ExpertAgent, LookAgent, shared_env  # noqa: E402
from test_muse_agent import BowEmbedder  # noqa: E402


def _record(task, success, n, think=True):
    actions = (["think: go win"] if think else []) + [("win" if success else "look") for _ in range(n)]
    return {"task": task, "task_text": f"task {task}", "success": success, "actions": actions,
            "observations": ["OK." if a.startswith("think") else "obs" for a in actions]}


def test_chunks_are_non_overlapping_fours():
    pairs = [(f"a{i}", f"o{i}") for i in range(10)]
    cs = sa.chunks(pairs)
    assert [len(c) for c in cs] == [4, 4, 2] and cs[1][0] == ("a4", "o4")
    assert sa.chunks([]) == []


def test_examples_from_record_plan_and_label():
    ex = sa.examples_from_record(_record("t", True, 6))
    assert len(ex) == 2 and all(e.label == 1.0 and e.plan == "go win" and e.task == "task t" for e in ex)
    assert ex[0].chunk.startswith("Plan: go win\n> think: go win\nOK.\n> win\nobs\n")
    assert sa.episode_plan(["look", "think: x"]) == "x" and sa.episode_plan(["look"]) == ""
    bad = _record("t", True, 2)
    bad["observations"].pop()
    with pytest.raises(ValueError, match="actions but"):
        sa.examples_from_record(bad)


def test_fit_lowers_loss_and_save_load_checks_embedder(tmp_path):
    recs = [_record(f"s{i}", True, 4) for i in range(4)] + [_record(f"f{i}", False, 4) for i in range(4)]
    out = train_msa(recs, BowEmbedder(), tmp_path / "msa", epochs=40, hidden=32)
    assert out["loss_history"][-1] < out["loss_before"] and out["train"]["auroc"] > 0.9
    assert (tmp_path / "msa" / METRICS_FILE).is_file() and (tmp_path / "msa" / "replay.jsonl").is_file()
    model = sa.SelfAwarenessModel.load(tmp_path / "msa", BowEmbedder())
    assert model.score("task s0", "go win", [("win", "obs")]) > model.score("task f0", "go win", [("look", "obs")])

    class Other(BowEmbedder):
        name, dim = "other", 16
    with pytest.raises(ValueError, match="trained on embedder 'bow-test'"):
        sa.SelfAwarenessModel.load(tmp_path / "msa", Other())
    with pytest.raises(FileNotFoundError, match="train-sa"):
        sa.SelfAwarenessModel.load(tmp_path / "nothing", BowEmbedder())
    with pytest.raises(ValueError, match="no trajectories"):
        train_msa([{"task": "x", "actions": []}], BowEmbedder(), tmp_path / "empty")


def test_split_by_task_holds_out_whole_tasks():
    recs = [_record(f"t{i}", i % 2 == 0, 2) for i in range(10) for _ in range(2)]
    train, val = split_by_task(recs, 0.3, seed=1)
    assert {r["task"] for r in train}.isdisjoint({r["task"] for r in val}) and len({r["task"] for r in val}) == 3


@pytest.mark.slow
def test_msa_on_real_alfworld_records(tmp_path):
    """Expert (wins) and looking-around (fails) episodes from real games, through the runner."""
    alfworld_env = shared_env()
    from llm_side.backends import load_embedder
    from llm_side.harness.runner import run_eval
    from muse_common.files import read_jsonl

    tasks = alfworld_env.task_ids("eval_out_of_distribution")[:2]
    for name, agent in (("expert", ExpertAgent()), ("look", LookAgent())):
        run_eval(alfworld_env, agent, env_name="alfworld", agent_name=name, task_ids=tasks, episodes=1,
                 max_steps=12, out_dir=tmp_path / name, progress=False)
    recs = [r for n in ("expert", "look") for r in read_jsonl(tmp_path / n / "episodes.jsonl")]
    assert sorted(r["success"] for r in recs) == [False, False, True, True]
    out = train_msa(recs, load_embedder(), tmp_path / "msa", epochs=30)
    assert out["loss_history"][-1] < out["loss_before"]
    model = sa.SelfAwarenessModel.load(tmp_path / "msa", load_embedder())
    examples = sa.examples_from_records(recs)
    scores = model.predict([e.task for e in examples], [e.chunk for e in examples])
    auc = metrics.auroc(scores, [e.label > 0.5 for e in examples])
    assert not math.isnan(auc) and auc == pytest.approx(out["train"]["auroc"])
    assert 0.5 < auc <= 1.0
