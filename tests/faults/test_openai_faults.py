"""Fault 9: the OpenAI-compatible backend against misbehaving servers on 127.0.0.1.

A server that hangs (timeout), one that keeps failing (bounded retries with exponential backoff),
one that answers garbage, and one that is down (one-line error from the real `muse-llm run`).
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_helpers import cli, error_line, jsonl_lines, no_traceback

from llm_side.backends.openai_compat import BackendUnavailable, OpenAICompatLLM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """A threaded stub HTTP server; `hits` counts requests (or connections, for the hanging one)."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self.hits: list[float] = []
        handler.server_hits = self.hits  # type: ignore[attr-defined]
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Hang(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.server_hits.append(time.monotonic())  # type: ignore[attr-defined]
        time.sleep(3.0)  # longer than the client's timeout

    def log_message(self, *a: object) -> None:
        pass


class _Busy(_Hang):
    def do_POST(self) -> None:  # noqa: N802
        self.server_hits.append(time.monotonic())  # type: ignore[attr-defined]
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b"overloaded\nretry later")


class _BadRequest(_Hang):
    def do_POST(self) -> None:  # noqa: N802
        self.server_hits.append(time.monotonic())  # type: ignore[attr-defined]
        self.send_response(400)
        self.end_headers()
        self.wfile.write(b'{"error": "model not found"}')


class _Garbage(_Hang):
    def do_POST(self) -> None:  # noqa: N802
        self.server_hits.append(time.monotonic())  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"<html>not json</html>")


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[_Server]:
    s = _Server(request.param)
    yield s
    s.close()


@pytest.mark.parametrize("server", [_Hang], indirect=True)
def test_hanging_server_times_out_within_bound(server: _Server) -> None:
    llm = OpenAICompatLLM(server.url, "m", timeout=0.5, retries=1, backoff=0.05)
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailable) as info:
        llm.complete("hi")
    took = time.monotonic() - t0
    assert len(server.hits) == 2, server.hits
    assert took < 2 * 0.5 + 0.05 + 1.5, f"timeout not enforced: {took:.1f}s"
    msg = str(info.value)
    assert "\n" not in msg and server.url in msg and "2 attempts" in msg


@pytest.mark.parametrize("server", [_Busy], indirect=True)
def test_overloaded_server_retried_with_backoff_then_gives_up(server: _Server) -> None:
    llm = OpenAICompatLLM(server.url, "m", timeout=5, retries=3, backoff=0.1)
    with pytest.raises(BackendUnavailable) as info:
        llm.chat([{"role": "user", "content": "hi"}])
    assert len(server.hits) == 4  # 1 try + 3 retries, then stop
    gaps = [b - a for a, b in zip(server.hits, server.hits[1:], strict=False)]
    for gap, want in zip(gaps, (0.1, 0.2, 0.4), strict=True):
        assert gap >= want * 0.9, f"backoff too short: gaps {gaps}"
    msg = str(info.value)
    assert "\n" not in msg and "HTTP 503" in msg


@pytest.mark.parametrize("server", [_BadRequest], indirect=True)
def test_client_error_is_not_retried(server: _Server) -> None:
    llm = OpenAICompatLLM(server.url, "m", timeout=5, retries=3, backoff=0.1)
    with pytest.raises(BackendUnavailable, match="HTTP 400"):
        llm.complete("hi")
    assert len(server.hits) == 1


@pytest.mark.parametrize("server", [_Garbage], indirect=True)
def test_non_json_reply_is_retried_then_reported(server: _Server) -> None:
    llm = OpenAICompatLLM(server.url, "m", timeout=5, retries=1, backoff=0.01)
    with pytest.raises(BackendUnavailable, match="invalid JSON"):
        llm.complete("hi")
    assert len(server.hits) == 2


@pytest.mark.slow
def test_muse_llm_run_against_down_server_is_one_line_and_records_nothing(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    out = tmp_path / "run"
    proc = cli("muse-llm", "run", "--env", "minecraft", "--agent", "react", "--tasks", "mine_log",
               "--episodes", "2", "--max-steps", "3", "--model", f"openai:{url}:m", "--out", str(out),
               "--no-progress", timeout=180, env={"MUSE_LLM_HTTP_RETRIES": "1"})
    no_traceback(proc.stderr)
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
    assert proc.returncode != 0 and len(errors) == 1 and url in errors[0], proc.stderr[-2000:]
    assert jsonl_lines(out / "episodes.jsonl") == [], "an outage must not be recorded as failed episodes"


class _JsonList(_Hang):
    def do_POST(self) -> None:  # noqa: N802
        self.server_hits.append(time.monotonic())  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'[{"text": "> mine oak_log"}]')


@pytest.mark.parametrize("server", [_JsonList], indirect=True)
def test_reply_that_is_not_a_completion_object_is_not_retried(server: _Server) -> None:
    llm = OpenAICompatLLM(server.url, "m", timeout=5, retries=3, backoff=0.01)
    with pytest.raises(BackendUnavailable, match="JSON list, not an OpenAI completion object"):
        llm.complete("hi")
    assert len(server.hits) == 1


def _run_against(url: str, out: Path, *extra: str, env: dict[str, str] | None = None):  # noqa: ANN202
    return cli("muse-llm", "run", "--env", "minecraft", "--tasks", "mine_log", "--episodes", "2", "--max-steps", "3",
               "--model", f"openai:{url}:m", "--out", str(out), "--no-progress", *extra, timeout=180, env=env)


def _stopped_with_nothing_recorded(proc, out: Path, *words: str) -> None:  # noqa: ANN001
    line = error_line(proc.stderr, "muse-llm run")
    assert proc.returncode != 0, proc.stderr[-2000:]
    for w in words:
        assert w in line, (w, line)
    assert jsonl_lines(out / "episodes.jsonl") == [], "a backend error must never be an episode outcome"


@pytest.mark.slow
@pytest.mark.parametrize("server", [_JsonList], indirect=True)
def test_muse_llm_run_against_a_server_answering_a_list_records_nothing(server: _Server, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _run_against(server.url, out, "--agent", "react")
    _stopped_with_nothing_recorded(proc, out, server.url, "JSON list", "OpenAI-compatible server")


@pytest.mark.slow
@pytest.mark.parametrize(("var", "value", "words"), [
    ("MUSE_LLM_HTTP_TIMEOUT", "-5", ["MUSE_LLM_HTTP_TIMEOUT='-5'", "a number > 0"]),
    ("MUSE_LLM_HTTP_TIMEOUT", "abc", ["MUSE_LLM_HTTP_TIMEOUT='abc'", "a number > 0"]),
    ("MUSE_LLM_HTTP_TIMEOUT", "nan", ["MUSE_LLM_HTTP_TIMEOUT='nan'"]),
    ("MUSE_LLM_HTTP_RETRIES", "-1", ["MUSE_LLM_HTTP_RETRIES='-1'", "an integer >= 0"]),
    ("MUSE_LLM_HTTP_RETRIES", "2.5", ["MUSE_LLM_HTTP_RETRIES='2.5'", "an integer >= 0"]),
])
def test_bad_client_settings_are_named_before_the_run(tmp_path: Path, var: str, value: str, words: list[str]) -> None:
    out = tmp_path / "run"
    proc = _run_against(f"http://127.0.0.1:{_free_port()}/v1", out, "--agent", "react", env={var: value})
    assert proc.returncode == 2
    _stopped_with_nothing_recorded(proc, out, *words, "unset it")
    assert not (out / "run.json").exists(), "the run started"


@pytest.mark.slow
def test_agent_token_limit_below_one_stops_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _run_against(f"http://127.0.0.1:{_free_port()}/v1", out, "--agent", "cot", "--agent-opt", "max_tokens=-5")
    _stopped_with_nothing_recorded(proc, out, "max_tokens")
