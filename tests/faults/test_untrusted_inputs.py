"""Trust nothing received: a run folder, settings file or record someone else sends can neither
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
    assert files.run_folder_link_problem(run) is not None
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


@pytest.mark.parametrize("task", ["../../../etc", "/etc", "valid_unseen/../../x", "", "."])
def test_alfworld_task_ids_cannot_leave_the_data_folder(task: str) -> None:
    from llm_side.envs.alfworld_data import game_file

    with pytest.raises(ValueError, match="no '..', not absolute"):
        game_file(task, data="/nonexistent")


def test_a_dmc_task_check_prints_no_glfw_warning_before_its_line(tmp_path: Path) -> None:
    """Without a display, importing dm_control to check a task name printed GLFW's two warning lines first."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM")}
    proc = subprocess.run([sys.executable, "-c", "from muse_jax.envs.dmc import check_task; check_task('x-y')"],
                          cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "is not a dm_control suite task" in proc.stderr
    assert "GLFW" not in proc.stderr, proc.stderr


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


def test_official_runner_refusals_are_one_line_and_write_nothing_outside(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """run.py: an empty --runs-dir/--out-dir (Path('') is the current folder), a budget file that is not UTF-8,
    a link inside a seed's run folder, a damaged done.json: `run.py: error: ...` (exit 2), no traceback."""
    from benchmarks.official import run as official

    runs, out = tmp_path / "runs", tmp_path / "out"
    common = ["--convert-only", "--seeds", "0"]
    budget = tmp_path / "budget.json"
    budget.write_bytes(b"\xff\xfe\x00garbage")
    seed_dir = runs / "dmc_cartpole-swingup" / "seed0"
    cases = [
        (["--runs-dir", "", "--out-dir", str(out)], "--runs-dir the output folder is empty"),
        (["--runs-dir", str(runs), "--out-dir", ""], "--out-dir the output folder is empty"),
        (["--budget-json", str(budget), "--runs-dir", str(runs), "--out-dir", str(out)], f"--budget-json {budget}"),
        (["--task", "../../../x", "--runs-dir", str(runs), "--out-dir", str(out)], "cannot be part of a path"),
    ]
    for argv, words in cases:
        assert official.cli([*common, *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("run.py: error: ") and words in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["budget.json"]  # nothing created, here or in the cwd
    seed_dir.mkdir(parents=True)
    victim = _victim(tmp_path)
    (seed_dir / "run.log").symlink_to(victim)
    assert official.cli([*common, "--runs-dir", str(runs), "--out-dir", str(out)]) == 2
    assert "symbolic link inside the run folder" in capsys.readouterr().err
    (seed_dir / "run.log").unlink()
    for damaged in (b"\xff", b"[1]", b'{"env_steps_total": "abc"}'):
        (seed_dir / "done.json").write_bytes(damaged)
        assert official.cli([*common, "--runs-dir", str(runs), "--out-dir", str(out)]) == 2
        err = capsys.readouterr().err
        assert "done.json is damaged" in err and "delete it and rerun" in err, err
    (seed_dir / "done.json").unlink()
    event = '{"env_steps": 10, "score": 1.5, "train_steps": 0, "wall_s": 1.0, "success": null}\n'
    for events, code in (('{"x": 1}\n', 2), ('{"env_steps": "abc", "score": 1}\n', 2), (event, 0)):
        (seed_dir / "events.jsonl").write_text(events)
        assert official.cli([*common, "--runs-dir", str(runs), "--out-dir", str(out)]) == code
        err = capsys.readouterr().err
        assert ("events.jsonl line 1 is not an official episode event" in err) == (code == 2), err
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("flags, words", [
    (["--out", ""], "--out is empty"), (["--runs", ""], "--runs is empty"),
    (["--train-ratio", "nan"], "--train-ratio nan"), (["--train-ratio", "1e9"], "--train-ratio 1000000000.0"),
    (["--seeds", "-1"], "--seeds -1"), (["--seeds", "0", "0"], "--seeds 0 0"),
    (["--task", "../../x"], "--task '../../x' cannot be part of a path"),
])
def test_learning_curve_flags_are_checked_before_any_path(flags: list[str], words: str,
                                                          capsys: pytest.CaptureFixture) -> None:
    """`--out ''` used to fall back to the repo's own docs/learning_curves file and replot it."""
    from benchmarks import learning_curve as lc

    with pytest.raises(SystemExit) as exit_:
        lc.parse_args(["--plot-only", *flags])
    assert exit_.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["-m", "llm_side.cli", "compare", "--out", ""], ["-m", "llm_side.cli", "alfworld-pipeline", "--out", ""],
    ["-m", "llm_side.cli", "sweep-tau", "--out", ""], ["-m", "muse_jax.cli", "compare", ".", "--out", ""],
    ["benchmarks/table1.py", "add", "--out", ""], ["benchmarks/regulation_effect.py", "--out", ""],
    ["benchmarks/random_policy_tasks.py", "--out", ""], ["benchmarks/wm_throughput.py", "--out", ""],
    ["benchmarks/regulation_scaling.py", "--out", ""], ["benchmarks/collect_overhead.py", "--out", ""],
    ["benchmarks/adapt_tasks.py", "--workdir", ""],
])
def test_an_empty_out_flag_is_refused_not_the_current_folder(tmp_path: Path, argv: list[str]) -> None:
    """`type=Path` made `--out ''` the current folder: `muse-llm compare/alfworld-pipeline/sweep-tau` ran their
    agents into wherever they were started. Every such flag is `arg_parser.path_arg` now."""
    import os
    import subprocess
    import sys

    script = [str(ROOT / argv[0]), *argv[1:]] if argv[0].endswith(".py") else argv
    proc = subprocess.run([sys.executable, *script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "argument --" in proc.stderr and "is empty ('')" in proc.stderr, proc.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


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


# -- 3. records: one reader per kind ---------------------------------------------------------------------------
def _kinds() -> dict:
    import dataclasses

    from benchmarks.learning_curve import line_key
    from muse_common import records

    return {"metrics": records.PRETRAIN_METRICS, "adapt": records.ADAPT_EPISODE,
            "curve": dataclasses.replace(records.CURVE_LINE, key=line_key)}


GOOD = {"metrics": [{"step": s, "env_steps": s, "loss": 0.5} for s in (50, 100, 150)],
        "adapt": [{"task": "reach-v3", "episode": e, "success": False, "score": 1.5, "signal": [0.1]}
                  for e in range(3)],
        "curve": [{"impl": "muse_jax", "agent": "dreamer", "seed": 0, "env_steps": s, "score": 3.0}
                  for s in (5000, 10000, 15000)]}
BAD = {"metrics": [{"step": "abc", "env_steps": 1}, {"step": 1.5, "env_steps": 1}, {"step": -1, "env_steps": 0},
                   {"env_steps": 3}, [1, 2]],
       "adapt": [{"task": "reach-v3", "episode": 3, "success": "yes"}, {"task": "", "episode": 3, "success": True},
                 {"task": "t", "episode": True, "success": True}, {"task": "t", "episode": 3, "success": True,
                                                                     "score": "NaN"}, "x"],
       "curve": [{"impl": "muse_jax", "env_steps": "5"}, {"env_steps": 5}, {"impl": "x", "env_steps": 5,
                                                                             "success_rate": 7}]}


def _write(path: Path, rows: list, tail: str = "") -> None:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


@pytest.mark.parametrize("kind", list(GOOD))
def test_record_failing_the_schema_stops_the_reader_naming_file_and_line(tmp_path: Path, kind: str) -> None:
    from muse_common.records import RecordError, read_records

    for i, bad in enumerate([*BAD[kind], "not json", "{\"a\": }"]):
        path = tmp_path / f"{kind}{i}.jsonl"
        if isinstance(bad, str) and bad in ("not json", "{\"a\": }"):
            _write(path, GOOD[kind][:2], tail=bad + "\n" + '{"a": 1}\n')
        else:
            _write(path, [*GOOD[kind][:2], bad])
        before = path.read_bytes()
        with pytest.raises(RecordError) as err:
            read_records(path, _kinds()[kind], resume=True)
        assert f"{path} line 3 " in str(err.value) and "\n" not in str(err.value)
        assert path.read_bytes() == before  # left as it is


@pytest.mark.parametrize("kind", list(GOOD))
def test_torn_tail_is_cut_on_resume_and_said(tmp_path: Path, kind: str) -> None:
    from muse_common.files import append_jsonl
    from muse_common.records import read_records

    path, said = tmp_path / "r.jsonl", []
    _write(path, GOOD[kind][:2], tail='{"step": 150, "env_st')
    assert read_records(path, _kinds()[kind]) == GOOD[kind][:2]  # a reader ignores it
    assert read_records(path, _kinds()[kind], resume=True, say=said.append) == GOOD[kind][:2]
    assert len(said) == 1 and "torn last line" in said[0]
    append_jsonl(path, GOOD[kind][2])
    assert read_records(path, _kinds()[kind]) == GOOD[kind]


@pytest.mark.parametrize("kind", list(GOOD))
def test_duplicates_are_dropped_and_said(tmp_path: Path, kind: str) -> None:
    from muse_common.records import read_records

    path, said = tmp_path / "r.jsonl", []
    _write(path, [GOOD[kind][0], GOOD[kind][1], GOOD[kind][1], GOOD[kind][2]])
    assert read_records(path, _kinds()[kind], say=said.append) == GOOD[kind]
    assert len(said) == 1 and "duplicate" in said[0] and "line(s) 3" in said[0]
    read_records(path, _kinds()[kind], resume=True, say=said.append)
    assert path.read_text().count("\n") == 3  # rewritten without it on resume


def test_metrics_rows_past_the_checkpoint_and_out_of_order(tmp_path: Path) -> None:
    from muse_common.records import RecordError
    from muse_jax.run_log import RunLogger, drop_metrics_after

    path = tmp_path / "metrics.jsonl"
    _write(path, [*GOOD["metrics"], {"step": 200, "env_steps": 200}], tail='{"step": 2')
    drop_metrics_after(path, 100)
    assert [r["step"] for r in map(__import__("json").loads, path.read_text().splitlines())] == [50, 100]
    _write(path, [GOOD["metrics"][1], GOOD["metrics"][0]])
    with pytest.raises(RecordError, match="line 2 has env_steps 50 after env_steps 100"):
        drop_metrics_after(path, 100)
    _write(path, GOOD["metrics"], tail='{"step": 2')  # adapt's logger: a new row never glues onto a half line
    logger = RunLogger(tmp_path, total=1, tensorboard=False)
    logger.write({"step": 200, "env_steps": 200})
    logger.close()
    assert path.read_text().splitlines()[-1] == '{"step": 200, "env_steps": 200}'


def test_adapt_counts_each_valid_record_once(tmp_path: Path) -> None:
    from muse_common.records import RecordError
    from muse_jax.loops.adapt import read_episodes

    path = tmp_path / "episodes.jsonl"
    rows = [{"task": "t", "episode": 0, "success": False}, {"task": "t", "episode": 1, "success": True}]
    _write(path, [rows[0], rows[1], rows[1]], tail='{"task": "t", "episode": 2, "succ')
    assert read_episodes(path, resume=True) == rows
    assert path.read_text().count("\n") == 2
    _write(path, [rows[0], {"task": "t", "episode": 1, "success": "yes", "score": float("nan")}])
    with pytest.raises(RecordError, match="line 2 is not an episode record"):
        read_episodes(path)


def test_learning_curve_out_a_folder_or_garbage_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from benchmarks import learning_curve as lc
    from muse_common.records import RecordError

    out = tmp_path / "curve.jsonl"
    _write(out, [*GOOD["curve"], GOOD["curve"][0]])
    assert lc.read_lines(out) == GOOD["curve"]
    assert "duplicate" in capsys.readouterr().err
    _write(out, [*GOOD["curve"], {"impl": "muse_jax", "env_steps": "abc"}])
    with pytest.raises(RecordError, match="line 4"):
        lc.append_new(out, [])


# -- 4. backend faults are never outcomes -----------------------------------------------------------------------
class _Reply:
    """Stub OpenAI-compatible handlers: a reply cut mid-body, a choice without text, a chat without content."""

    @staticmethod
    def handler(kind: str) -> type:
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = {"cut": b'{"choices": [{"text": "> mine',
                        "no-text": b'{"choices": [{"index": 0}, {"index": 1}]}',
                        "text-not-str": b'{"choices": [{"text": 5}]}',
                        "chat-no-content": b'{"choices": [{"message": {"role": "assistant"}}]}'}[kind]
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body) + (500 if kind == "cut" else 0)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *a: object) -> None:
                pass

        return Handler


@pytest.fixture
def stub(request: pytest.FixtureRequest):  # noqa: ANN201
    import http.server
    import threading

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Reply.handler(request.param))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("stub", ["cut", "no-text", "text-not-str", "chat-no-content"], indirect=True)
def test_transport_and_protocol_errors_stop_not_score(stub: str) -> None:
    from llm_side.backends.openai_compat import BackendUnavailable, OpenAICompatLLM
    from llm_side.harness.runner import is_fatal

    llm = OpenAICompatLLM(stub, "m", timeout=5, retries=1, backoff=0.01)
    with pytest.raises(BackendUnavailable) as err:
        llm.chat([{"role": "user", "content": "hi"}]) if "chat" in stub else llm.complete("hi")
    assert is_fatal(err.value) and "\n" not in str(err.value)


def test_transport_exceptions_from_any_backend_are_fatal() -> None:
    import http.client
    import urllib.error

    from llm_side.harness.runner import is_fatal

    for exc in (http.client.IncompleteRead(b"x", 10), http.client.RemoteDisconnected("closed"),
                urllib.error.URLError("refused"), ConnectionResetError()):
        assert is_fatal(exc), exc
    assert not is_fatal(ValueError("an unparsable action is the agent's failure"))


@pytest.mark.slow
@pytest.mark.parametrize("stub", ["cut", "no-text"], indirect=True)
def test_muse_llm_run_against_a_broken_server_records_nothing(stub: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = cli("muse-llm", "run", "--env", "minecraft", "--agent", "react", "--tasks", "mine_log", "--episodes", "2",
               "--max-steps", "3", "--model", f"openai:{stub}:m", "--out", str(out), "--no-progress", timeout=180,
               env={"MUSE_LLM_HTTP_RETRIES": "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = error_line(proc.stderr, "muse-llm")
    assert stub in line and "Nothing was recorded" in line and "the model may not" in line, line
    episodes = out / "episodes.jsonl"
    assert not episodes.exists() or episodes.read_text() == ""


def test_a_transport_error_of_any_backend_is_one_line_that_says_how_to_resume(
        capsys: pytest.CaptureFixture) -> None:
    """http.client errors are no OSError: from a backend other than the OpenAI client they ended in a traceback."""
    import http.client

    from llm_side.backends.openai_compat import BackendUnavailable
    from llm_side.run_spec import run_command

    def cut() -> int:
        raise http.client.IncompleteRead(b"x", 10)

    assert run_command("run", cut) == 2
    line = error_line(capsys.readouterr().err, "muse-llm")
    assert "IncompleteRead" in line and "rerun the same command to resume" in line, line

    def unavailable() -> int:
        raise BackendUnavailable("server at http://x/v1 failed; fix --model openai:URL:MODEL.")

    assert run_command("run", unavailable) == 2
    line = error_line(capsys.readouterr().err, "muse-llm")
    assert "URL may change on resume, the model may not" in line, line


@pytest.mark.parametrize(("var", "value"), [("MUSE_LLM_HTTP_RETRIES", "1e9"), ("MUSE_LLM_HTTP_RETRIES", "1000000000"),
                                            ("MUSE_LLM_HTTP_TIMEOUT", "1e12"), ("MUSE_LLM_HTTP_PARALLEL", "100000")])
def test_client_environment_variables_have_upper_bounds(monkeypatch: pytest.MonkeyPatch, var: str,
                                                        value: str) -> None:
    from llm_side.backends.openai_compat import OpenAICompatLLM

    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=f"{var}=.*and <= .*fix or unset it"):
        OpenAICompatLLM.from_spec("openai:http://127.0.0.1:1/v1:m")


def test_resume_may_change_the_endpoint_not_the_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import json

    from llm_side.run_spec import UsageError, check_resume

    run_file = tmp_path / "run.json"
    settings = {"env": "minecraft", "agent": "react", "model": "openai:http://old:8080/v1:qwen", "seed": 0,
                "episodes": 1, "max_steps": 3, "tasks": ["mine_log"], "env_opt": {}, "agent_opt": {}}
    run_file.write_text(json.dumps(settings))
    check_resume(run_file, {**settings, "model": "openai:http://new:9090/v1:qwen"})
    assert "new endpoint" in capsys.readouterr().err
    saved = json.loads(run_file.read_text())
    assert saved["model"] == "openai:http://new:9090/v1:qwen" and len(saved["endpoints"]) == 2
    for other in ("openai:http://new:9090/v1:llama", "smollm2"):
        with pytest.raises(UsageError, match="other settings"):
            check_resume(run_file, {**settings, "model": other})


# -- 5. bounded work and clear lines ----------------------------------------------------------------------------
BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9 if p else ['lol'] * 9)}]\n"
               for p, c in zip(["", *"abcdefgh"], "abcdefghi", strict=True))
DEEP = "a: " + "[" * 5000 + "]" * 5000 + "\n"


@pytest.mark.parametrize("text, words", [(BOMB, "alias"), (DEEP, "nesting deeper"),
                                         ("a: " + "x" * (2 << 20) + "\n", "longer than")])
def test_every_settings_reader_bounds_yaml(tmp_path: Path, text: str, words: str) -> None:
    """Every reader of settings text (muse-wm --config, muse-llm --config, --set / --env-opt values) refuses
    an alias bomb, deep nesting and a huge text in one line, quickly."""
    import time

    from llm_side.run_settings import SettingsError as RunSettingsError
    from llm_side.run_settings import load_settings
    from muse_common.overrides import OverrideError, parse_key_values
    from muse_common.settings import SettingsError, read_yaml_mapping

    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    t0 = time.monotonic()
    for read, error in ((lambda: read_yaml_mapping(path), SettingsError),
                        (lambda: load_settings(str(path), ("a", "b")), RunSettingsError),
                        (lambda: parse_key_values([f"x={_flow(text)}"], "--set", structured=True),
                         OverrideError)):
        with pytest.raises(error, match=words) as err:
            read()
        assert "\n" not in str(err.value)
    assert time.monotonic() - t0 < 10
    assert parse_key_values([f"x={DEEP[3:]}"], "--env-opt", structured=False)["x"] == DEEP[3:]  # stays text


def _flow(text: str) -> str:
    """The same YAML as one flow mapping (a --set value)."""
    return text.partition(": ")[2].strip() if text.startswith("a: ") and "\nb:" not in text else (
        "{" + ", ".join(line.strip() for line in text.strip().splitlines()) + "}")


def test_aliases_in_ordinary_use_still_load(tmp_path: Path) -> None:
    from muse_common.settings import read_yaml_mapping

    path = tmp_path / "cfg.yaml"
    path.write_text("model: &m {deter: 64}\nother: *m\n")
    assert read_yaml_mapping(path)["other"] == {"deter": 64}


@pytest.mark.parametrize("override, words", [
    ("model.deter=1e12", "'model.deter' = 1000000000000 is out of range; allowed: at most 16384"),
    ("regulation.horizon=1e9", "'regulation.horizon' = 1000000000 is out of range; allowed: at most 1000"),
    ("train.env_steps=99999999999999999999", "at most 1e+10"),
    ("adapt.episodes=1e7", "at most 100000"),
    ("replay.capacity=1e12", "at most 1e+08"),
    ("model.size.x=1", "'model.size' is a value, not a section"),
    ("env.tasks=[reach-v3,reach-v3]", "each task once"),
])
def test_every_numeric_setting_is_bounded_with_a_reason(override: str, words: str) -> None:
    from muse_jax.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace("+", r"\+")) as err:
        load_config("smoke", [override])
    assert "\n" not in str(err.value)


def test_no_numeric_field_is_unbounded() -> None:
    """The class, not the examples: every int/float field of the run config has an upper bound (its own, with
    a reason, or the generic one), so a value past it is refused."""
    import dataclasses

    from muse_jax.config import ConfigError, load_config
    from muse_jax.config.schema import Config

    def numeric(cls: type, prefix: str = ""):  # noqa: ANN202
        import typing

        for f in dataclasses.fields(cls):
            tp = typing.get_type_hints(cls)[f.name]
            if dataclasses.is_dataclass(tp):
                yield from numeric(tp, f"{prefix}{f.name}.")
            elif tp in (int, float):
                yield f"{prefix}{f.name}", tp

    fields = list(numeric(Config))
    assert len(fields) > 40
    for key, tp in fields:
        huge = 10**20 if tp is int else 1e39  # past every bound, its own (with a reason) or the generic one
        with pytest.raises(ConfigError, match="out of range|must be"):
            load_config("smoke", [f"{key}={huge}"])


@pytest.mark.parametrize("argv, words", [
    (["--episodes", "99999999999999999999"], "'episodes' must be at most 10000"),
    (["--max-steps", "10000000"], "'max_steps' must be at most 100000"),
    (["--seed", "99999999999"], "'seed' must be at most"),
    (["--config", ""], "--config is empty"),
])
def test_muse_llm_run_settings_are_bounded(tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str],
                                           words: str) -> None:
    from llm_side.cli import main

    rc = main(["run", "--env", "minecraft", "--agent", "react", "--model", "smollm2", "--out", str(tmp_path / "o"),
               *argv])
    assert rc == 2 and words in error_line(capsys.readouterr().err, "muse-llm")


@pytest.mark.parametrize("content", [b"\xff\xfe garbage", b'{"files": []}', b'{"files": {}}', b"[1]",
                                     b'{"files": {"../../etc/passwd": {"size": 1, "crc32": 1}}}',
                                     b'{"files": {"a": {"size": "x", "crc32": 1}}}'])
def test_damaged_checkpoint_record_is_named(tmp_path: Path, content: bytes) -> None:
    from muse_jax.checkpoint import INTEGRITY_FILE, verify_integrity
    from muse_jax.errors import CheckpointCorruptError

    step = tmp_path / "checkpoints" / "100"
    step.mkdir(parents=True)
    (step / INTEGRITY_FILE).write_bytes(content)
    with pytest.raises(CheckpointCorruptError, match=f"{step / INTEGRITY_FILE} is damaged") as err:
        verify_integrity(step)
    assert "delete" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("swapped", ["checkpoints", "an entry inside"])
def test_a_link_made_in_the_run_folder_mid_run_stops_the_next_checkpoint(tmp_path: Path, swapped: str) -> None:
    """The lock refuses links when a run starts; a link made while it runs (the checkpoints folder swapped for a
    link to elsewhere: orbax wrote the next steps there) is refused by the next save, which writes nothing."""
    from flax import nnx

    from muse_jax.checkpoint import Checkpointer

    state = nnx.state(nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
    folder, elsewhere = tmp_path / "run" / "checkpoints", tmp_path / "elsewhere"
    elsewhere.mkdir()
    with Checkpointer(folder, keep=3) as ckpt:
        ckpt.save(1, state)
        if swapped == "checkpoints":
            folder.rename(tmp_path / "run" / "moved")
            folder.symlink_to(elsewhere, target_is_directory=True)
        else:
            (folder / "2").symlink_to(elsewhere, target_is_directory=True)
        with pytest.raises(files.UnsafePath, match="checkpoint step 2 not written: .*symbolic link") as err:
            ckpt.save(2, state)
    assert "\n" not in str(err.value)
    assert list(elsewhere.iterdir()) == []


def test_checkpoints_a_file_is_one_line(tmp_path: Path) -> None:
    from muse_jax.checkpoint import Checkpointer
    from muse_jax.errors import CheckpointError

    (tmp_path / "checkpoints").write_text("not a folder")
    with pytest.raises(CheckpointError, match="is a file, not a checkpoint folder"):
        Checkpointer(tmp_path / "checkpoints")


@pytest.mark.parametrize("novel, words", [([], "no novel tasks"), (["a", "a"], "named twice"),
                                          (["reach-v3"], "pre-training tasks")])
def test_adapt_refuses_task_lists_that_measure_nothing(novel: list[str], words: str) -> None:
    from muse_jax.loops.adapt import task_list_problem

    assert words in (task_list_problem(novel, ["reach-v3", "push-v3"]) or "")
    assert task_list_problem(["coffee-button-v3"], ["reach-v3"]) is None


def test_a_full_disk_under_tensorboard_names_the_folder_and_leaves_no_writer(tmp_path: Path) -> None:
    import errno

    from muse_jax.run_log import RunLogger

    class FullDisk:
        all_writers: dict = {}

        def add_scalar(self, *a: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    logger = RunLogger(tmp_path, total=1, tensorboard=False)
    logger._tb = FullDisk()
    with pytest.raises(OSError) as err:
        logger.write({"step": 1, "loss": 0.5})
    assert err.value.filename == str(tmp_path / "tb") and logger._tb is None
    logger.close()


@pytest.mark.timeout(120)
def test_a_full_disk_in_tensorboards_writer_thread_stops_in_one_line_without_a_hang(
        tmp_path: Path, capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """tensorboardX writes its events in a thread: on a full disk that thread died with a traceback, and its
    queue (10 events) then filled up, so a later `add_scalar` waited forever. Now the next `write` raises the
    thread's error named after the folder, and nothing is printed."""
    import errno
    import os
    import time

    import tensorboardX.record_writer as record_writer

    from muse_jax.run_log import RunLogger

    logger = RunLogger(tmp_path, total=1)

    def full(self: object, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(record_writer.RecordWriter, "write", full)
    with pytest.raises(OSError) as err:
        for step in range(1000):  # the thread dies on its first event; a later write() raises its error
            logger.write({"step": step, "loss": 0.5})
            time.sleep(0.01)
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(tmp_path / "tb"), err.value
    logger.close()
    assert "Traceback" not in capfd.readouterr().err


def test_learning_curve_cleans_its_file_when_a_command_starts(tmp_path: Path) -> None:
    from benchmarks import learning_curve as lc

    out = tmp_path / "curve.jsonl"
    _write(out, [*GOOD["curve"], GOOD["curve"][1]], tail='{"impl": "muse_jax", "env_st')
    assert lc.ensure_random_line(out, 0, lambda n: {}) == 0
    assert [__import__("json").loads(x) for x in out.read_text().splitlines()] == GOOD["curve"]
