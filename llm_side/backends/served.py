"""What a local `muse-llm serve` says it serves, written by the server and read by its clients.

The server leaves a small record under MUSE_LLM_CACHE/serving/HOST-PORT.json: the engine, the model, its
threads, context size and device, and the server's process id. A run through `openai:http://HOST:PORT/v1:NAME`
on this machine reads it (`served_by`) to say in every episode line how its model was served, and the client
learns from it what the server cannot tell over the API: its context window and whether it decodes on a CPU
(MUSE-LLM's `rollout_tokens=auto` sizes its rollouts from that). The record is read, never trusted: a stale
one (its process gone), one naming another model, or a malformed one is no record.

Standard library only: the OpenAI-compatible client imports it and never needs torch.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from llm_side.backends.models import cache_root

SERVED_ENGINES = ("llama.cpp", "transformers")
SERVED_BY_KEYS = ("engine", "model", "threads", "n_ctx", "device")
"""What a `muse-llm run` episode record says about the local server it went through (`served_by`)."""
DEVICES = ("cpu", "cuda")
"""Where a served model computes: `muse-llm serve --engine llama.cpp` offloads no layers (cpu); transformers
takes cuda where torch sees a GPU."""
LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1")


def serving_file(host: str, port: int) -> Path:
    """Where `muse-llm serve` on `host:port` says what it serves (MUSE_LLM_CACHE/serving/HOST-PORT.json)."""
    return cache_root() / "serving" / f"{re.sub(r'[^0-9A-Za-z.-]', '_', host)}-{int(port)}.json"


def record_serving(host: str, port: int, served: dict[str, Any]) -> None:
    """Leave `served` (engine, model, threads, ...) and this process's id where `served_by` finds them, so a run
    through this server records how it was served. A file that cannot be written costs only that record."""
    from muse_common.files import atomic_write_json

    try:
        atomic_write_json(serving_file(host, port), {**served, "pid": os.getpid()})
    except OSError as exc:
        print(f"muse-llm serve: note: runs through this server will not record it ({exc})", file=sys.stderr)


def local_endpoint(model: str) -> tuple[str, int, str] | None:
    """(host, port, alias) of a model spec `openai:http://HOST:PORT/v1:ALIAS` whose HOST is this machine
    (`LOCAL_HOSTS`); None for any other spec, a remote host or a URL that does not parse."""
    import urllib.parse

    if not model.startswith("openai:"):
        return None
    url, _, alias = model.removeprefix("openai:").rpartition(":")
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if host not in LOCAL_HOSTS or port is None or not alias:
        return None
    return host, port, alias


def served_by(model: str) -> dict[str, Any] | None:
    """How the local server behind `openai:http://HOST:PORT/v1:NAME` was started (`SERVED_BY_KEYS`), as its
    `muse-llm serve` recorded it; None for any other model, another server, or a record that is stale (its
    process gone), names another model or is malformed (the file is read, never trusted)."""
    endpoint = local_endpoint(model)
    if endpoint is None:
        return None
    host, port, alias = endpoint
    for name in dict.fromkeys((host, *LOCAL_HOSTS)):  # the server may listen on another local name
        try:
            data = json.loads(serving_file(name, port).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or data.get("alias") != alias or not _alive(data.get("pid")):
            continue
        served = {k: data[k] for k in SERVED_BY_KEYS if k in data}
        if served.get("device", "cpu") not in DEVICES:
            continue
        if served.get("engine") in SERVED_ENGINES and all(
                isinstance(served.get(k), int) and not isinstance(served.get(k), bool) and served[k] >= 1
                for k in ("threads", "n_ctx") if k in served) \
                and isinstance(served.get("model"), str) and 0 < len(served["model"]) <= 500:
            return served
    return None


def _alive(pid: Any) -> bool:
    """`pid_alive` for a pid read from an untrusted server record: anything but a positive int is no process."""
    from muse_common.run_lock import pid_alive

    return isinstance(pid, int) and not isinstance(pid, bool) and pid >= 1 and pid_alive(pid)
