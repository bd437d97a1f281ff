"""The OpenAI-compatible backend: retries, timeouts and a down server against local stub sockets,
and real generation against real servers the tests start on the packaged SmolLM2: `transformers serve`
(through `muse-llm serve`, in CI) and llama.cpp's (where it is built)."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import pytest

from llm_side import serve
from llm_side.backends import load_llm
from llm_side.backends.openai_compat import BackendUnavailable, OpenAICompatLLM
from llm_side.cli import main as cli_main


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Answers 503 to the first request, then one choice per request (like llama.cpp ignoring n)."""

    calls: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append({"path": self.path, **body})
        if len(self.calls) == 1:
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"busy\nretry later")
            return
        if self.path.endswith("/chat/completions"):
            choice = {"message": {"role": "assistant", "content": "hi there. END more"}}
        else:
            choice = {"text": f" go to desk {len(self.calls)}\nOn the desk"}
        reply = json.dumps({"choices": [choice]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky_server():
    _Flaky.calls = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_retries_after_503_and_fills_n_when_server_returns_one_choice(flaky_server):
    llm = OpenAICompatLLM(flaky_server, "m", timeout=5, retries=2, backoff=0.01)
    out = llm.complete("> ", n=3, temperature=0.5, max_tokens=7, stop=["\n"], seed=4)
    assert sorted(out) == [" go to desk 2", " go to desk 3", " go to desk 4"]  # truncated at the stop string
    calls = _Flaky.calls
    assert len(calls) == 4 and all(c["path"] == "/v1/completions" for c in calls)
    # one batched request; the server ignored n, so the two missing samples went out as single requests
    assert [c["n"] for c in calls[1:]] == [3, 1, 1] and sorted(c["seed"] for c in calls[2:]) == [5, 6]
    assert calls[1]["temperature"] == 0.5 and calls[1]["max_tokens"] == 7 and calls[1]["stop"] == ["\n"]
    assert calls[1]["model"] == "m" and calls[1]["prompt"] == "> " and calls[1]["seed"] == 4
    assert llm.ignores_n and len(llm.complete("> ", n=2, temperature=0.5, seed=0)) == 2
    assert [c["n"] for c in _Flaky.calls[4:]] == [1, 1]  # known to ignore n: straight to single requests
    chat = llm.chat([{"role": "user", "content": "hello"}], stop=["END"])
    assert chat == ["hi there. "] and _Flaky.calls[-1]["messages"][0]["content"] == "hello"


class _Slots(http.server.BaseHTTPRequestHandler):
    """A server with parallel slots that ignores n: each request takes 0.2 s; records how many overlap."""

    in_flight = 0
    most = 0
    n_seen: list[int] = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        with cls.lock:
            cls.in_flight += 1
            cls.most = max(cls.most, cls.in_flight)
            cls.n_seen.append(body["n"])
        time.sleep(0.2)
        with cls.lock:
            cls.in_flight -= 1
        reply = json.dumps({"choices": [{"text": f" rollout seed {body.get('seed')}"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def test_rollouts_reach_a_server_that_ignores_n_as_concurrent_requests():
    """MUSE-LLM's 5 rollouts went to llama.cpp one after another (343 s a step): now they overlap."""
    _Slots.in_flight, _Slots.most, _Slots.n_seen = 0, 0, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slots)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        llm = OpenAICompatLLM(f"http://127.0.0.1:{server.server_address[1]}/v1", "m", timeout=5, parallel=8)
        out = llm.complete("> ", n=5, temperature=0.5, seed=10)
        assert out == [f" rollout seed {s}" for s in range(10, 15)]  # in seed order, one per sample
        assert _Slots.n_seen[0] == 5 and _Slots.most >= 2  # the batched request, then concurrent ones
        _Slots.most, _Slots.n_seen = 0, []
        llm.complete("> ", n=5, temperature=0.5, seed=0)
        assert _Slots.n_seen == [1] * 5 and _Slots.most >= 3
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(ValueError, match="parallel"):
        OpenAICompatLLM("http://127.0.0.1:1/v1", "m", parallel=0)


def test_down_server_is_one_line_naming_the_url():
    port = serve.free_port()  # nothing listens here now: connection refused
    llm = OpenAICompatLLM(f"http://127.0.0.1:{port}/v1", "m", timeout=2, retries=2, backoff=0.05)
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailable) as err:
        llm.complete("x")
    msg = str(err.value)
    assert f"http://127.0.0.1:{port}/v1" in msg and "3 attempts" in msg and "\n" not in msg
    assert time.monotonic() - t0 >= 0.05 + 0.1  # two backoff sleeps: 0.05, 0.1


def test_hanging_server_times_out_with_bounded_retries():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections (kernel backlog) but never answers
    port = listener.getsockname()[1]
    try:
        llm = OpenAICompatLLM(f"http://127.0.0.1:{port}/v1", "m", timeout=0.3, retries=1, backoff=0.01)
        t0 = time.monotonic()
        with pytest.raises(BackendUnavailable, match="timed out|Timeout"):
            llm.chat([{"role": "user", "content": "x"}])
        assert 0.6 <= time.monotonic() - t0 < 5  # two attempts of 0.3 s, not forever
    finally:
        listener.close()


def test_bad_specs_are_explained():
    with pytest.raises(ValueError, match="openai:URL:MODEL"):
        OpenAICompatLLM.from_spec("openai:http://127.0.0.1:8080/v1")
    with pytest.raises(ValueError, match="http://"):
        OpenAICompatLLM.from_spec("openai:127.0.0.1:8080:m")
    llm = OpenAICompatLLM.from_spec("openai:http://127.0.0.1:8080/v1:smollm2")
    assert llm.base_url == "http://127.0.0.1:8080/v1" and llm.model == "smollm2"


def test_a_local_muse_llm_serve_tells_the_client_its_window_and_device_and_muse_sizes_its_rollouts_from_them(
        tmp_path, monkeypatch):
    """What the API does not say, a local `muse-llm serve` records: the client takes the server's n_ctx as its
    window and its device, so MUSE's `rollout_tokens=auto` rolls out CPU_ROLLOUT_TOKENS behind a CPU server and
    to the server's window behind a GPU one; without a live record of this model nothing is assumed."""
    import os

    from metagent_fakes import BagOfWordsEmbedder

    from llm_side.agents.muse import CPU_ROLLOUT_TOKENS, DEFAULT_CONTEXT_WINDOW, MuseAgent
    from llm_side.agents.self_awareness import SelfAwarenessModel
    from llm_side.backends import served

    monkeypatch.setenv("MUSE_LLM_CACHE", str(tmp_path))
    spec = "openai:http://127.0.0.1:8177/v1:tiny"
    record = {"engine": "llama.cpp", "model": "qwen1.5b", "alias": "tiny", "threads": 2, "n_ctx": 12288}

    def horizon(llm: OpenAICompatLLM) -> int:
        return MuseAgent(llm, SelfAwarenessModel(BagOfWordsEmbedder())).horizon("x" * 400)  # ~100 tokens

    assert horizon(OpenAICompatLLM.from_spec(spec)) == DEFAULT_CONTEXT_WINDOW - 100  # no record: the paper's rule
    served.record_serving("127.0.0.1", 8177, {**record, "device": "cpu"})
    llm = OpenAICompatLLM.from_spec(spec)
    assert (llm.on_cpu, llm.context_window) == (True, 12288)
    assert horizon(llm) == CPU_ROLLOUT_TOKENS
    served.record_serving("127.0.0.1", 8177, {**record, "device": "cuda"})
    assert horizon(OpenAICompatLLM.from_spec(spec)) == 12288 - 100
    served.record_serving("127.0.0.1", 8177, {**record, "alias": "other", "device": "cpu"})
    assert horizon(OpenAICompatLLM.from_spec(spec)) == DEFAULT_CONTEXT_WINDOW - 100
    payload = json.loads(served.serving_file("127.0.0.1", 8177).read_text())
    assert payload["pid"] == os.getpid()  # a record of a live process; a dead one is ignored (test_llm_cli)


def _check_real_server(spec: str) -> OpenAICompatLLM:
    """A real server answers: greedy completion, n sampled completions that differ, one chat reply."""
    llm = load_llm(spec)
    prompt = "Q: What is the capital of France?\nA: The capital of France is"
    greedy = llm.complete(prompt, n=1, temperature=0.0, max_tokens=8, stop=["\n"])
    assert len(greedy) == 1 and greedy[0].strip() and "\n" not in greedy[0]
    samples = llm.complete("Once upon a time", n=3, temperature=1.0, max_tokens=12, seed=1)
    assert len(samples) == 3 and all(isinstance(s, str) for s in samples)
    assert len(set(samples)) > 1  # sampled, not one greedy reply copied
    reply = llm.chat([{"role": "user", "content": "Say hello."}], max_tokens=8, stop=["\n"])
    assert len(reply) == 1 and reply[0].strip()
    return llm


@pytest.mark.slow
def test_real_llama_cpp_server_from_muse_llm_serve_smollm2():
    pytest.importorskip("llama_cpp.server", reason="llama.cpp's server is optional: MUSE_SETUP_SERVER=1 bash "
                        "scripts/setup.sh builds it (~10 min on 2 cores; not in CI)")
    with serve.running("smollm2", engine="llama.cpp", threads=1, n_ctx=2048) as spec:
        llm = _check_real_server(spec)
    assert (llm.on_cpu, llm.context_window) == (True, 2048)  # from the server's record


@pytest.mark.slow
def test_real_transformers_server_from_muse_llm_serve_smollm2(tmp_path):
    """The server CI runs for real: `muse-llm serve --engine transformers` on the packaged SmolLM2, answering
    under the model's name. Its legacy completions ignore `n`, which the client learns from the first reply."""
    with serve.running("smollm2", engine="transformers", threads=1) as spec:
        assert spec.endswith(":smollm2")
        llm = _check_real_server(spec)
        assert llm.ignores_n and llm.context_window is None  # no n_ctx recorded for transformers
        assert llm.on_cpu == (serve.transformers_device() == "cpu")
        # the product path end to end: ReAct on a real ALFWorld game, every step through the served model
        out = tmp_path / "run"
        assert cli_main(["run", "--env", "alfworld", "--agent", "react", "--limit", "1", "--max-steps", "2",
                         "--agent-opt", "max_tokens=24", "--model", spec, "--out", str(out), "--no-progress"]) == 0
    (row,) = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert row["steps"] == 2 == len(row["actions"]) and all(a.strip() for a in row["actions"]), row
    assert json.loads((out / "run.json").read_text())["model"] == spec
    # the episode names the server it went through, the processor and when it finished
    device = serve.transformers_device()
    assert row["server"] == {"engine": "transformers", "model": "smollm2", "threads": 1, "device": device}, row
    assert row["cpu_model"] and row["finished"].endswith("Z")


def test_a_server_that_exits_is_one_error_with_its_log(monkeypatch):
    """`serve.running` on a server that dies at start: ServerFailed naming the exit code and the log's tail, at
    once, not after the readiness timeout."""
    monkeypatch.setattr(serve, "resolve_engine", lambda engine, **kw: "transformers")
    t0 = time.monotonic()
    with pytest.raises(serve.ServerFailed, match="exited with code 2: .*takes a packaged model"):
        with serve.running("no-such-model", ready_s=60):
            pass
    assert time.monotonic() - t0 < 30


def test_default_timeout_is_sized_from_the_rollouts(monkeypatch):
    """Unset MUSE_LLM_HTTP_TIMEOUT: a request's timeout grows with n x max_tokens (MUSE's rollouts queue on a
    one-slot server); set, it is used as given."""
    from llm_side.backends import openai_compat as oc

    monkeypatch.delenv("MUSE_LLM_HTTP_TIMEOUT", raising=False)
    llm = oc.OpenAICompatLLM.from_spec("openai:http://127.0.0.1:9/v1:m")
    assert llm.timeout is None
    assert oc.sized_timeout(5, 256) == 120 + 0.5 * 5 * 256 and oc.sized_timeout(1, 64) == 152
    seen = []
    monkeypatch.setattr(llm, "_post", lambda path, payload, timeout=None: seen.append(timeout) or
                        {"choices": [{"text": "x"}] * payload["n"]})
    llm.complete("p", n=5, max_tokens=256, temperature=0.5)
    assert seen == [oc.sized_timeout(5, 256)]
    monkeypatch.setenv("MUSE_LLM_HTTP_TIMEOUT", "30")
    fixed = oc.OpenAICompatLLM.from_spec("openai:http://127.0.0.1:9/v1:m")
    monkeypatch.setattr(fixed, "_post", lambda path, payload, timeout=None: seen.append(timeout) or
                        {"choices": [{"text": "x"}] * payload["n"]})
    fixed.complete("p", n=5, max_tokens=256, temperature=0.5)
    assert seen[-1] == 30.0
