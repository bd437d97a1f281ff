"""`muse-llm` run folders whose records or settings are wrong in ways that used to be kept without a
word: every record is checked against one schema when read (`records.record_problem`), counted once
per (task, episode), and reported only when the run asked for it; a resume must use the settings of
its run.json; bad client settings and odd server replies stop the run and record nothing.

Every case runs the real CLI in a subprocess, as a user meets it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from fault_helpers import ROOT, can_mount_private_fs, cli, cli_on_small_fs, error_line, jsonl_lines, no_traceback

HERE = Path(__file__).resolve().parent
SCRIPTED = {"PYTHONPATH": f"{HERE}:{ROOT}"}
AGENT = "scripted-test"


def _run(out: Path, *extra: str, env: dict[str, str] | None = None, model: str = "smollm2"):  # noqa: ANN202
    return cli("muse-llm", "run", "--env", "minecraft", "--agent", AGENT, "--model", model, "--tasks", "mine_log",
               "--episodes", "2", "--max-steps", "3", "--out", str(out), "--no-progress", *extra, timeout=300,
               env={**SCRIPTED, **(env or {})})


def _record(task: str, episode: int, success: bool, **kw: object) -> dict:
    return {"env": "minecraft", "task": task, "agent": AGENT, "episode": episode, "success": success,
            "steps": 3, "score": None, "competence": [0.8 if success else 0.2], "memory": {}, **kw}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("llm") / "run"
    proc = _run(out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("extra", "keys"), [
    (["--max-steps", "4"], ["max_steps: 3 there, 4 now"]),
    (["--seed", "3"], ["seed: 0 there, 3 now"]),
    (["--episodes", "3"], ["episodes: 2 there, 3 now"]),
    (["--env-opt", "hazards=true"], ["env_opt"]),
], ids=["max-steps", "seed", "episodes", "env-opt"])
def test_resume_with_other_settings_is_refused(finished_run: Path, extra: list[str], keys: list[str]) -> None:
    before = (finished_run / "episodes.jsonl").read_text()
    proc = _run(finished_run, *extra)  # a flag given twice: the last one counts
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = error_line(proc.stderr, "muse-llm run")
    assert "holds a run with other settings" in line and "different --out" in line, line
    for k in keys:
        assert k in line, (k, line)
    assert (finished_run / "episodes.jsonl").read_text() == before


@pytest.mark.slow
def test_resume_with_another_model_is_refused(finished_run: Path) -> None:
    proc = _run(finished_run, model="openai:http://127.0.0.1:9/v1:m")  # never contacted: refused first
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = error_line(proc.stderr, "muse-llm run")
    assert "model: 'smollm2' there, 'openai:http://127.0.0.1:9/v1:m' now" in line, line


@pytest.mark.slow
def test_out_of_another_agent_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"env": "minecraft", "agent": "deps", "model": "smollm2", "seed": 0,
                                              "episodes": 1, "max_steps": None, "tasks": ["mine_log"],
                                              "env_opt": {}, "agent_opt": {}}))
    proc = _run(out)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = error_line(proc.stderr, "muse-llm run")
    assert "agent: 'deps' there" in line, line
    assert not (out / "episodes.jsonl").exists()


@pytest.mark.slow
@pytest.mark.parametrize("junk", [b"not json", b"[1, 2]", b'{"argv": []}'], ids=["text", "list", "no-settings"])
def test_run_refuses_a_garbage_run_json(tmp_path: Path, junk: bytes) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_bytes(junk)
    proc = _run(out)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = error_line(proc.stderr, "muse-llm run")
    assert str(out / "run.json") in line and "delete it" in line, line
    assert (out / "run.json").read_bytes() == junk


@pytest.mark.slow
def test_duplicate_task_names_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = cli("muse-llm", "run", "--env", "minecraft", "--agent", AGENT, "--model", "smollm2", "--tasks",
               "mine_log,mine_log", "--out", str(out), timeout=300, env=SCRIPTED)
    assert proc.returncode == 2
    line = error_line(proc.stderr, "muse-llm run")
    assert "'mine_log' more than once" in line and "--episodes" in line, line
    assert not out.exists() or not any(out.iterdir())


def _report(folder: Path, *extra: str):  # noqa: ANN202
    return cli("muse-llm", "report", str(folder), *extra, timeout=180)


def _row(stdout: str, header: str) -> dict[str, str]:
    """The first table row under the table whose header has `header`, as {column: cell}."""
    lines = stdout.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.startswith("|") and header in ln)
    cols = [c.strip() for c in lines[i].strip("|").split("|")]
    cells = [c.strip() for c in lines[i + 2].strip("|").split("|")]
    return dict(zip(cols, cells, strict=True))


@pytest.mark.slow
def test_report_counts_each_valid_record_of_the_run_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"env": "minecraft", "agent": AGENT, "model": "smollm2", "seed": 0,
                                              "episodes": 2, "max_steps": 3, "tasks": ["mine_log", "mine_sand"],
                                              "env_opt": {}, "agent_opt": {}}))
    good = [_record("mine_log", 0, True), _record("mine_log", 1, False), _record("mine_sand", 0, False)]
    duplicate = json.dumps(_record("mine_log", 0, False))  # a second record of mine_log 0: the first counts
    outside = [_record("craft_planks", 0, True), _record("mine_log", 5, True)]  # not asked for by run.json
    nan = _record("mine_sand", 1, True, competence=[float("nan")])  # a record, but NaN is no prediction
    lines = [json.dumps(r) for r in good] + [duplicate] + [json.dumps(r) for r in outside] + [json.dumps(nan)]
    (run / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    before = (run / "episodes.jsonl").read_text()
    proc = _report(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    no_traceback(proc.stderr)
    warns = [ln for ln in proc.stderr.splitlines() if ln.startswith("muse-llm: warning:")]
    assert len(warns) == 2, warns  # one for the duplicate, one for the records outside the run
    assert "dropped 1 duplicate episode record(s) (line(s) 4; the first is kept)" in warns[0], warns[0]
    assert "2 record(s) of episodes outside the run" in warns[1], warns[1]
    row = _row(proc.stdout, "Success rate")
    assert row["Episodes"] == "4" and row["Success rate"] == "0.500", row  # 2 of 4: the run's own episodes
    sa = _row(proc.stdout, "Predictions")
    assert sa["Predictions"] == "3", sa  # the NaN competence is no prediction
    assert not math.isnan(float(sa["Accuracy"])) and sa["Accuracy"] == "1.000", sa
    assert (run / "episodes.jsonl").read_text() == before  # report reads, never rewrites


@pytest.mark.slow
@pytest.mark.parametrize(("bad", "words"), [
    ({"steps": -7}, "('steps' is -7, not an integer >= 0)"),
    ({"memory": 5}, "('memory' is 5, not a mapping)"),
    ({"memory": "abc"}, "('memory' is 'abc', not a mapping)"),
], ids=["negative-steps", "memory-int", "memory-text"])
def test_report_refuses_a_malformed_record_in_one_line(tmp_path: Path, bad: dict, words: str) -> None:
    """A wrong record is never counted: `report` stops, naming the file, the line and the fix."""
    run = tmp_path / "run"
    run.mkdir()
    lines = [_record("mine_log", 0, True), _record("mine_log", 1, False, **bad), _record("mine_sand", 0, False)]
    (run / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    before = (run / "episodes.jsonl").read_text()
    proc = _report(run)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = error_line(proc.stderr, "muse-llm report")
    assert f"{run / 'episodes.jsonl'} line 2 is not an episode record {words}" in line, line
    assert "fix or delete that line" in line, line
    assert (run / "episodes.jsonl").read_text() == before


@pytest.mark.slow
def test_report_warns_about_a_garbage_run_json(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{{{ not json")
    (run / "episodes.jsonl").write_text(json.dumps(_record("mine_log", 0, True)) + "\n")
    proc = _report(run)
    assert proc.returncode == 0, proc.stderr[-2000:]
    warns = [ln for ln in proc.stderr.splitlines() if ln.startswith("muse-llm: warning:")]
    assert len(warns) == 1 and str(run / "run.json") in warns[0] and "unknown" in warns[0], proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("threshold", ["nan", "5", "-1"])
def test_report_threshold_out_of_range(finished_run: Path, threshold: str) -> None:
    proc = _report(finished_run, "--threshold", threshold)
    assert proc.returncode == 2
    line = error_line(proc.stderr, "muse-llm report")
    assert f"--threshold {float(threshold)}" in line and "from 0 to 1" in line, line


@pytest.mark.slow
def test_resume_over_records_with_bad_memory_is_refused(tmp_path: Path) -> None:
    """A record whose memory is not a mapping is not silently skipped and its episode redone: the resume stops
    in one line before running anything, and the file is left as it is."""
    out = tmp_path / "run"
    first = _run(out)
    assert first.returncode == 0, first.stderr[-2000:]
    recs = jsonl_lines(out / "episodes.jsonl")
    lines = [json.dumps({**recs[0], "memory": 5}), json.dumps({**recs[1], "memory": "abc"})]
    (out / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    before = (out / "episodes.jsonl").read_text()
    proc = _run(out)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = error_line(proc.stderr, "muse-llm run")
    assert f"{out / 'episodes.jsonl'} line 1 " in line and "'memory' is 5" in line, line
    assert (out / "episodes.jsonl").read_text() == before


@pytest.mark.slow
@pytest.mark.skipif(not can_mount_private_fs(), reason="needs unprivileged user+mount namespaces (unshare -rm)")
def test_full_disk_during_run_names_the_file(tmp_path: Path) -> None:
    mount = tmp_path / "disk"
    proc = cli_on_small_fs("fill-full-after:run/episodes.jsonl", mount, tmp_path / "keep", "muse-llm", "run",
                           "--env", "minecraft", "--agent", AGENT, "--model", "smollm2", "--tasks", "mine_log",
                           "--episodes", "4", "--max-steps", "6", "--out", str(mount / "run"), "--no-progress",
                           timeout=300, env=SCRIPTED)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    line = error_line(proc.stderr, "muse-llm run")
    assert "No space left on device" in line and str(mount / "run") in line, line
    from llm_side.harness.records import load_records

    kept = load_records(tmp_path / "keep" / "run")  # the write that met the full disk may be torn: cut on resume
    assert len(kept) >= 1 and len({(r["task"], r["episode"]) for r in kept}) == len(kept)


@pytest.mark.slow
def test_agent_option_the_agent_cannot_use_is_named(tmp_path: Path) -> None:
    proc = cli("muse-llm", "run", "--env", "minecraft", "--agent", "reflexion", "--agent-opt", "max_reflections=abc",
               "--model", "smollm2", "--tasks", "mine_log", "--out", str(tmp_path / "run"), timeout=300)
    assert proc.returncode == 2
    line = error_line(proc.stderr, "muse-llm run")
    assert "max_reflections" in line and "abc" in line, line
