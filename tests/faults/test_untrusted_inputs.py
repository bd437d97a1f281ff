"""Issue 50, "trust nothing received": a run folder, settings file or record someone else sends can neither
write outside the folder it was given, run code, keep a malformed record in a count, nor end in a traceback.

One test (or parametrised group) per CLASS of failure, each over every writer/reader of that kind:
1. writes: links inside a run folder, names from input that would leave the folder;
2. code from settings: `module:factory` is refused, entry-point plugins work;
3. records: one reader per record kind (metrics.jsonl, adapt's episodes.jsonl, the LLM episodes.jsonl);
4. backend faults stop the run and record nothing;
5. bounds and clear lines (settings, YAML, environment variables).
The property-based fuzzing of the same readers is in test_fuzz_inputs.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_helpers import cli, error_line

from muse_common import files
from muse_common.run_lock import run_folder_lock

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
PLUGINS = {"PYTHONPATH": f"{HERE}:{ROOT}"}


# -- 1. files outside the run folder --------------------------------------------------------------------------
def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    return victim


LINKED = [".run.lock", "metrics.jsonl", "episodes.jsonl", "run.json", "checkpoints", "tb/events"]


@pytest.mark.parametrize("name", LINKED)
def test_run_folder_with_a_link_inside_is_refused_before_any_write(tmp_path: Path, name: str) -> None:
    """Whatever file of a received run folder is a link (lock, records, settings, a checkpoint folder), taking
    the folder refuses it in one line naming the link, and the file it points to is unchanged."""
    victim, run = _victim(tmp_path), tmp_path / "run"
    (run / name).parent.mkdir(parents=True, exist_ok=True)
    (run / name).symlink_to(victim)
    with pytest.raises(files.UnsafePath, match="symbolic link") as err, run_folder_lock(run):
        pass
    assert str(run / name) in str(err.value) and "\n" not in str(err.value)
    assert files.output_dir_problem(run) is not None
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("writer", ["append_jsonl", "atomic_write_json", "atomic_write_text"])
@pytest.mark.parametrize("linked", ["file", "folder"])
def test_every_writer_refuses_to_write_through_a_link(tmp_path: Path, writer: str, linked: str) -> None:
    victim = _victim(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if linked == "file":
        target = tmp_path / "out.jsonl"
        target.symlink_to(victim)
    else:
        (tmp_path / "linkdir").symlink_to(elsewhere)
        target = tmp_path / "linkdir" / "out.jsonl"
    write = {"append_jsonl": lambda: files.append_jsonl(target, {"a": 1}),
             "atomic_write_json": lambda: files.atomic_write_json(target, {"a": 1}),
             "atomic_write_text": lambda: files.atomic_write_text(target, "x")}[writer]
    with pytest.raises(files.UnsafePath, match="symbolic link"):
        write()
    assert victim.read_text() == "precious\n" and list(elsewhere.iterdir()) == []


def test_torn_tail_repair_never_truncates_through_a_link(tmp_path: Path) -> None:
    from llm_side.harness.records import repair_torn_tail

    victim = tmp_path / "victim.jsonl"
    victim.write_text('{"a": 1}\n{"b"')
    (tmp_path / "episodes.jsonl").symlink_to(victim)
    with pytest.raises(files.UnsafePath):
        repair_torn_tail(tmp_path / "episodes.jsonl")
    assert victim.read_text() == '{"a": 1}\n{"b"'


@pytest.mark.parametrize("name", ["", "..", "../../x", "a/b", ".hidden", "-rf", "x" * 200, "a\nb", "a\x00b", "../"])
def test_names_from_input_cannot_become_a_path_outside(name: str) -> None:
    assert files.name_problem(name, "--task") is not None
    with pytest.raises(ValueError):
        files.check_name(name)


@pytest.mark.parametrize("name", ["cartpole-swingup", "handle-press-v3", "InvertedPendulum-v5", "seed0", "size12m",
                                  "qwen2.5-0.5b", "mine_log"])
def test_ordinary_names_pass(name: str) -> None:
    assert files.name_problem(name) is None


def test_official_runner_refuses_a_task_that_leaves_runs_dir(tmp_path: Path) -> None:
    from benchmarks.official import run as official

    with pytest.raises(SystemExit, match="--task '../../../x' cannot be part of a path"):
        official.main(["--convert-only", "--task", "../../../x", "--runs-dir", str(tmp_path / "runs"),
                       "--out-dir", str(tmp_path / "out")])
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags, words", [
    (["--seeds", "-1"], "seeds=[-1] must be"),
    (["--train-ratio", "nan"], "train_ratio=nan must be"),
    (["--train-ratio", "1e9"], "train_ratio=1000000000.0 must be"),
    (["--env-steps", "99999999999999"], "env_steps_total=99999999999999 must be"),
])
def test_official_runner_bounds_its_budget(tmp_path: Path, flags: list[str], words: str) -> None:
    from benchmarks.official import run as official

    with pytest.raises(SystemExit, match=words.replace("[", r"\[").replace("]", r"\]")):
        official.main(["--convert-only", *flags, "--runs-dir", str(tmp_path / "runs"), "--out-dir", str(tmp_path)])


@pytest.mark.parametrize("content", ["[1, 2]", '{"batch": "x"}', '{"seeds": "0"}', '{"size": "../x"}',
                                     '{"train_ratio": 1e308}'])
def test_official_runner_names_a_malformed_budget_file(tmp_path: Path, content: str) -> None:
    from benchmarks.official import run as official

    path = tmp_path / "budget.json"
    path.write_text(content)
    with pytest.raises(SystemExit, match=f"--budget-json {path}: "):
        official.load_budget(path)


def test_empty_output_folder_is_refused() -> None:
    assert "empty" in (files.output_dir_problem("") or "")


@pytest.mark.slow
def test_muse_llm_refuses_a_linked_lock_and_leaves_its_target(tmp_path: Path) -> None:
    victim, run = _victim(tmp_path), tmp_path / "run"
    run.mkdir()
    (run / ".run.lock").symlink_to(victim)
    proc = cli("muse-llm", "run", "--env", "minecraft", "--agent", "scripted-test", "--model", "smollm2",
               "--tasks", "mine_log", "--max-steps", "2", "--out", str(run), "--no-progress", timeout=300,
               env=PLUGINS)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "symbolic link" in error_line(proc.stderr, "muse-llm")
    assert victim.read_text() == "precious\n"


@pytest.mark.slow
def test_muse_wm_refuses_a_linked_lock_and_an_empty_logdir(tmp_path: Path) -> None:
    victim, run = _victim(tmp_path), tmp_path / "run"
    run.mkdir()
    (run / ".run.lock").symlink_to(victim)
    proc = cli("muse-wm", "pretrain", "--config", "smoke", "--logdir", str(run), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "symbolic link" in error_line(proc.stderr, "muse-wm")
    assert victim.read_text() == "precious\n"
    proc = cli("muse-wm", "pretrain", "--config", "smoke", "--logdir", "", timeout=300)
    assert proc.returncode == 2 and "empty" in error_line(proc.stderr, "muse-wm")


# -- 2. code from settings -------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["flag", "config"])
@pytest.mark.parametrize("kind", ["env", "agent"])
def test_module_factory_from_flags_or_settings_never_runs(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                           where: str, kind: str) -> None:
    from llm_side.cli import main

    marker = tmp_path / "pwned"
    hostile = "subprocess:call"
    env, agent = ("minecraft", "react")
    env, agent = (hostile, agent) if kind == "env" else (env, hostile)
    if where == "flag":
        argv = ["run", "--env", env, "--agent", agent, "--env-opt", f"args=touch {marker}", "--env-opt", "shell=true"]
    else:
        cfg = tmp_path / "run.yaml"
        cfg.write_text(f"env: '{env}'\nagent: '{agent}'\nenv_opt: {{args: 'touch {marker}', shell: true}}\n")
        argv = ["run", "--config", str(cfg)]
    rc = main([*argv, "--model", "smollm2", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and not marker.exists()
    line = error_line(err, "muse-llm")
    assert f"{kind} '{hostile}' is not a registered {kind}" in line and f"muse_llm.{kind}s" in line


def test_entry_point_plugins_are_found_and_builtins_win() -> None:
    import sys

    from llm_side import registry

    sys.path.insert(0, str(HERE))
    try:
        assert "scripted-test" in registry.names("agent")
        assert registry.agent_factory("scripted-test").__module__ == "scripted_agents"
        assert registry.is_plugin("agent", "scripted-test") and not registry.is_plugin("agent", "react")
    finally:
        sys.path.remove(str(HERE))
    with pytest.raises(ValueError, match="entry-point group muse_llm.agents"):
        registry.agent_factory("os:system")
