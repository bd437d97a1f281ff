"""One RunSpec for every `muse-llm` command that runs agents: `run`, `sweep-tau`, `compare` and
`alfworld-pipeline` refuse the same bad option with the same line before a model or env starts, all honour
MUSE_LLM_MODEL (read when the spec is built), and `compare` names a damaged run.json in one line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llm_side import cli, compare, pipeline_alfworld, run_spec, sweep
from llm_side.backends import DEFAULT_MODEL

# (command, argv after the command) of each entry point, with the env alfworld and its agent
ENTRY_POINTS = {
    "run": ["--env", "alfworld", "--agent", "reflexion"],
    "sweep-tau": ["--env", "alfworld", "--tasks", "t"],
    "compare": ["--env", "alfworld", "--agents", "reflexion"],
    "alfworld-pipeline": ["--stage", "collect"],
}
AGENT_OF = {"run": "reflexion", "sweep-tau": "refrea", "compare": "reflexion", "alfworld-pipeline": "reflexion"}
TYPO = {"reflexion": ("reflect_on_sucess", "reflect_on_success"), "refrea": ("no_referenc", "no_reference")}


@pytest.fixture()
def nothing_starts(monkeypatch):
    """Fail the test if a model is loaded or an env is started."""
    monkeypatch.setattr("llm_side.backends.load_llm", lambda spec: pytest.fail(f"model {spec} loaded"))
    monkeypatch.setattr(run_spec, "make_env", lambda *a: pytest.fail("env started"))
    monkeypatch.setattr(run_spec, "execute", lambda *a, **k: pytest.fail("a run started"))


def _error(capsys, argv: list[str], command: str) -> str:
    """The one error line of `muse-llm ARGV`, without its `muse-llm COMMAND: error: ` prefix."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    prefix = f"muse-llm {command}: error: "
    assert len(err) == 1 and err[0].startswith(prefix), err
    return err[0][len(prefix):]


@pytest.mark.parametrize("command", list(ENTRY_POINTS))
def test_every_entry_point_refuses_a_misspelled_env_option_with_the_same_line(command, tmp_path, capsys,
                                                                              nothing_starts):
    argv = [command, *ENTRY_POINTS[command], "--env-opt", "shotz=1", "--out", str(tmp_path / "o")]
    line = _error(capsys, argv, command)
    assert line.startswith("--env-opt: unknown alfworld option 'shotz'. Did you mean 'shots'?"), line
    assert line == _error(capsys, ["run", *ENTRY_POINTS["run"], "--env-opt", "shotz=1", "--out", "x"], "run")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", list(ENTRY_POINTS))
def test_every_entry_point_refuses_a_misspelled_agent_option_as_run_does(command, tmp_path, capsys, nothing_starts):
    agent = AGENT_OF[command]
    typo, right = TYPO[agent]
    opt = f"{agent}:{typo}=true" if command == "compare" else f"{typo}=true"
    line = _error(capsys, [command, *ENTRY_POINTS[command], "--agent-opt", opt, "--out", str(tmp_path / "o")],
                  command)
    assert line.startswith(f"--agent-opt: unknown {agent} option '{typo}'. Did you mean '{right}'?"), line
    run = ["run", "--env", "alfworld", "--agent", agent, "--agent-opt", f"{typo}=true", "--out", "x"]
    assert line == _error(capsys, run, "run")


def _specs(command: str, *extra: str) -> list[run_spec.RunSpec]:
    """The RunSpec(s) each entry point's spec builder makes of a command line, without running anything."""
    argv = [*ENTRY_POINTS[command], "--out", "o", *extra]
    if command == "run":
        return [cli.run_spec_of(cli.build_parser().parse_args(["run", *argv]))]
    if command == "sweep-tau":
        return [sweep.spec_of(sweep.build_parser().parse_args(argv))]
    if command == "compare":
        return list(compare.agent_specs(compare.settings_of(compare.build_parser().parse_args(argv))).values())
    cfg = pipeline_alfworld.config_of(pipeline_alfworld.build_parser().parse_args(argv))
    return [cfg.spec("reflexion", cfg.train_split, 1), cfg.spec("muse", cfg.deploy_split, 1, msa="M")]


@pytest.mark.parametrize("command", list(ENTRY_POINTS))
def test_every_entry_point_honours_muse_llm_model(command, monkeypatch):
    monkeypatch.setenv("MUSE_LLM_MODEL", "gemma270m")  # set after every module was imported
    assert {s.model for s in _specs(command)} == {"gemma270m"}
    assert {s.model for s in _specs(command, "--model", "hf:/m")} == {"hf:/m"}  # a flag wins
    monkeypatch.delenv("MUSE_LLM_MODEL")
    assert {s.model for s in _specs(command)} == {DEFAULT_MODEL}


def test_serve_honours_muse_llm_model(monkeypatch, capsys):
    monkeypatch.setenv("MUSE_LLM_MODEL", "gguf:/no/such.gguf")
    assert cli.main(["serve", "--print-only"]) == 2
    assert "GGUF file /no/such.gguf not found" in capsys.readouterr().err


def test_settings_file_and_flags_merge_into_one_spec(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("env: alfworld\nagent: reflexion\ntasks: [a, b]\nseed: 3\nagent_opt: {max_reflections: 2}\n")
    (spec,) = _specs("run", "--config", str(cfg), "--seed", "4", "--agent-opt", "reflect_on_success=false")
    assert (spec.tasks, spec.seed, spec.episodes) == (("a", "b"), 4, 1)
    assert spec.agent_opt == {"max_reflections": 2, "reflect_on_success": False}
    assert spec.agent_options.max_reflections == 2 and spec.agent_options.reflect_on_success is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.agent_opt["max_reflections"] = 9  # type: ignore[index]
    assert list(spec.settings(["a", "b"])) == list(run_spec.RUN_JSON_KEYS)  # run.json's keys


@pytest.mark.parametrize("junk", [b"{{{ not json", b"[1, 2]", b'{"argv": []}'], ids=["text", "list", "no-settings"])
def test_compare_names_a_garbage_run_json_in_one_line(junk, tmp_path, capsys):
    out = tmp_path / "cmp"
    for agent in ("react", "reflexion"):
        (out / agent).mkdir(parents=True)
        (out / agent / "run.json").write_text(json.dumps({"env": "alfworld", "model": "m", "seed": 0}))
    (out / "reflexion" / "run.json").write_bytes(junk)
    line = _error(capsys, ["compare", "--agents", "react,reflexion", "--out", str(out), "--report-only"], "compare")
    assert str(Path(out / "reflexion" / "run.json")) in line and "delete it" in line, line


def test_a_split_given_replaces_the_commands_default_tasks():
    assert run_spec.build_spec({}, {"env": "alfworld", "agent": "refrea"}, sweep.SWEEP_DEFAULTS).tasks == ("8-2", "9-3")
    spec = run_spec.build_spec({}, {"env": "alfworld", "split": "s", "agent": "refrea"}, sweep.SWEEP_DEFAULTS)
    assert (spec.split, spec.tasks) == ("s", None)
