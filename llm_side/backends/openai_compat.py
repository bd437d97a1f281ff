"""An OpenAI-compatible HTTP server as an LLM (`openai:URL:MODEL`): vLLM, llama.cpp server, Ollama.

Standard library only (urllib), so it runs without torch. Requests time out; connection failures,
timeouts, 429 and 5xx are retried a bounded number of times with exponential backoff; then one
error names the URL.

`n` samples (MUSE-LLM's rollouts) are one batched request: `n` is sent, and a server that honours it
(vLLM) decodes them together. A server that ignores it (llama.cpp's servers return one choice) gets the
missing samples as concurrent single-choice requests, at most `parallel` in flight
(MUSE_LLM_HTTP_PARALLEL, default 8), and every later call goes out that way at once: a server with
parallel slots decodes them together (llama.cpp's `llama-server -np N`, continuous batching), one
without (llama-cpp-python's server, which `muse-llm serve` starts, queues requests on one context)
answers them one after another, as before. benchmarks/llm_sampling.py measures both sides.

Timeouts. MUSE_LLM_HTTP_TIMEOUT (seconds) fixes the timeout of every request. Unset, a request's timeout
is sized from what it asks for: BASE_TIMEOUT plus `n * max_tokens` tokens at SECONDS_PER_TOKEN (a
2-core CPU server: ~2 tokens/s for the slowest packaged model), because a server with one slot decodes
MUSE's `n` rollouts one after another and the last answer waits for all of them: 5 rollouts of 256
tokens get 120 + 640 s, a ReAct action line of 64 tokens 152 s.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llm_side.backends import BackendRequestError, env_number, truncate_at_stop
from llm_side.backends.served import served_by

RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}
BASE_TIMEOUT = 120.0
SECONDS_PER_TOKEN = 0.5
"""Per generated token in the sized timeout (module docstring)."""


def sized_timeout(n: int, max_tokens: int) -> float:
    """The timeout of a request for `n` samples of `max_tokens` when none is set (module docstring)."""
    return BASE_TIMEOUT + SECONDS_PER_TOKEN * max(1, int(n)) * max(1, int(max_tokens))


class BackendUnavailable(RuntimeError):
    """The server could not be reached or kept failing after the retries. `fatal`: the runner stops
    (resume redoes the episode later) instead of recording it as an agent failure."""

    fatal = True


def _text(choice: dict[str, Any], path: tuple[str, ...], url: str) -> str:
    """The completion text at `path` of one reply choice; a reply without it (or not a string) is a protocol
    error that stops the run (BackendUnavailable), never an empty completion recorded as the agent's."""
    value: Any = choice
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, str):
        raise BackendUnavailable(f"{url} answered a choice without a text ('{'.'.join(path)}' is "
                                 f"{str(value)[:60]}); is --model openai:URL:MODEL an OpenAI-compatible server?")
    return value


class OpenAICompatLLM:
    """`complete` -> /completions, `chat` -> /chat/completions of `base_url` (ending in /v1)."""

    context_window: int | None = None
    """The server's context size in tokens where known (a local `muse-llm serve` records it); None: unknown."""
    on_cpu: bool = False
    """The server decodes on a CPU, as a local `muse-llm serve` records it; False where unknown (a remote server).
    MUSE-LLM's `rollout_tokens=auto` keeps its rollouts short on a CPU."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        timeout: float | None = None,
        retries: int = 3,
        backoff: float = 1.0,
        api_key: str | None = None,
        parallel: int = 8,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"OpenAI-compatible URL must start with http:// or https://, got '{base_url}'")
        self.base_url, self.model = base_url.rstrip("/"), model
        # None: sized per request from n and max_tokens (`sized_timeout`)
        self.timeout = None if timeout is None else float(timeout)
        self.retries, self.backoff = int(retries), float(backoff)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        if int(parallel) < 1:
            raise ValueError(f"parallel requests must be >= 1, got {parallel}")
        self.parallel = int(parallel)
        self.ignores_n = False  # learnt from the first reply with fewer choices than asked
        self.name = f"openai:{self.base_url}:{model}"
        host = urllib.parse.urlsplit(self.base_url).hostname or ""
        # A local server is never reached through an HTTP proxy from the environment.
        local = host in ("localhost", "127.0.0.1", "::1")
        self._opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if local else []))

    @classmethod
    def from_spec(cls, spec: str) -> OpenAICompatLLM:
        """`openai:URL:MODEL`; MUSE_LLM_HTTP_TIMEOUT, MUSE_LLM_HTTP_RETRIES and MUSE_LLM_HTTP_PARALLEL tune
        the client."""
        body = spec.removeprefix("openai:")
        url, sep, model = body.rpartition(":")
        if not sep or not url or not model or "/" in model:
            raise ValueError(
                f"bad model spec '{spec}': use openai:URL:MODEL, e.g. openai:http://127.0.0.1:8080/v1:smollm2"
            )
        llm = cls(
            url,
            model,
            # upper bounds: an hour per request, 10 retries (about 17 min of backoff), 256 requests in flight;
            # with MUSE_LLM_HTTP_TIMEOUT unset each request's timeout is sized from its length
            timeout=(env_number("MUSE_LLM_HTTP_TIMEOUT", BASE_TIMEOUT, integer=False, low=0, above=True, high=3600)
                     if os.environ.get("MUSE_LLM_HTTP_TIMEOUT", "").strip() else None),
            retries=int(env_number("MUSE_LLM_HTTP_RETRIES", 3, integer=True, low=0, high=10)),
            parallel=int(env_number("MUSE_LLM_HTTP_PARALLEL", 8, integer=True, low=1, high=256)),
        )
        server = served_by(spec)  # None unless a live local `muse-llm serve` of this model recorded itself
        if server:
            llm.context_window = server.get("n_ctx")
            llm.on_cpu = server.get("device") == "cpu"
        return llm

    def complete(
        self,
        prompt: str,
        *,
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: int = 128,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[str]:
        body = {"prompt": prompt}
        return self._sample("/completions", body, n, temperature, max_tokens, stop, seed,
                            lambda c: _text(c, ("text",), self.base_url + "/completions"))

    def chat(
        self,
        messages: list[dict[str, str]],
        *,
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: int = 256,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[str]:
        body = {"messages": messages}
        return self._sample(
            "/chat/completions",
            body,
            n,
            temperature,
            max_tokens,
            stop,
            seed,
            lambda c: _text(c, ("message", "content"), self.base_url + "/chat/completions"),
        )

    def _sample(
        self,
        path: str,
        body: dict[str, Any],
        n: int,
        temperature: float,
        max_tokens: int,
        stop: Sequence[str] | None,
        seed: int | None,
        text_of: Any,
    ) -> list[str]:
        if n < 1 or max_tokens < 1:
            raise BackendRequestError(f"n and max_tokens must be >= 1, got n={n}, max_tokens={max_tokens}; "
                                      "fix the agent option (e.g. --agent-opt max_tokens=128)")
        stops = [s for s in (stop or ()) if s][:4]  # the OpenAI API takes at most 4
        timeout = self.timeout if self.timeout is not None else sized_timeout(n, max_tokens)

        def request(count: int, first: int) -> list[str]:
            payload = {**body, "model": self.model, "n": count, "temperature": float(temperature),
                       "max_tokens": int(max_tokens)}
            if stops:
                payload["stop"] = stops
            if seed is not None:
                payload["seed"] = int(seed) + first
            choices = self._post(path, payload, timeout).get("choices") or []
            if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
                raise BackendUnavailable(f"{self.base_url}{path} answered 'choices' = {str(choices)[:80]}, not a list "
                                         "of completion objects; is --model openai:URL:MODEL an OpenAI-compatible "
                                         "server?")
            return [truncate_at_stop(text_of(c), stop) for c in choices][:count]

        out: list[str] = []
        if n == 1 or not self.ignores_n:
            out = request(n, 0)  # one batched request
            if len(out) >= n:
                return out[:n]
            self.ignores_n = self.ignores_n or (n > 1 and len(out) <= 1)
        done, missing = len(out), n - len(out)  # the rest as concurrent single-choice requests (the server's slots)
        with ThreadPoolExecutor(max_workers=min(missing, self.parallel)) as pool:
            for texts in pool.map(lambda i: request(1, done + i), range(missing)):
                out.extend(texts)
        if len(out) < n:
            raise BackendUnavailable(f"{self.base_url}{path} returned {len(out)} of {n} requested choices")
        return out[:n]

    def _post(self, path: str, payload: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        url = self.base_url + path
        data = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            req = urllib.request.Request(url, data=data, headers=headers, method="POST")
            try:
                wait = timeout or self.timeout or BASE_TIMEOUT
                with self._opener.open(req, timeout=wait) as resp:
                    reply = json.loads(resp.read().decode())
                if not isinstance(reply, dict):  # not retried: the same server answers the same way
                    raise BackendUnavailable(
                        f"{url} answered with a JSON {type(reply).__name__}, not an OpenAI completion object; is "
                        "--model openai:URL:MODEL an OpenAI-compatible server (vLLM, llama.cpp server, Ollama)?")
                return reply
            except urllib.error.HTTPError as exc:
                detail = " ".join(exc.read().decode(errors="replace").split())[:200]
                if exc.code not in RETRY_STATUS:
                    raise BackendUnavailable(f"{url} answered HTTP {exc.code}: {detail}") from None
                last = f"HTTP {exc.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException, OSError) as exc:
                # a refused or dropped connection, a reply cut mid-body (IncompleteRead), a bad status line
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}"
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                last = f"invalid JSON reply: {exc}"
        last = " ".join(last.split())  # one line
        raise BackendUnavailable(
            f"OpenAI-compatible server at {self.base_url} failed after {self.retries + 1} attempts "
            f"({last}); is it running? Start it or fix --model openai:URL:MODEL."
        )
