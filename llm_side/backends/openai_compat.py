"""An OpenAI-compatible HTTP server as an LLM (`openai:URL:MODEL`): vLLM, llama.cpp server, Ollama.

Standard library only (urllib), so it runs without torch. Requests time out; connection failures,
timeouts, 429 and 5xx are retried a bounded number of times with exponential backoff; then one
error names the URL. Servers that ignore `n` (llama.cpp returns one choice) are asked again until
`n` replies are in.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from llm_side.backends import BackendRequestError, env_number, truncate_at_stop

RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


class BackendUnavailable(RuntimeError):
    """The server could not be reached or kept failing after the retries. `fatal`: the runner stops
    (resume redoes the episode later) instead of recording it as an agent failure."""

    fatal = True


class OpenAICompatLLM:
    """`complete` -> /completions, `chat` -> /chat/completions of `base_url` (ending in /v1)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 1.0,
        api_key: str | None = None,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"OpenAI-compatible URL must start with http:// or https://, got '{base_url}'")
        self.base_url, self.model = base_url.rstrip("/"), model
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.name = f"openai:{self.base_url}:{model}"
        host = urllib.parse.urlsplit(self.base_url).hostname or ""
        # A local server is never reached through an HTTP proxy from the environment.
        local = host in ("localhost", "127.0.0.1", "::1")
        self._opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if local else []))

    @classmethod
    def from_spec(cls, spec: str) -> OpenAICompatLLM:
        """`openai:URL:MODEL`; MUSE_LLM_HTTP_TIMEOUT and MUSE_LLM_HTTP_RETRIES tune the client."""
        body = spec.removeprefix("openai:")
        url, sep, model = body.rpartition(":")
        if not sep or not url or not model or "/" in model:
            raise ValueError(
                f"bad model spec '{spec}': use openai:URL:MODEL, e.g. openai:http://127.0.0.1:8080/v1:smollm2"
            )
        return cls(
            url,
            model,
            timeout=env_number("MUSE_LLM_HTTP_TIMEOUT", 120.0, integer=False, low=0, above=True),
            retries=int(env_number("MUSE_LLM_HTTP_RETRIES", 3, integer=True, low=0)),
        )

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
        return self._sample("/completions", body, n, temperature, max_tokens, stop, seed, lambda c: c.get("text", ""))

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
            lambda c: (c.get("message") or {}).get("content") or "",
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
        out: list[str] = []
        for _ in range(n):  # at most n requests even when a server returns one choice each time
            payload = {
                **body,
                "model": self.model,
                "n": n - len(out),
                "temperature": float(temperature),
                "max_tokens": int(max_tokens),
            }
            if stops:
                payload["stop"] = stops
            if seed is not None:
                payload["seed"] = int(seed) + len(out)
            choices = self._post(path, payload).get("choices") or []
            if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
                raise BackendUnavailable(f"{self.base_url}{path} answered 'choices' = {str(choices)[:80]}, not a list "
                                         "of completion objects; is --model openai:URL:MODEL an OpenAI-compatible "
                                         "server?")
            out.extend(truncate_at_stop(text_of(c), stop) for c in choices)
            if len(out) >= n:
                break
        if len(out) < n:
            raise BackendUnavailable(f"{self.base_url}{path} returned {len(out)} of {n} requested choices")
        return out[:n]

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
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
                with self._opener.open(req, timeout=self.timeout) as resp:
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
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}"
            except json.JSONDecodeError as exc:
                last = f"invalid JSON reply: {exc}"
        last = " ".join(last.split())  # one line
        raise BackendUnavailable(
            f"OpenAI-compatible server at {self.base_url} failed after {self.retries + 1} attempts "
            f"({last}); is it running? Start it or fix --model openai:URL:MODEL."
        )
