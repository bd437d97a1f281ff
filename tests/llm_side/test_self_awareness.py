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


def test_msa_without_task_input_ignores_the_task_and_keeps_it_saved(tmp_path):
    """The named variant (`--sa-without-task`): two tasks read the same to it, the setting survives save and
    load, and a meta file whose `task_input` is not a bool is refused in one line."""
    recs = [_record(f"s{i}", True, 4) for i in range(4)] + [_record(f"f{i}", False, 4) for i in range(4)]
    out = train_msa(recs, BowEmbedder(), tmp_path / "msa", epochs=20, hidden=16, task_input=False)
    assert out["task_input"] is False
    model = sa.SelfAwarenessModel.load(tmp_path / "msa", BowEmbedder())
    assert model.task_input is False
    pairs = [("look", "obs")]
    assert model.score("task s0", "go win", pairs) == model.score("something else", "go win", pairs)
    assert sa.SelfAwarenessModel(BowEmbedder()).task_input is True
    meta = tmp_path / "msa" / sa.META_FILE
    meta.write_text(meta.read_text().replace("false", '"no"'))
    with pytest.raises(ValueError, match="'task_input' is 'no', not true or false"):
        sa.SelfAwarenessModel.load(tmp_path / "msa", BowEmbedder())


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


def _game(task, won, loop_share, word, kind="put"):
    """An episode of 8 steps: `loop_share` of each 4-step chunk answered 'Nothing happens.', the rest `word`."""
    n_loop = round(4 * loop_share)
    obs = (["Nothing happens."] * n_loop + [f"You see a {word}."] * (4 - n_loop)) * 2
    return {"task": task, "task_text": f"{kind} a thing in place {task}", "success": won,
            "actions": [f"go to place {i}" for i in range(8)], "observations": obs}


def test_msa_on_unseen_games_is_scored_against_the_loop_control():
    """Leave one game out: M_sa's pooled AUROC on games it never saw, with a games-resampled interval, beside
    a no-training control (the share of 'Nothing happens.'). Where the outcome shows in the words and not in
    the looping, M_sa separates unseen games and the control cannot; where the won and lost episodes read
    the same, M_sa cannot either."""
    from llm_side.training.self_awareness import leave_one_game_out, loop_control

    assert loop_control("> a\nNothing happens.\n> b\nYou see a key.\n") == -0.5
    words = [_game(f"g{i}", won, 0.5, "key" if won else "rock") for i in range(6) for won in (True, False)]
    m = leave_one_game_out(words, BowEmbedder(), epochs=40)
    assert (m["games"], m["folds"], m["games_won"], m["folds_one_class_train"]) == (6, 6, 6, 0)
    assert m["msa"]["auroc"] > 0.9 and m["control"]["auroc"] == 0.5
    lo, hi = m["msa"]["auroc_ci95"]
    assert lo <= m["msa"]["auroc"] <= hi
    same = [_game(f"g{i}", won, 0.5, "key") for i in range(6) for won in (True, False)]
    assert leave_one_game_out(same, BowEmbedder(), epochs=40)["msa"]["auroc"] == pytest.approx(0.5)
    one = leave_one_game_out([_game("g0", True, 0, "key"), _game("g1", False, 1, "key")], BowEmbedder(), epochs=2)
    assert one["folds"] == 0 and one["folds_one_class_train"] == 2 and math.isnan(one["msa"]["auroc"])


def test_auroc_interval_resamples_groups():
    scores, labels = [0.9, 0.8, 0.2, 0.1], [True, True, False, False]
    assert metrics.auroc_interval_by_group(scores, labels, ["a", "a", "b", "b"], draws=200) == (1.0, 1.0)
    assert all(math.isnan(x) for x in metrics.auroc_interval_by_group(scores, labels, ["a"] * 4))
    lo, hi = metrics.auroc_interval_by_group([0.9, 0.1, 0.8, 0.7, 0.3, 0.6], [1, 0, 1, 0, 1, 0], list("aabbcc"))
    assert 0 <= lo < hi <= 1


def test_the_ablations_show_a_task_shortcut_and_the_folds_bias():
    """Won and lost episodes that read the same but whose tasks are of two kinds (every 'clean' game won,
    every 'cool' game lost): M_sa separates unseen games through the task text alone, and the ablation
    without the task cannot. Left one game out, an M_sa that sees nothing scores below chance (a held-out
    won game lowers its fold's share of wins), and the one without the task does exactly that; trained once
    and scored on novel games, it is at chance."""
    from llm_side.training.self_awareness import leave_one_game_out, novel_games

    def games(prefix, n):
        return [_game(f"{prefix}{i}{won}", won, 0.5, "key", kind="clean" if won else "cool")
                for i in range(n) for won in (True, False)]

    m = leave_one_game_out(games("g", 5), BowEmbedder(), epochs=40)
    assert m["msa"]["auroc"] > 0.9 and m["msa"]["minus_control"]["auroc"] > 0.4
    assert m["msa_without_input"]["auroc"] < 0.1
    assert m["msa_without_task"]["auroc"] == pytest.approx(m["msa_without_input"]["auroc"])
    n = novel_games(games("t", 4), games("n", 3), BowEmbedder(), epochs=40)
    assert n["msa"]["auroc"] > 0.9
    assert n["msa_without_task"]["auroc"] == n["msa_without_input"]["auroc"] == pytest.approx(0.5)
    assert n["msa_without_task"]["minus_control"]["auroc"] == pytest.approx(0.0)


def test_msa_on_novel_games_trains_on_all_train_games():
    """Trained on the collection's games, scored on other games' episodes: the words that mark a win carry
    over and the loop control, blind to them, stays at chance; a test game that is also a train game, or a
    collection of one outcome class, is refused in one line."""
    from llm_side.training.self_awareness import novel_games

    train = [_game(f"t{i}", won, 0.5, "key" if won else "rock") for i in range(4) for won in (True, False)]
    test = [_game(f"n{i}", won, 0.5, "key" if won else "rock") for i in range(3) for won in (True, False)]
    m = novel_games(train, test, BowEmbedder(), epochs=40)
    assert (m["train_games"], m["games"], m["games_won"], m["episodes"], m["chunks"]) == (4, 3, 3, 6, 12)
    assert m["msa"]["auroc"] > 0.9 and m["control"]["auroc"] == 0.5
    lo, hi = m["msa"]["minus_control"]["ci95"]
    assert 0 < lo <= m["msa"]["minus_control"]["auroc"] <= hi
    with pytest.raises(ValueError, match="also train games"):
        novel_games(train, train[:2], BowEmbedder(), epochs=1)
    with pytest.raises(ValueError, match="one outcome class"):
        novel_games([r for r in train if not r["success"]], test, BowEmbedder(), epochs=1)


def test_auroc_difference_is_paired_over_resampled_groups():
    labels = [True, False] * 4
    groups = list("aabbccdd")
    good, noise = [0.9, 0.1] * 4, [0.2, 0.8, 0.9, 0.1, 0.3, 0.7, 0.6, 0.4]
    d, lo, hi = metrics.auroc_difference_by_group(good, noise, labels, groups, draws=300)
    assert d == pytest.approx(1.0 - metrics.auroc(noise, labels)) and d > 0 and lo <= d <= hi
    assert metrics.auroc_difference_by_group(noise, noise, labels, groups, draws=100) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="same rows"):
        metrics.auroc_difference_by_group(good, noise[:3], labels, groups)
