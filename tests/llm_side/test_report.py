"""`muse-llm report` tables on synthetic records with known figures, ROC plots and the env hook."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from llm_side import registry  # noqa: E402
from llm_side.harness.report import competence_pairs, render, report, run_row  # noqa: E402
from muse_common.files import append_jsonl  # noqa: E402


def _write(folder: Path, env: str, rows: list[tuple[str, bool, int, list | None]]) -> Path:
    for i, (task, success, steps, comp) in enumerate(rows):
        append_jsonl(
            folder / "episodes.jsonl",
            {
                "env": env,
                "agent": "muse",
                "task": task,
                "episode": i,
                "success": success,
                "steps": steps,
                "score": None,
                "actions": ["a"] * steps,
                "competence": comp,
            },
        )
    return folder


# Positives score {0.9, 0.8}, negatives {0.3, 0.85}: 3 of 4 pairs ordered -> AUROC 0.75;
# at threshold 0.5 three of four predictions are right -> accuracy 0.75.
ROWS = [("easy-0", True, 1, [0.9]), ("easy-1", True, 3, [0.8]), ("easy-2", False, 50, [0.3, 0.85])]


def test_run_row_known_auroc_accuracy_and_time_to_success():
    recs = [
        {"env": "fake", "agent": "muse", "task": t, "episode": 0, "success": s, "steps": n, "competence": c}
        for t, s, n, c in ROWS
    ]
    assert competence_pairs(recs) == ([0.9, 0.8, 0.3, 0.85], [True, True, False, False])
    row = run_row("r", recs, threshold=0.5)
    assert row["auroc"] == pytest.approx(0.75)
    assert row["sa_accuracy"] == pytest.approx(0.75)
    assert row["success_rate"] == pytest.approx(2 / 3)
    assert row["time_to_success"] == pytest.approx((1 + 3 + 100) / 3)  # failure -> 100-step penalty
    assert run_row("r", recs, threshold=0.86)["sa_accuracy"] == pytest.approx(0.75)


def test_report_tables_plots_and_env_hook(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.ENVS, "fake", "harness_fakes:make_env")
    a = _write(tmp_path / "a", "fake", ROWS)
    b = _write(tmp_path / "b", "fake", [("bad-0", False, 2, None), ("easy-0", True, 5, None)])
    c = _write(tmp_path / "c", "fake", [("easy-0", True, 2, [0.7]), ("easy-1", False, 4, [0.2])])
    tables, plots = report([a, b, c])
    titles = [t for t, _ in tables]
    assert titles[:2] == ["Success rate", "Time to success (failures count 100 steps)"]
    text = render(tables)
    unknown = "unknown | unknown | unknown"  # no run.json in these folders
    assert f"| a | fake | muse | {unknown} | 3 | 0.667 |" in text
    assert f"| b | fake | muse | {unknown} | 2 | 0.500 |" in text
    aware = dict(tables)["Self-awareness (threshold 0.5)"]
    assert (
        f"| a | fake | muse | {unknown} | 3 | 4 | 0.750 | 0.750 |" in aware and "| b |" not in aware
    )  # b made no predictions
    assert f"| c | fake | muse | {unknown} | 2 | 2 | 1.000 | 1.000 |" in aware
    assert "Fake env: successes by kind" in titles  # the env module's own hook ran on all records
    assert "| easy | 4 |" in dict(tables)["Fake env: successes by kind"]
    assert set(plots) == {a / "roc.png", c / "roc.png", tmp_path / "roc_combined.png"}
    assert all(p.stat().st_size > 1000 for p in plots)


def test_report_names_a_folder_without_records(tmp_path):
    with pytest.raises(FileNotFoundError, match="muse-llm run --out"):
        report([tmp_path])


# -- say what was run, and why a figure is degenerate ----------------------
def _run_json(folder: Path, model: str, max_steps: int | None) -> None:
    (folder / "run.json").write_text(json.dumps({"env": "fake", "agent": "muse", "model": model,
                                                 "max_steps": max_steps}))


def test_rows_name_model_backend_and_step_limit_and_env_tables_never_pool_them(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.ENVS, "fake", "harness_fakes:make_env")
    a = _write(tmp_path / "a", "fake", [("easy-0", True, 2, None)])
    b = _write(tmp_path / "b", "fake", [("easy-0", False, 5, None)])
    _run_json(a, "qwen0.5b", 50)
    _run_json(b, "openai:http://127.0.0.1:8080/v1:qwen0.5b", 5)
    tables, _ = report([a, b])
    text = render(tables)
    assert "| a | fake | muse | qwen0.5b | transformers | 50 | 1 | 1.000 |" in text
    assert "| b | fake | muse | openai:http://127.0.0.1:8080/v1:qwen0.5b | openai-server | 5 | 1 | 0.000 |" in text
    hooks = [t for t, _ in tables if t.startswith("Fake env: successes by kind")]
    assert hooks == ["Fake env: successes by kind [model qwen0.5b, transformers, max steps 50, default options]",
                     "Fake env: successes by kind [model openai:http://127.0.0.1:8080/v1:qwen0.5b, openai-server, "
                     "max steps 5, default options]"]  # one table per setting, not one pooling both runs


def test_env_tables_never_pool_runs_whose_agent_options_differ(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.ENVS, "fake", "harness_fakes:make_env")
    a = _write(tmp_path / "a", "fake", [("easy-0", True, 2, None)])
    b = _write(tmp_path / "b", "fake", [("easy-0", False, 5, None)])
    c = _write(tmp_path / "c", "fake", [("easy-1", False, 5, None)])
    for folder, opts in ((a, {"ablation": "full"}), (b, {"ablation": "base"}), (c, {"ablation": "base"})):
        _run_json(folder, "qwen0.5b", 50)
        info = json.loads((folder / "run.json").read_text())
        (folder / "run.json").write_text(json.dumps({**info, "agent_opt": opts}))
    tables, _ = report([a, b, c])
    hooks = sorted(t for t, _ in tables if t.startswith("Fake env: successes by kind"))
    assert hooks == ["Fake env: successes by kind [model qwen0.5b, transformers, max steps 50, ablation=base]",
                     "Fake env: successes by kind [model qwen0.5b, transformers, max steps 50, ablation=full]"]


def test_no_time_to_success_penalty_figure_when_nothing_succeeded(tmp_path):
    a = _write(tmp_path / "a", "fake", [("easy-0", False, 5, None), ("easy-1", False, 5, None)])
    _run_json(a, "smollm2", 5)
    row_text = dict(report([a])[0])["Time to success (failures count 100 steps)"]
    assert "n/a: no episode succeeded" in row_text and "100" not in row_text.splitlines()[-1]


def test_degenerate_self_awareness_is_said_in_words_and_not_plotted(tmp_path):
    folder = tmp_path / "m"
    for i in range(3):
        append_jsonl(folder / "episodes.jsonl", {"env": "fake", "agent": "muse", "task": f"easy-{i}", "episode": 0,
                                                 "success": False, "steps": 5, "competence": [0.503] * 5,
                                                 "msa_source": None})
    tables, plots = report([folder])
    aware = dict(tables)["Self-awareness (threshold 0.5)"]
    assert "| n/a |" in aware  # AUROC undefined
    assert "one outcome class: all 3 episodes failed" in aware and "M_sa untrained" in aware
    assert plots == [] and not (folder / "roc.png").exists()
