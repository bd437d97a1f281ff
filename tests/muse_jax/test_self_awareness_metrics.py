"""Self-awareness as a training signal (metrics.jsonl `sa/*`) and Table 1 over seeds (benchmarks/table1.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import table1 as T
from muse_jax import evaluate


def _ep(task: str, i: int, success: bool, level: float, steps: int = 10, seed: int = 0) -> dict:
    """A MUSE record whose competence and psi_1 sit at `level` (0..1) for every step."""
    return {"seed": seed, "task": task, "episode": i, "success": success, "time_to_success": 3 if success else -1,
            "length": steps, "signal": [5 * level] * steps, "psi1": [level] * steps,
            "quantile": [5 if level > 0.5 else 0] * steps, "value": [level] * steps}


def test_a_perfect_predictor_scores_one_and_one_class_is_undefined():
    eps = [_ep("a", 0, True, 0.9), _ep("a", 1, False, 0.1), _ep("b", 0, True, 0.8), _ep("b", 1, False, 0.2)]
    m = evaluate.self_awareness("muse", eps, n_quantiles=5, max_steps=10)
    assert m["sa/auroc"] == 1.0 and m["sa/accuracy"] == 1.0
    assert m["sa/episodes"] == 4 and m["sa/successes"] == 2 and m["sa/outcome_classes"] == 2
    assert m["sa/auroc/a"] == 1.0 and m["sa/auroc/b"] == 1.0
    inverted = [dict(e, psi1=[1 - e["psi1"][0]] * 10, signal=[5 - e["signal"][0]] * 10) for e in eps]
    m = evaluate.self_awareness("muse", inverted, 5, 10)
    assert m["sa/auroc"] == 0.0 and m["sa/accuracy"] == 0.0
    failed = [_ep("a", i, False, 0.3) for i in range(3)]
    m = evaluate.self_awareness("muse", failed, 5, 10)
    assert m["sa/auroc"] is None and m["sa/outcome_classes"] == 1  # never a number made up
    assert evaluate.self_awareness("muse", [], 5, 10) == {}


def test_dreamer_reports_the_raw_value_beside_the_normalised_signal():
    eps = [_ep("a", 0, True, 0.9), _ep("a", 1, False, 0.1)]
    for e, raw in zip(eps, ([0.0] * 10, [1.0] * 10), strict=True):
        e["value"] = raw  # the raw value ranks the other way round
    m = evaluate.self_awareness("dreamer", eps, 5, 10)
    assert m["sa/auroc"] == 1.0 and m["sa/auroc_raw_value"] == 0.0
    assert "sa/quantile_accuracy" not in m


def test_results_split_self_awareness_into_early_and_late_episodes():
    eps = [_ep("a", i, i >= 2, 0.9 if i >= 2 else 0.1) for i in range(4)]
    halves = evaluate.by_episode_index("muse", eps, 5, 10)
    assert [(h["half"], h["episode_index"], h["episodes"]) for h in halves] == [("early", [0, 1], 2),
                                                                              ("late", [2, 3], 2)]
    assert halves[0]["success_rate"] == 0.0 and halves[1]["success_rate"] == 1.0


def test_table1_intervals_cover_the_point_and_pairs_match_by_seed_task_episode():
    rng = np.random.default_rng(0)
    seeds = [[_ep("a", i, bool(rng.random() < 0.5), float(rng.random()), seed=s) for i in range(20)]
             for s in range(3)]
    f = T.figures("muse", [e for s in seeds for e in s])
    ci = T.bootstrap("muse", seeds, draws=300)
    for k in ("success_rate", "auroc", "accuracy"):
        lo, hi = ci[k]
        assert lo <= f[k] <= hi and hi - lo > 0.01, k  # random predictions: a wide interval around ~0.5
    assert ci["auroc"][0] < 0.5 < ci["auroc"][1]
    muse = [e for s in seeds for e in s]
    dreamer = [dict(e, success=not e["success"]) for e in muse[:30]]  # flipped outcomes, 30 shared keys
    p = T.paired(muse, dreamer)
    assert p["pairs"] == 30 and p["muse_only"] + p["dreamer_only"] == 30
    assert not math.isnan(p["mcnemar_p"])


@pytest.mark.parametrize("agent", ["muse", "dreamer"])
def test_a_weighted_resample_scores_what_its_concatenated_episodes_score(agent):
    """The bootstrap scores a resample by how often each episode was drawn; with tied scores, repeated
    episodes and a one-class draw it must give `figures` of the resampled episodes themselves."""
    rng = np.random.default_rng(1)
    eps = [dict(_ep("a", i, bool(i % 3 == 0), 0.0, steps=int(rng.integers(1, 9))), seed=i % 2) for i in range(12)]
    for e in eps:  # few distinct values: many ties across and within episodes
        e["signal"] = [float(v) for v in rng.integers(0, 4, len(e["signal"]))]
        e["psi1"] = [float(v) for v in rng.random(len(e["signal"]))]
    pool = T._Pool(eps, agent)
    draws = [rng.integers(0, len(eps), len(eps)) for _ in range(25)] + [np.array([1, 2, 2, 4])]  # last: no success
    counts = np.stack([np.bincount(d, minlength=len(eps)) for d in draws])
    fast = pool.figures(counts)
    for row, d in enumerate(draws):
        slow = T.figures(agent, [eps[i] for i in d])
        for k, v in slow.items():
            assert (math.isnan(v) and math.isnan(fast[k][row])) or fast[k][row] == pytest.approx(v, abs=1e-12), k
    assert math.isnan(fast["auroc"][-1])


def test_table1_line_keeps_what_the_page_needs(tmp_path):
    import json

    run = tmp_path / "muse"
    (run / "adapt").mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 10, "env_steps": 10, "train_steps": 4, "episodes": 2,
                                                   "success_rate": 0.5, "sa/auroc": 0.7, "sa/episodes": 2.0}) + "\n")
    (run / "adapt" / "episodes.jsonl").write_text(json.dumps({**_ep("a", 0, True, 0.9), "regulation_grad_norm": [1.0]})
                                                  + "\n")
    line = T.run_line(run, "muse", config="small", device="cpu", seed=3, commit="abc", planned=2)
    assert line["pretrain"]["sa_last_window"] == {"auroc": 0.7, "episodes": 2.0}
    assert line["adapt_episodes"] == 1 and line["adapt_episodes_planned"] == 2
    assert line["episodes"][0]["seed"] == 3 and "regulation_grad_norm" not in line["episodes"][0]


def test_table1_line_reads_pretraining_at_the_checkpoint_adaptation_used(tmp_path):
    """A time limit can stop pre-training past its newest checkpoint: the line's pre-training figures are
    those of the checkpoint's row, and where it stopped is kept beside them."""
    import json

    run = tmp_path / "muse"
    (run / "adapt").mkdir(parents=True)
    rows = [{"step": s, "env_steps": s, "train_steps": s // 10, "episodes": s // 100, "success_rate": 0.1,
             "sa/auroc": s / 10_000} for s in (2000, 4000, 4800)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "adapt" / "adapt.json").write_text(json.dumps({"step": 4000}))
    (run / "adapt" / "episodes.jsonl").write_text(json.dumps(_ep("a", 0, True, 0.9)) + "\n")
    line = T.run_line(run, "muse", config="small", device="cpu", seed=0, commit="abc", planned=1)
    assert line["pretrain"]["env_steps"] == 4000 and line["pretrain"]["train_steps"] == 400
    assert line["pretrain"]["sa_last_window"]["auroc"] == 0.4
    assert [w["step"] for w in line["pretrain"]["windows"]] == [2000, 4000]
    assert line["pretrain"]["stopped_at_env_steps"] == 4800


def test_table1_accuracy_control_and_plain_reading():
    """Accuracy is shown beside a constant 'fail' prediction's; the sentence follows the intervals."""
    from benchmarks.pages import _table1_reading

    eps = [_ep("a", i, i < 2, 0.1) for i in range(10)]  # 2 of 10 succeed: 'fail' scores 80% of steps
    assert T.figures("muse", eps)["constant_fail_accuracy"] == pytest.approx(0.8)
    stats = {"muse": {"auroc": 0.9, "auroc_ci": (0.7, 0.95), "accuracy": 0.9, "fail_rate": 0.8, "ind_auroc": [0.85]},
             "dreamer": {"auroc": 0.5, "auroc_ci": (0.3, 0.7), "accuracy": 0.5, "fail_rate": 0.8}}
    text = _table1_reading(stats, {"mcnemar_p": 0.01, "auroc_difference_ci95": (0.1, 0.5)})
    assert "MUSE's novel-task AUROC interval above chance, Dreamer-v3's spans chance" in text
    assert "excludes zero" in text and "successes differ (McNemar" in text and "reaches the 0.8" in text
    stats["muse"].update(auroc_ci=(0.4, 0.6), accuracy=0.7, ind_auroc=[0.85, 0.6])
    text = _table1_reading(stats, {"mcnemar_p": 0.5, "auroc_difference_ci95": (-0.1, 0.2)})
    assert "includes zero" in text and "by chance" in text and "at or below" in text and "misses" in text


def test_table1_fast_auroc_and_accuracy_equal_the_library_ones():
    """The bootstrap's rank AUROC and numpy accuracy give scikit-learn's values (ties included)."""
    from muse_common import metrics

    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, 400).astype(float)  # many ties
    labels = rng.random(400) < 0.3
    assert metrics.rank_auroc(scores, labels) == pytest.approx(metrics.auroc(scores, labels), abs=1e-12)
    assert math.isnan(metrics.rank_auroc(scores, np.zeros(400, bool)))
    eps = [_ep("a", i, bool(labels[i]), float(scores[i]) / 5) for i in range(40)]
    f = T.figures("muse", eps)
    p, y = T.step_arrays(eps, "psi1")
    assert f["accuracy"] == pytest.approx(metrics.accuracy(p, y, 0.5))
    d = T.figures("dreamer", eps)
    s, y = T.step_arrays(eps)
    assert d["accuracy"] == pytest.approx(metrics.accuracy(s, y, metrics.median_threshold(s)))


def test_table1_add_refuses_what_would_be_miscounted_in_one_line(tmp_path, monkeypatch, capsys):
    """`table1 add` reads run folders that came back from a device: a folder of the other agent in an agent's
    place, a malformed adapt.json, or a seed already added (its episodes would count twice and pair with
    themselves) is refused in one line, and no line of either agent is appended."""
    import json
    import sys

    def agent_run(root, agent, adapted_as):
        run = root / agent
        (run / "adapt").mkdir(parents=True)
        (run / "metrics.jsonl").write_text(json.dumps({"step": 10, "env_steps": 10, "sa/auroc": 0.7}) + "\n")
        (run / "adapt" / "adapt.json").write_text(json.dumps({"agent": adapted_as, "step": 10}))
        (run / "adapt" / "episodes.jsonl").write_text(json.dumps(_ep("a", 0, True, 0.9)) + "\n")

    out = tmp_path / "small.jsonl"

    def add(runs, seed=0):
        monkeypatch.setattr(sys, "argv", ["table1", "add", str(runs), "--config", "small", "--device", "cpu",
                                          "--seed", str(seed), "--commit", "abc", "--out", str(out)])
        T.main()

    swapped = tmp_path / "swapped"
    agent_run(swapped, "muse", "muse")
    agent_run(swapped, "dreamer", "muse")  # muse's adaptation in dreamer's place
    with pytest.raises(SystemExit) as e:
        add(swapped)
    assert "an adaptation of agent 'muse', but found as 'dreamer'" in str(e.value)
    assert len(str(e.value).splitlines()) == 1 and not out.exists()  # muse's line was not appended either
    (swapped / "dreamer" / "adapt" / "adapt.json").write_text("{torn")
    with pytest.raises(SystemExit, match="not an adaptation's settings"):
        add(swapped)
    assert not out.exists()

    good = tmp_path / "good"
    agent_run(good, "muse", "muse")
    agent_run(good, "dreamer", "dreamer")
    add(good)
    assert [json.loads(x)["agent"] for x in out.read_text().splitlines()] == ["muse", "dreamer"]
    with pytest.raises(SystemExit, match="already holds muse seed 0 of small"):
        add(good)
    add(good, seed=1)  # another seed of the same folders is a new line pair
    assert len(out.read_text().splitlines()) == 4
    capsys.readouterr()
