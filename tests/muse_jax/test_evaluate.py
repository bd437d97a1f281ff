"""Metrics and outputs on synthetic episodes with known answers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from muse_common.files import append_jsonl
from muse_jax import evaluate


def ep(task: str, i: int, success: bool, signal: list[float], tts: int = -1) -> dict:
    return {"task": task, "episode": i, "success": success, "time_to_success": tts if success else -1,
            "signal": signal}


def synthetic() -> list[dict]:
    return [
        ep("a", 0, True, [4.0, 4.5, 5.0], tts=2),
        ep("a", 1, False, [1.0, 0.5, 0.0]),
        ep("b", 0, True, [3.0, 3.0, 3.0], tts=10),
        ep("b", 1, False, [2.0, 3.0, 2.0]),
    ]


def test_muse_scores_match_hand_computation():
    res = evaluate.summarize("muse", synthetic(), n_quantiles=5, max_steps=20)
    # 12 steps; threshold 2.5: success steps all > 2.5 (6 right), failure steps: one 3.0 is wrong
    assert res["sa_accuracy"] == pytest.approx(11 / 12)
    # AUROC: positives {4,4.5,5,3,3,3} vs negatives {1,.5,0,2,3,2}: only the 3-vs-3 ties cost
    assert res["sa_auroc"] == pytest.approx(1 - 0.5 * 3 / 36)
    assert res["success_rate"] == pytest.approx(0.5)
    # §3.2.2 time to completion over all episodes, the two failures entering with L = 20
    assert res["mean_time_to_success"] == pytest.approx((2 + 20 + 10 + 20) / 4)
    assert res["mean_time_to_success_solved"] == pytest.approx(6.0)
    assert res["tasks_solved"] == 2
    assert [t["task"] for t in res["tasks"]] == ["a", "b"]
    assert res["tasks"][0]["sa_auroc"] == pytest.approx(1.0)


def test_dreamer_uses_median_threshold_and_perfect_separation_gives_auroc_one():
    eps = [ep("a", 0, True, [10.0, 11.0], tts=1), ep("a", 1, False, [-1.0, -2.0])]
    res = evaluate.summarize("dreamer", eps, n_quantiles=5, max_steps=20)
    assert res["sa_threshold"] == pytest.approx(np.median([10, 11, -1, -2]))
    assert res["sa_accuracy"] == 1.0 and res["sa_auroc"] == 1.0
    inverted = evaluate.summarize("dreamer", [ep("a", 0, True, [-5.0], 0), ep("a", 1, False, [5.0])], 5, 20)
    assert inverted["sa_auroc"] == 0.0


def test_single_class_gives_null_auroc_not_nan():
    res = evaluate.summarize("muse", [ep("a", 0, False, [1.0, 2.0])], n_quantiles=5, max_steps=20)
    assert res["sa_auroc"] is None and res["mean_time_to_success_solved"] is None
    assert res["mean_time_to_success"] == 20.0  # the failure enters with L
    json.dumps(res, allow_nan=False)


def test_unknown_agent_is_rejected():
    with pytest.raises(ValueError, match="muse"):
        evaluate.summarize("ppo", synthetic(), 5, 20)


def test_outputs_and_compare(tmp_path):
    out_a, out_b = tmp_path / "muse", tmp_path / "dreamer"
    for out, agent in ((out_a, "muse"), (out_b, "dreamer")):
        for rec in synthetic():
            append_jsonl(out / "episodes.jsonl", rec)
        evaluate.write_outputs(out, agent, synthetic(), n_quantiles=5, max_steps=20)
        for name in ("results.json", "roc.png", "time_to_success.png", "table.md"):
            assert (out / name).stat().st_size > 0
        assert (out / "roc.png").read_bytes()[:4] == b"\x89PNG"
    res = json.loads((out_a / "results.json").read_text())
    for key in ("agent", "sa_accuracy", "sa_auroc", "success_rate", "mean_time_to_success", "tasks"):
        assert key in res
    assert "| MUSE | AUROC |" in (out_a / "table.md").read_text()
    md = evaluate.compare([out_a, out_b], out=tmp_path / "roc_both.png")
    assert "MUSE" in md and "Dreamer-v3" in md and "| a |" in md
    # Table 1 side by side: one column per agent, then the paper's values
    assert "| Metric | MUSE | Dreamer-v3 | paper MUSE | paper Dreamer-v3 |" in md
    acc_row = next(line for line in md.splitlines() if line.startswith("| Accuracy |"))
    assert acc_row.startswith("| Accuracy | 92% | ") and acc_row.endswith(" | 92% | 39% |")  # MUSE 11/12; paper
    assert "| Quantile accuracy | n/a | n/a (no quantile head) |" in md
    assert (tmp_path / "roc_both.png").exists()
    with pytest.raises(FileNotFoundError, match="muse-wm adapt"):
        evaluate.compare([tmp_path / "missing"])


def test_quantile_classes_and_accuracy():
    """True class per step from the steps left (L=20, N=5: thresholds 20,16,12,8,4); failure = 0."""
    np.testing.assert_array_equal(evaluate.true_quantiles(10, 13, 20, 5), [3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5])
    np.testing.assert_array_equal(evaluate.true_quantiles(-1, 3, 20, 5), [0, 0, 0])
    eps = [dict(ep("a", 0, True, [5.0, 5.0, 5.0], tts=2), quantile=[5, 5, 4]),
           dict(ep("a", 1, False, [0.0, 0.0]), quantile=[0, 1])]
    res = evaluate.summarize("muse", eps, n_quantiles=5, max_steps=20)
    assert res["sa_quantile_accuracy"] == pytest.approx(3 / 5)


def test_muse_outputs_have_quantile_plot_and_row(tmp_path):
    eps = [dict(e, quantile=[5] * len(e["signal"])) for e in synthetic()]
    res = evaluate.write_outputs(tmp_path, "muse", eps, n_quantiles=5, max_steps=20)
    assert res["sa_quantile_accuracy"] is not None
    assert (tmp_path / "quantiles.png").read_bytes()[:4] == b"\x89PNG"
    assert "| MUSE | Quantile accuracy |" in (tmp_path / "table.md").read_text()


def test_one_outcome_class_is_said_in_words():
    res = evaluate.summarize("muse", [ep("a", 0, False, [1.0, 2.0]), ep("a", 1, False, [0.0])], 5, 20)
    md = evaluate.table_markdown([res])
    assert ("| MUSE | Accuracy | 100% (all 2 episodes failed: one outcome class, so accuracy is only the share of "
            "steps predicted to fail) |") in md
    assert "| MUSE | AUROC | n/a (all 2 episodes failed: undefined with one outcome class) |" in md
    mixed = evaluate.summarize("muse", [ep("a", 0, True, [4.0, 5.0]), ep("a", 1, False, [0.0])], 5, 20)
    assert "one outcome class" not in evaluate.table_markdown([mixed])


def test_a_constant_prediction_is_said_in_words():
    # mixed outcomes, but every competence value is below MUSE's threshold N/2 = 2.5
    res = evaluate.summarize("muse", [ep("a", 0, True, [0.2, 0.3], tts=1), ep("a", 1, False, [0.1, 0.0])], 5, 20)
    assert res["sa_predicted_success_share"] == 0.0 and res["sa_accuracy"] == 0.5
    md = evaluate.table_markdown([res])
    assert "every step predicted to fail at threshold 2.50: accuracy is only the share of steps that did fail" in md
    informative = evaluate.summarize("muse", [ep("a", 0, True, [4.0, 5.0], tts=1), ep("a", 1, False, [0.1])], 5, 20)
    assert "every step predicted" not in evaluate.table_markdown([informative])


def test_main_accuracy_is_psi1_over_half_and_n_half_is_the_named_variant():
    """A perfect predictor of success within the time limit: psi_1 high on every step of a success, even
    while the competence sum is below N/2 early in the episode (success still far away)."""
    eps = [dict(ep("a", 0, True, [1.0, 1.5, 4.0, 5.0], tts=3), psi1=[0.9, 0.9, 0.95, 1.0]),
           dict(ep("a", 1, False, [0.5, 0.2]), psi1=[0.2, 0.1])]
    res = evaluate.summarize("muse", eps, n_quantiles=5, max_steps=20)
    assert res["sa_accuracy"] == 1.0 and res["sa_accuracy_rule"] == "psi_1 > 1/2"
    assert res["sa_accuracy_n_half"] == pytest.approx(4 / 6)  # sum > 2.5 misses the two early steps
    assert res["sa_threshold"] == 0.5 and res["tasks"][0]["sa_accuracy"] == 1.0
    old = evaluate.summarize("muse", [{k: v for k, v in e.items() if k != "psi1"} for e in eps], 5, 20)
    assert old["sa_accuracy"] == old["sa_accuracy_n_half"] == pytest.approx(4 / 6)  # records without psi1
    assert old["sa_accuracy_rule"].startswith("sum psi > N/2")
    assert evaluate.summarize("dreamer", eps, 5, 20)["sa_accuracy_n_half"] is None


def test_table1_puts_the_papers_7_of_10_in_a_tasks_solved_row():
    res = evaluate.summarize("muse", synthetic(), n_quantiles=5, max_steps=20)
    assert res["tasks_solved"] == 2 and res["tasks_solved_fraction"] == 1.0
    md = evaluate.table1_side_by_side([res])
    solved = next(line for line in md.splitlines() if line.startswith("| Tasks solved"))
    assert solved.endswith("| 2/2 | 7/10 | 0/10 |")
    success = next(line for line in md.splitlines() if line.startswith("| Success rate"))
    assert "70%" not in success and success.endswith("| 50% |  |  |")  # the paper gives no per-episode rate


def test_regulation_effect_is_averaged_over_steps_and_null_without_regulation():
    eps = [dict(ep("a", 0, True, [4.0, 5.0], tts=1), regulation_action_change=[0.1, 0.3],
                regulation_state_change=[1.0, 3.0]),
           dict(ep("a", 1, False, [0.0]), regulation_action_change=[0.2], regulation_state_change=[2.0])]
    res = evaluate.summarize("muse", eps, 5, 20)
    assert res["regulation_action_change"] == pytest.approx(0.2)
    assert res["regulation_state_change"] == pytest.approx(2.0)
    assert res["regulation_ascent_action_change"] is None
    assert evaluate.summarize("muse", synthetic(), 5, 20)["regulation_state_change"] is None
