"""benchmarks/competence_reading.py: run folders in, one JSON with both readings side by side out."""

from __future__ import annotations

import json

import pytest

from benchmarks import competence_reading as cr
from muse_common.files import append_jsonl
from muse_jax import evaluate


def fake_run(root, reading, quantile):
    """A pretrain folder (metrics.jsonl) with adapt/ (episodes.jsonl, results.json); L = 75, N = 5
    (quickstart): success at step 40 of 50 (steps left 40..0: classes 3, 4, 5; from the start: 3)."""
    root.mkdir()
    append_jsonl(root / "metrics.jsonl", {"step": 600, "env_steps": 600, "sa/auroc": 0.1})
    append_jsonl(root / "metrics.jsonl", {"step": 8000, "env_steps": 8000, "sa/auroc": 0.7, "sa/accuracy": 0.9,
                                          "sa/quantile_accuracy": 0.8, "sa/episodes": 64.0})
    append_jsonl(root / "metrics.jsonl", {"step": 8000, "train/loss": 1.0})  # a row without sa/*
    ep = {"task": "a", "episode": 0, "success": True, "time_to_success": 40, "length": 50,
          "signal": [3.0] * 50, "psi1": [0.9] * 50, "quantile": quantile}
    fail = {"task": "a", "episode": 1, "success": False, "time_to_success": -1, "length": 50,
            "signal": [0.0] * 50, "psi1": [0.1] * 50, "quantile": [0] * 50}
    for r in (ep, fail):
        append_jsonl(root / "adapt" / "episodes.jsonl", r)
    evaluate.write_outputs(root / "adapt", "muse", [ep, fail], 5, 75, reading=reading)
    (root.parent / f"{reading}.time").write_text("start x\npretrain rc=0 wall_s=600\nadapt start y\n"
                                                 "adapt rc=0 wall_s=120\n")


def test_side_by_side_json_from_run_folders(tmp_path):
    start_true = evaluate.true_quantiles(40, 50, 75, 5, "from_start").tolist()
    left_true = evaluate.true_quantiles(40, 50, 75, 5).tolist()
    fake_run(tmp_path / "steps_left", "steps_left", left_true)
    fake_run(tmp_path / "from_start", "from_start", start_true)
    out = cr.main(["--run", f"steps_left={tmp_path / 'steps_left'}", "--run", f"from_start={tmp_path / 'from_start'}",
                   "--times", f"steps_left={tmp_path / 'steps_left.time'}",
                   "--times", f"from_start={tmp_path / 'from_start.time'}",
                   "--reference", f"main={tmp_path / 'steps_left'}",
                   "--machine", "2 CPU cores, shared", "--out", str(tmp_path / "out.json")])
    assert json.loads((tmp_path / "out.json").read_text()) == out
    left, start = out["runs"]["steps_left"], out["runs"]["from_start"]
    assert left["pretrain_last_window"]["sa/auroc"] == 0.7 and left["pretrain_last_window"]["step"] == 8000
    assert left["times"] == {"pretrain": {"rc": 0, "wall_s": 600}, "adapt": {"rc": 0, "wall_s": 120}}
    assert "--set model.competence_reading=from_start" in start["commands"]["pretrain"]
    assert left["adapt"]["competence_reading"] == "steps_left" and left["adapt"]["sa_quantile_accuracy"] == 1.0
    assert start["adapt"]["sa_quantile_accuracy"] == 1.0
    # each run's predictions rescored against the other reading: right only on the steps both agree on
    other = (sum(a == b for a, b in zip(left_true, start_true, strict=True)) + 50) / 100
    assert left["adapt_quantile_accuracy_against"] == {"steps_left": 1.0, "from_start": pytest.approx(other)}
    assert start["adapt_quantile_accuracy_against"] == {"steps_left": pytest.approx(other), "from_start": 1.0}
    assert out["references"]["main"]["adapt"] == left["adapt"]
    assert left["adapt_solved_step_share"] == 0.5 and left["adapt_predicted_failure_share"] == 0.5
    assert left["adapt_predicted_failure_share_solved"] == 0.0
    with pytest.raises(SystemExit, match="READING"):
        cr.main(["--run", "x=y", "--machine", "m", "--out", str(tmp_path / "o.json")])


def test_a_run_that_is_not_what_it_is_given_as_is_one_line(tmp_path):
    """Run folders are someone else's: a missing or malformed results.json, or a run of the other reading
    given under this one's name (which would swap the columns), is refused in one line and nothing is written."""
    left_true = evaluate.true_quantiles(40, 50, 75, 5).tolist()
    fake_run(tmp_path / "steps_left", "steps_left", left_true)
    out = tmp_path / "out.json"

    def refused(*runs: str) -> str:
        with pytest.raises(SystemExit) as e:
            cr.main([x for r in runs for x in ("--run", r)] + ["--machine", "m", "--out", str(out)])
        assert not out.exists()
        msg = str(e.value)
        assert len(msg.splitlines()) == 1
        return msg

    assert "model.competence_reading='steps_left'" in refused(f"from_start={tmp_path / 'steps_left'}")
    assert "is missing" in refused(f"steps_left={tmp_path / 'nowhere'}")
    results = tmp_path / "steps_left" / "adapt" / "results.json"
    for bad in ("[1, 2]", "{not json", json.dumps({"max_steps": "75"})):
        results.write_text(bad)
        assert "is not an adaptation's results" in refused(f"steps_left={tmp_path / 'steps_left'}")
