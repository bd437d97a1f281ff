"""`muse-llm` run / tasks / report with the fake env (a registered muse_llm.envs plugin), errors, and resume after
a real kill -9 of a running `muse-llm run`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from llm_side.cli import UsageError, main, parse_options  # noqa: E402
from muse_common.files import read_jsonl  # noqa: E402

ENV, AGENT = "fake-env", "fake-agent"


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


def test_tasks_lists_ids_and_does_not_import_torch():
    code = (
        "import sys; from llm_side.cli import main; rc = main(['tasks', '--env', 'fake-env', "
        "'--env-opt', 'n_tasks=2', '--env-opt', 'kinds=easy+bad']); "
        "assert 'torch' not in sys.modules, 'tasks imported torch'; sys.exit(rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["easy-0", "easy-1", "bad-0", "bad-1"]


def test_run_then_report(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        [
            "run",
            "--env",
            ENV,
            "--agent",
            AGENT,
            "--env-opt",
            "n_tasks=3",
            "--limit",
            "2",
            "--episodes",
            "2",
            "--max-steps",
            "3",
            "--seed",
            "1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    rows = list(read_jsonl(out / "episodes.jsonl"))
    assert [(r["task"], r["episode"], r["steps"]) for r in rows] == [
        ("easy-0", 0, 3),
        ("easy-0", 1, 1),
        ("easy-1", 0, 3),
        ("easy-1", 1, 1),
    ]
    assert rows[0]["env"] == ENV and rows[0]["seed"] == 1000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["success_rate"] == 0.5 and summary["complete"] is True
    run = json.loads((out / "run.json").read_text())
    assert run["tasks"] == ["easy-0", "easy-1"] and run["max_steps"] == 3
    assert "2/4 episodes succeeded" in capsys.readouterr().out
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "## Success rate" in text and "| run |" in text and "0.500" in text
    assert (out / "roc.png").exists()


def test_a_run_through_a_recorded_local_server_names_it_in_every_episode(tmp_path, monkeypatch):
    """`muse-llm run` asks `served_by` about its model before the agent is built, and every line of the run
    carries the answer (the real server end to end: test_openai_backend's transformers-serve test)."""
    from llm_side.backends import served as records

    asked = []
    served = {"engine": "llama.cpp", "model": "qwen1.5b", "threads": 2, "n_ctx": 12288, "device": "cpu"}
    monkeypatch.setattr(records, "served_by", lambda model: asked.append(model) or served)
    out = tmp_path / "run"
    assert main(["run", "--env", ENV, "--agent", AGENT, "--episodes", "1", "--limit", "2", "--out", str(out),
                 "--no-progress"]) == 0
    rows = list(read_jsonl(out / "episodes.jsonl"))
    assert asked == [json.loads((out / "run.json").read_text())["model"]]
    assert len(rows) == 2 and all(r["server"] == served for r in rows)


def test_run_explicit_tasks_and_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"env: '{ENV}'\nagent: '{AGENT}'\nepisodes: 1\nenv_opt: {{kinds: easy+bad}}\n")
    out = tmp_path / "run"
    assert main(["run", "--config", str(cfg), "--tasks", "bad-1,easy-2", "--out", str(out), "--no-progress"]) == 0
    rows = list(read_jsonl(out / "episodes.jsonl"))
    assert [r["task"] for r in rows] == ["bad-1", "easy-2"]
    assert "agent error" in rows[0]["reason"] and rows[1]["steps"] == 5  # env default_max_steps


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["run", "--env", "nosuch", "--agent", "react", "--out", "X"],
            "unknown env 'nosuch'; choose one of: alfworld",
        ),
        (["run", "--env", ENV, "--agent", "nosuch", "--out", "X"], "unknown agent 'nosuch'; choose one of:"),
        (
            ["run", "--env", ENV, "--agent", AGENT, "--tasks", "zzz", "--out", "X"],
            "unknown task id(s) ['zzz']",
        ),
        (
            ["run", "--env", ENV, "--agent", AGENT, "--env-opt", "oops", "--out", "X"],
            "--env-opt expects key=value",
        ),
        (
            ["run", "--env", ENV, "--agent", AGENT, "--agent-opt", "refuse=true", "--out", "X"],
            "makes no sense",
        ),
        (
            ["run", "--env", ENV, "--agent", AGENT, "--env-opt", "colour=red", "--out", "X"],
            "rejected --env-opt",
        ),
        (["tasks", "--env", ENV, "--split", "nosuch"], "unknown split 'nosuch'"),
        (["report", "nosuch-dir"], "has no episodes.jsonl"),
        (["run", "--env", ENV, "--agent", AGENT, "--model", "nosuch", "--out", "X"], "unknown model spec 'nosuch'"),
        (["run", "--env", ENV, "--agent", AGENT, "--model", "gguf:/no/m.gguf", "--out", "X"], "/no/m.gguf not found"),
        (["run", "--env", ENV, "--agent", AGENT, "--episodes", "0", "--out", "X"], "'episodes' must be >= 1, got 0"),
        (["run", "--env", ENV, "--agent", AGENT, "--max-steps", "-3", "--out", "X"], "'max_steps' must be >= 1"),
        (["run", "--config", "cfg_badkey.yaml", "--out", "X"], "unknown key(s) ['episdes']; allowed: env"),
        (["run", "--config", "cfg_badtype.yaml", "--out", "X"], "'episodes' must be an integer >= 1, got 'many'"),
        (["run", "--config", "cfg_nofile.yaml", "--out", "X"], "config file cfg_nofile.yaml not found"),
    ],
)
def test_errors_are_one_clear_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg_badkey.yaml").write_text("env: a\nagent: b\nepisdes: 3\n")
    (tmp_path / "cfg_badtype.yaml").write_text(f"env: '{ENV}'\nagent: '{AGENT}'\nepisodes: many\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_kill_mid_run_then_resume_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "llm_side.cli",
        "run",
        "--env",
        ENV,
        "--agent",
        AGENT,
        "--env-opt",
        "n_tasks=3",
        "--env-opt",
        "sleep=0.15",  # slow enough to be killed mid-run; a resume must give the same options
        "--episodes",
        "2",
        "--max-steps",
        "3",
        "--out",
        str(out),
        "--no-progress",
    ]
    proc = subprocess.Popen(
        cmd,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(read_jsonl(out / "episodes.jsonl"))) < 2:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "run made no progress"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    n_before = len(list(read_jsonl(out / "episodes.jsonl")))
    assert 2 <= n_before < 6
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = list(read_jsonl(out / "episodes.jsonl"))
    pairs = [(r["task"], r["episode"]) for r in rows]
    assert sorted(pairs) == [(f"easy-{i}", e) for i in range(3) for e in range(2)]
    # Second episodes always win: the failure of the first was remembered, even across the kill.
    assert all(r["success"] for r in rows if r["episode"] == 1)
    assert json.loads((out / "summary.json").read_text())["episodes"] == 6


@pytest.mark.slow
def test_run_real_react_agent_with_real_smollm2(tmp_path, capsys):
    """The product path end to end: CLI -> registry agent -> lazily loaded real model -> runner."""
    out = tmp_path / "run"
    argv = [
        "run",
        "--env",
        ENV,
        "--agent",
        "react",
        "--model",
        "smollm2",
        "--env-opt",
        "n_tasks=1",
        "--max-steps",
        "2",
        "--agent-opt",
        "max_tokens=12",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    (row,) = list(read_jsonl(out / "episodes.jsonl"))
    assert row["agent"] == "react" and row["task"] == "easy-0" and row["reason"] is None
    assert 1 <= row["steps"] <= 2 and all(isinstance(a, str) and a.strip() for a in row["actions"])
    assert len(row["observations"]) == row["steps"]
    assert json.loads((out / "run.json").read_text())["model"] == "smollm2"


@given(st.lists(st.text(max_size=30), max_size=5))
def test_option_parsing_never_crashes_on_garbage(pairs):
    try:
        opts = parse_options(pairs, "--env-opt")
    except UsageError as exc:
        assert "--env-opt expects key=value" in str(exc)
    else:
        assert all(isinstance(v, (bool, int, float, str)) or v is None for v in opts.values())


def test_option_values_are_typed():
    assert parse_options(["a=true", "b=3", "c=0.5", "d=/x/y", "e=[", "f=", "g={x: 1}"], "f") == {
        "a": True,
        "b": 3,
        "c": 0.5,
        "d": "/x/y",
        "e": "[",
        "f": "",
        "g": "{x: 1}",
    }


def test_select_tasks_uses_the_envs_aliases():
    from llm_side.run_spec import UsageError, select_tasks

    class AliasEnv:
        name = "alias"

        def task_ids(self, split=None):
            return ["4-1/var0", "4-1/var1"]

        def expand_task_ids(self, ids):
            if any(i == "nope" for i in ids):
                raise ValueError("unknown task 'nope'; see `muse-llm tasks --env alias`")
            return [f"{i}/var0" if "/" not in i else i for i in ids]

    assert select_tasks(AliasEnv(), None, "4-1,4-1/var1", None) == ["4-1/var0", "4-1/var1"]
    with pytest.raises(UsageError, match="unknown task 'nope'"):
        select_tasks(AliasEnv(), None, "nope", None)


def test_tasks_piped_into_head_exits_quietly():
    import subprocess

    out = subprocess.run(
        f"{sys.executable} -m llm_side.cli tasks --env minecraft | head -n 2",
        shell=True, capture_output=True, text=True, timeout=120,
    )
    assert len(out.stdout.splitlines()) == 2
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr


# -- one command starts the llama.cpp server -------------------------------------------
def test_serve_command_uses_the_packaged_gguf_an_adequate_context_and_all_cores(capsys):
    from llm_side import serve
    from llm_side.agents.react import ReActAgent
    from llm_side.backends import models

    assert main(["serve", "--model", "smollm2", "--engine", "llama.cpp", "--print-only", "--port", "8099",
                 "--threads", "2"]) == 0
    cmd = capsys.readouterr().out.split()
    gguf = models.locate_gguf(models.MODELS["smollm2"])
    assert cmd[1:3] == ["-m", "llama_cpp.server"] and cmd[cmd.index("--model") + 1] == str(gguf)
    assert cmd[cmd.index("--n_ctx") + 1] == str(serve.N_CTX) and cmd[cmd.index("--n_threads") + 1] == "2"
    assert cmd[cmd.index("--model_alias") + 1] == "smollm2" and cmd[cmd.index("--port") + 1] == "8099"
    # the agents' prompt budget (4 chars/token estimate) at the measured 2.7 characters a token fits n_ctx
    budget_chars = 4 * ReActAgent(None).context_tokens
    assert serve.N_CTX >= budget_chars / 2.7 + ReActAgent(None).max_tokens > 2048


def test_serve_with_transformers_names_the_model_by_its_alias_and_samples_at_a_temperature(capsys):
    """`--engine transformers`: the server runs in a folder holding the unpacked model under its alias (the name
    a pinned `transformers serve` answers to), and that copy's generation config samples, so a temperature
    above 0 is not silently greedy."""
    from llm_side.backends import local, models

    assert main(["serve", "--model", "smollm2", "--engine", "transformers", "--print-only", "--port", "8099"]) == 0
    cd, cmd = capsys.readouterr().out.strip().split(" && ")
    folder = Path(cd.removeprefix("cd "))
    argv = cmd.split()
    assert argv[1:5] == ["-m", "transformers.cli.transformers", "serve", "smollm2"]
    assert argv[argv.index("--port") + 1] == "8099" and argv[argv.index("--host") + 1] == "127.0.0.1"
    unpacked = local.unpacked_packaged(models.MODELS["smollm2"])
    assert (folder / "smollm2" / "config.json").resolve() == (unpacked / "config.json").resolve()
    generation = json.loads((folder / "smollm2" / "generation_config.json").read_text())
    assert generation["do_sample"] is True and generation["top_k"] == 0 and generation["top_p"] == 1.0
    assert "do_sample" not in json.loads((unpacked / "generation_config.json").read_text())  # the cache is untouched


def test_serve_a_folder_with_a_damaged_generation_config_is_one_line(tmp_path, monkeypatch, capsys):
    """`hf:DIR` comes from someone else: a generation config that is not a JSON object is named, not a traceback,
    and nothing is left in the served cache."""
    monkeypatch.setenv("MUSE_LLM_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "actor"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "generation_config.json").write_text("[1, 2]")
    assert main(["serve", "--engine", "transformers", "--model", f"hf:{folder}", "--print-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "generation_config.json is not a generation config (a JSON list, not an object)" in err[0]
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_symlink()]
    (folder / "config.json").write_text("{not json")
    assert main(["serve", "--engine", "transformers", "--model", f"hf:{folder}", "--print-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config.json is not a transformers model config (" in err[0]


def test_serve_engine_auto_takes_llama_cpp_where_built_else_transformers(monkeypatch):
    import importlib.util

    from llm_side import serve

    real = importlib.util.find_spec
    for installed, expected in ((set(), "transformers"), ({"llama_cpp"}, "llama.cpp")):
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a, installed=installed: object() if name in installed else real(name, *a)
                            if name != "llama_cpp" else None)
        assert serve.resolve_engine("auto") == expected
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("llama_cpp", "uvicorn")
                        else real(name, *a))
    with pytest.raises(RuntimeError, match="transformers serve needs uvicorn"):
        serve.resolve_engine("auto")
    with pytest.raises(RuntimeError, match="llama-cpp-python is not installed.*--engine transformers"):
        serve.resolve_engine("llama.cpp")
    assert serve.resolve_engine("llama.cpp", check_installed=False) == "llama.cpp"
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert serve.resolve_engine("auto", model="hf:/some/trained/actor") == "transformers"  # llama.cpp serves GGUF
    with pytest.raises(ValueError, match="cannot serve a model named 'a:b'"):
        serve.served_folder(Path("/nonexistent"), "a:b")


def test_serve_leaves_what_it_serves_for_the_runs_through_it_and_a_run_trusts_only_a_live_matching_record(
        tmp_path, monkeypatch, capsys):
    """A run folder is resumed across sessions, and a step's seconds depend on the server: `muse-llm serve`
    records its engine and threads under its port, and `served_by` returns them for a run through that port,
    but not for a dead server, another model, another host or a malformed file."""

    from llm_side import serve
    from llm_side.backends import served

    monkeypatch.setenv("MUSE_LLM_CACHE", str(tmp_path))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    started = []
    monkeypatch.setattr(serve, "resolve_engine", lambda engine, **kw: "llama.cpp")
    monkeypatch.setattr(os, "execve", lambda *a: started.append(a))
    assert main(["serve", "--model", f"gguf:{gguf}", "--port", "8123", "--threads", "3"]) == 0
    assert started and "llama_cpp.server" in started[0][1]
    spec = "openai:http://127.0.0.1:8123/v1:tiny"
    assert served.served_by(spec) == {"engine": "llama.cpp", "model": f"gguf:{gguf}", "threads": 3,
                                      "n_ctx": serve.N_CTX, "device": "cpu"}
    assert served.served_by("openai:http://localhost:8123/v1:tiny") == served.served_by(spec)
    for other in ("openai:http://127.0.0.1:8123/v1:other", "openai:http://10.0.0.9:8123/v1:tiny",
                  "openai:http://127.0.0.1:8124/v1:tiny", "openai:http://127.0.0.1:99999/v1:tiny", "smollm2"):
        assert served.served_by(other) is None, other
    record = served.serving_file("127.0.0.1", 8123)
    good = json.loads(record.read_text())
    assert good["pid"] == os.getpid()
    for bad in ({**good, "pid": 2**40}, {**good, "engine": "rm -rf /"}, {**good, "threads": "2; x"},
                {**good, "threads": True}, {**good, "model": ""}, {**good, "device": "tpu; x"},
                {**good, "device": ["cpu"]}, [good], "not json {"):
        record.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        assert served.served_by(spec) is None, bad
    capsys.readouterr()


def test_local_endpoint_names_this_machines_servers_only():
    """One parse of `openai:http://HOST:PORT/v1:ALIAS` serves `served_by` and the pages' serve line."""
    from llm_side.backends.served import local_endpoint

    assert local_endpoint("openai:http://127.0.0.1:8093/v1:qwen1.5b") == ("127.0.0.1", 8093, "qwen1.5b")
    assert local_endpoint("openai:http://localhost:80/v1:a:b") == ("localhost", 80, "b")
    for other in ("qwen1.5b", "openai:http://10.0.0.9:8093/v1:x", "openai:http://127.0.0.1/v1:x",
                  "openai:http://127.0.0.1:99999/v1:x", "openai:http://127.0.0.1:8093/v1:", "openai:"):
        assert local_endpoint(other) is None, other


@pytest.mark.parametrize(("argv", "message"), [
    (["serve", "--model", "gguf:/no/such.gguf"], "GGUF file /no/such.gguf not found"),
    (["serve", "--model", "nosuch"], "takes a packaged model (gemma270m, qwen0.5b, qwen1.5b, smollm2), gguf:FILE or"),
    (["serve", "--model", "hf:/x"], "/x is not a transformers model folder (no config.json)"),
    (["serve", "--model", "hf:/x", "--engine", "llama.cpp", "--print-only"], "llama.cpp serves GGUF files"),
    (["serve", "--alias", "a:b", "--print-only"], "cannot serve a model named 'a:b'"),
    (["serve", "--n-ctx", "512"], "--n-ctx must be >= 2048"),
])
def test_serve_bad_input_is_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("muse-llm serve: error:")


def test_help_lists_every_subcommand(capsys):
    """A newcomer's `muse-llm --help` names the passthrough commands too, and each still has its own parser."""
    from llm_side.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in ("run", "tasks", "report", "compare", "alfworld-pipeline", "serve", "sweep-tau"):
        assert f"    {name} " in out, name
    with pytest.raises(SystemExit):
        main(["alfworld-pipeline", "--help"])
    assert "--expert-share" in capsys.readouterr().out
