"""Malformed input and unusable folders end with ONE stderr line naming the problem (no
traceback), exit 2 for a command to fix (1 for a stopped run), and leave earlier data untouched.

Every case runs the real CLI in a subprocess, as a user meets it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from fault_helpers import ROOT, TINY_WM, can_mount_private_fs, cli, cli_on_small_fs, error_line, wm_set


def digest(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (the 'no earlier data changed' check)."""
    if root.is_file():
        return {root.name: hashlib.sha256(root.read_bytes()).hexdigest()}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _pretrain_error(tmp_path: Path, config: str, *sets: str, logdir: Path | None = None) -> tuple[str, Path]:
    logdir = logdir or tmp_path / "run"
    args = ["pretrain", "--config", config, "--logdir", str(logdir)]
    for s in sets:
        args += ["--set", s]
    proc = cli("muse-wm", *args, timeout=180)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    return error_line(proc.stderr, "muse-wm"), logdir


YAML_FILES = {
    "bad-flow-mapping": (b"name: x\nmodel: {size: nano, deter: 32\nenv: {num_envs: 1}\n", ["line 3, column"]),
    "tab-indent": (b"name: x\nmodel:\n\tsize: nano\n", ["line 3, column 1", "'\\t'"]),
    "section-not-mapping": (b"name: x\nmodel: 5\n", ["'model' is a section", "got 5"]),
    "binary": (bytes(range(256)) * 4, ["not a UTF-8 text file"]),
    "latin-1": ("name: café\n".encode("latin-1"), ["not a UTF-8 text file"]),
    "empty": (b"", ["is empty", "smoke"]),
    "only-comments": (b"# settings come later\n", ["is empty"]),
    "duplicate-key": (b"name: x\nmodel: {size: nano}\nmodel: {deter: 64}\n", ["'model' is given twice",
                                                                            "line 3, column 1"]),
    "folder": (None, ["is a folder"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(YAML_FILES))
def test_bad_config_file_is_named_with_line_and_column(tmp_path: Path, case: str) -> None:
    data, words = YAML_FILES[case]
    cfg = tmp_path / "cfg.yaml"
    if data is None:
        cfg.mkdir()
    else:
        cfg.write_bytes(data)
    err, logdir = _pretrain_error(tmp_path, str(cfg))
    assert str(cfg) in err, err
    for w in words:
        assert w in err, (w, err)
    assert data is None or cfg.read_bytes() == data
    assert not logdir.exists(), "work started on a bad config"


@pytest.mark.slow
@pytest.mark.parametrize(("override", "words"), [
    ("model.deter=[", ["--set model.deter=[", "not valid YAML", "line 1, column 2"]),
    ("env.tasks={a", ["--set env.tasks={a", "line 1, column"]),
    ("model=5", ["--set override", "'model' is a section"]),
])
def test_bad_set_value_names_the_override(tmp_path: Path, override: str, words: list[str]) -> None:
    err, logdir = _pretrain_error(tmp_path, "smoke", override)
    for w in words:
        assert w in err, (w, err)
    assert not logdir.exists()


@pytest.mark.slow
def test_bad_set_on_an_existing_run_changes_nothing(tmp_path: Path, pretrained_run: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(pretrained_run, run)
    before = digest(run)
    err, _ = _pretrain_error(tmp_path, "smoke", *TINY_WM, "model.deter=[", logdir=run)
    assert "model.deter" in err
    assert digest(run) == before


@pytest.mark.slow
@pytest.mark.parametrize("command", ["pretrain", "adapt"])
def test_logdir_that_is_a_file(tmp_path: Path, pretrained_run: Path, command: str) -> None:
    target = tmp_path / "results.txt"
    target.write_text("keep me\n")
    if command == "pretrain":
        args = ["pretrain", "--config", "smoke", *wm_set(), "--logdir", str(target)]
    else:
        args = ["adapt", "--checkpoint", str(pretrained_run), "--agent", "dreamer", "--episodes", "1",
                "--logdir", str(target)]
    proc = cli("muse-wm", *args, timeout=180)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = error_line(proc.stderr, "muse-wm")
    assert str(target) in err and "is an existing file" in err, err
    assert target.read_text() == "keep me\n"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["pretrain", "adapt"])
def test_logdir_on_read_only_file_system(tmp_path: Path, pretrained_run: Path, command: str) -> None:
    if not can_mount_private_fs():
        pytest.skip("no user+mount namespaces here (unshare -rm)")
    mount = tmp_path / "ro"
    logdir = mount / "run"
    if command == "pretrain":
        args = ["pretrain", "--config", "smoke", *wm_set(), "--logdir", str(logdir)]
    else:
        args = ["adapt", "--checkpoint", str(pretrained_run), "--agent", "dreamer", "--episodes", "1",
                "--logdir", str(logdir)]
    before = digest(pretrained_run)
    proc = cli_on_small_fs("ro", mount, tmp_path / "keep", "muse-wm", *args, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = error_line(proc.stderr, "muse-wm")
    assert "read-only file system" in err and str(logdir) in err, err
    assert digest(pretrained_run) == before


@pytest.mark.slow
@pytest.mark.parametrize("episodes", ["0", "99999999999999999999"])  # the second used to adapt "forever"
def test_adapt_episodes_zero_or_unbounded_is_refused(tmp_path: Path, pretrained_run: Path, episodes: str) -> None:
    out = tmp_path / "out"
    proc = cli("muse-wm", "adapt", "--checkpoint", str(pretrained_run), "--agent", "muse", "--episodes", episodes,
               "--logdir", str(out), timeout=180)
    assert proc.returncode == 2
    err = error_line(proc.stderr, "muse-wm")
    assert f"--episodes {episodes}" in err and "at least one" in err and "at most 100000" in err, err
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize(("override", "words"), [
    ("model.size=tiny", ["model.size='nano'", "'tiny'", "model.deter=32"]),
    ("model.unimix=0.5", ["model.unimix=0.01", "0.5"]),  # no parameter shape changes: caught all the same
])
def test_adapt_model_key_that_disagrees_with_checkpoint(tmp_path: Path, pretrained_run: Path, override: str,
                                                        words: list[str]) -> None:
    before = digest(pretrained_run)
    out = tmp_path / "out"
    proc = cli("muse-wm", "adapt", "--checkpoint", str(pretrained_run), "--agent", "dreamer", "--episodes", "1",
               "--set", override, "--logdir", str(out), timeout=180)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = error_line(proc.stderr, "muse-wm")
    assert "does not fit" in err and "drop the --set model" in err, err
    for w in words:
        assert w in err, (w, err)
    assert digest(pretrained_run) == before
    assert not out.exists() or not any(out.rglob("*"))


@pytest.mark.slow
def test_adapt_checkpoint_that_is_a_file(tmp_path: Path) -> None:
    ck = tmp_path / "model.ckpt"
    ck.write_bytes(b"\x00" * 64)
    proc = cli("muse-wm", "adapt", "--checkpoint", str(ck), "--agent", "muse", "--logdir", str(tmp_path / "o"))
    assert proc.returncode == 2
    err = error_line(proc.stderr, "muse-wm")
    assert str(ck) in err and "is a file" in err, err


@pytest.mark.slow
def test_compare_names_a_results_file_that_is_not_json(tmp_path: Path) -> None:
    run = tmp_path / "adapt"
    run.mkdir()
    (run / "results.json").write_text('{"agent": "muse", ')
    proc = cli("muse-wm", "compare", str(run))
    assert proc.returncode == 2
    err = error_line(proc.stderr, "muse-wm")
    assert str(run / "results.json") in err and "not valid JSON" in err, err
    assert (run / "results.json").read_text() == '{"agent": "muse", '


# --------------------------------------------------------------------------------------------------
# muse-llm


def _llm_error(*args: str) -> str:
    proc = cli("muse-llm", *args, timeout=180)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    return error_line(proc.stderr, "muse-llm")


@pytest.mark.slow
def test_llm_run_out_that_is_a_file(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_text("keep\n")
    err = _llm_error("run", "--env", "minecraft", "--agent", "react", "--model", "smollm2", "--tasks", "mine_log",
                     "--out", str(out), "--no-progress")
    assert str(out) in err and "is an existing file" in err, err
    assert out.read_text() == "keep\n"


@pytest.mark.slow
def test_llm_run_out_on_read_only_file_system(tmp_path: Path) -> None:
    if not can_mount_private_fs():
        pytest.skip("no user+mount namespaces here (unshare -rm)")
    out = tmp_path / "ro" / "run"
    proc = cli_on_small_fs("ro", tmp_path / "ro", tmp_path / "keep", "muse-llm", "run", "--env", "minecraft",
                           "--agent", "react", "--model", "smollm2", "--tasks", "mine_log", "--out", str(out),
                           "--no-progress", timeout=180)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = error_line(proc.stderr, "muse-llm")
    assert str(out) in err and "read-only file system" in err, err


@pytest.mark.slow
@pytest.mark.parametrize(("opt", "words"), [
    ("max_steps=abc", ["max_steps", "must be an integer", "abc"]),
    ("max_steps=0", ["max_steps", ">= 1"]),
    ("hazards=maybe", ["hazards", "true or false", "maybe"]),
])
def test_llm_env_options_are_typed(opt: str, words: list[str]) -> None:
    err = _llm_error("tasks", "--env", "minecraft", "--env-opt", opt)
    assert err.startswith("muse-llm tasks: error: --env-opt")
    for w in words:
        assert w in err, (w, err)


def test_env_option_values_are_converted() -> None:
    from llm_side.run_spec import check_options

    opts = check_options("env", "minecraft", {"hazards": False, "max_steps": 5})
    assert (opts.hazards, opts.max_steps) == (False, 5)
    assert check_options("env", "scienceworld", {"step_timeout_s": 3}).step_timeout_s == 3.0


@pytest.mark.slow
def test_llm_agent_on_env_it_does_not_run_on_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "o"
    err = _llm_error("run", "--env", "alfworld", "--agent", "deps", "--model", "smollm2", "--out", str(out),
                     "--no-progress")
    assert "'deps'" in err and "alfworld" in err and "react" in err, err
    assert not out.exists()


def test_readme_lists_every_supported_agent_env_pair() -> None:
    """An agent the registry lets run on an env is listed for it in the env table of the LLM agents' page."""
    from llm_side import registry

    rows = {}
    for line in (ROOT / "docs" / "llm" / "index.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 5 and cells[1].strip("`") in registry.ENVS:
            rows[cells[1].strip("`")] = cells[3]
    assert set(rows) == set(registry.ENVS)
    for env, agents_cell in rows.items():
        for agent in registry.AGENTS:
            listed = f"`{agent}`" in agents_cell
            assert listed == (env in registry.agent_envs(agent)), (env, agent, agents_cell)


@pytest.mark.slow
@pytest.mark.parametrize(("data", "words"), [
    (b"model: {env: x\n", ["not valid YAML", "line 2, column 1"]),
    (b"\xff\xfe\x00\x01", ["not UTF-8"]),
    (b"", ["is empty"]),
])
def test_llm_bad_config_file(tmp_path: Path, data: bytes, words: list[str]) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_bytes(data)
    err = _llm_error("run", "--config", str(cfg), "--out", str(tmp_path / "o"))
    assert str(cfg) in err
    for w in words:
        assert w in err, (w, err)


NOT_RECORDS = ["42", '{"foo": 1}', '"text"', "[1, 2]", '{"env": "minecraft", "task": "mine_log"}', "{broken",
               '{"env": "minecraft", "task": "t", "agent": "a", "episode": 9, "success": true, "steps": 1, '
               '"competence": "high"}']


def _records_with_junk(folder: Path) -> list[dict]:
    good = [{"env": "minecraft", "task": "mine_log", "agent": "scripted-test", "episode": e,
             "success": e == 1, "steps": 3 + e, "score": 0.0, "competence": [0.2, 0.9], "reason": None}
            for e in range(2)]
    lines = [json.dumps(good[0]), *NOT_RECORDS, json.dumps(good[1])]
    folder.mkdir(parents=True)
    (folder / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    return good


def _warnings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("muse-llm: warning:")]


@pytest.mark.slow
def test_report_refuses_the_first_non_record_line_by_its_number(tmp_path: Path) -> None:
    """A complete line that is not an episode record is never counted nor silently skipped: one line names the
    file, the line number (the first bad one), what is wrong and the fix; the file is left as it is."""
    run = tmp_path / "run"
    _records_with_junk(run)
    before = digest(run / "episodes.jsonl")
    proc = cli("muse-llm", "report", str(run), timeout=180)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = error_line(proc.stderr, "muse-llm report")
    assert f"{run / 'episodes.jsonl'} line 2 is a JSON int, not an episode record" in line, line
    assert "fix or delete that line" in line and not _warnings(proc.stderr), proc.stderr
    assert digest(run / "episodes.jsonl") == before


@pytest.mark.slow
def test_run_resume_refuses_non_record_lines_and_keeps_them(tmp_path: Path) -> None:
    """Resume neither redoes nor drops the episodes behind a malformed line: it stops before running anything."""
    out = tmp_path / "run"
    _records_with_junk(out)
    original = (out / "episodes.jsonl").read_text()
    proc = cli("muse-llm", "run", "--env", "minecraft", "--agent", "scripted-test", "--model",
               "smollm2", "--tasks", "mine_log", "--episodes", "3", "--max-steps", "3", "--out", str(out),
               "--no-progress", timeout=300, env={"PYTHONPATH": f"{Path(__file__).parent}:{ROOT}"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = error_line(proc.stderr, "muse-llm run")
    assert f"{out / 'episodes.jsonl'} line 2 " in line and "fix or delete that line" in line, line
    assert (out / "episodes.jsonl").read_text() == original
