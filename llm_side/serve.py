"""`muse-llm serve`: an OpenAI-compatible server on a packaged model, llama.cpp's or transformers'.

    muse-llm serve --model qwen0.5b            # then: muse-llm run ... --model openai:http://127.0.0.1:8080/v1:qwen0.5b

Two engines (`--engine`; `auto` takes llama.cpp where it is installed, else transformers):

- `llama.cpp` (llama-cpp-python's server, `MUSE_SETUP_SERVER=1 bash scripts/setup.sh` builds it, ~10 min on 2
  cores): the fast local path on a CPU. It keeps the prompt's KV cache between calls, so a ReAct step on an
  ALFWorld game takes seconds instead of the tens of seconds in-process transformers needs on 2 cores. Split
  packages (qwen0.5b, qwen1.5b, gemma270m) are joined once into MUSE_LLM_CACHE/gguf/ (sha256 checked)
  before the server starts; `gguf:FILE` serves any GGUF file.
- `transformers` (`transformers serve`, installed with the `llm` extra, nothing to compile): the same
  model unpacked once to a transformers folder under MUSE_LLM_CACHE (as the in-process backend does), served
  under the model's name, or any transformers folder (`hf:DIR`, e.g. Algorithm 3's trained actor). No KV
  cache is kept between calls, and the legacy completions endpoint ignores `n` (the client then asks once per
  sample): a single call costs what in-process transformers costs, MUSE's five rollouts 2.6x (measured,
  docs/benchmarks.md). On a GPU it serves the model in its table dtype.

Before it starts, the server leaves a record of what it serves (engine, model, threads, n_ctx, device) for the
runs on this machine (`llm_side/backends/served.py`): their episode lines name it, and the client learns the
server's window and whether it decodes on a CPU from it.

Context size (`--n-ctx`, default N_CTX, llama.cpp only): llama.cpp's own default of 2048 is too small.
Measured with the Qwen2.5 tokenizer, the 2-shot ALFWorld ReAct head alone is 1110-1566 tokens (SmolLM2:
1168-1645), the examples run 2.7-2.9 characters a token, so the agents' prompt budget (`context_tokens=6000`
estimated at 4 characters a token, i.e. 24,000 characters) can reach ~8,900 real tokens; 12288 holds that
plus one generation. Threads default to all cores (llama-cpp-python's own default is 1; transformers' torch
threads are set through OMP_NUM_THREADS).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from llm_side.backends.served import SERVED_ENGINES, record_serving
from muse_common.arg_parser import ArgumentParser

N_CTX = 12288
DEFAULT_PORT = 8080
ENGINES = ("auto", *SERVED_ENGINES)


def default_alias(spec: str) -> str:
    """The name a model is served under unless --alias says otherwise: a packaged model's name, a GGUF file's
    stem, a transformers folder's name."""
    spec = spec.strip()
    if spec.startswith("gguf:"):
        return Path(spec[5:]).expanduser().stem
    if spec.startswith("hf:"):
        return Path(spec[3:]).expanduser().resolve().name
    return spec


def resolve_gguf(spec: str) -> tuple[Path, str]:
    """(GGUF path, model alias) for a packaged model name or `gguf:FILE`; split packages are joined."""
    from llm_side.backends import models

    spec = spec.strip()
    if spec.startswith("gguf:"):
        path = Path(spec[5:]).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {path} not found; pass gguf:/path/to/model.gguf")
        return path, default_alias(spec)
    if spec.startswith("hf:"):
        raise ValueError("llama.cpp serves GGUF files: serve a transformers folder (hf:DIR) with --engine transformers")
    if spec not in models.MODELS:
        raise ValueError(f"muse-llm serve takes a packaged model ({', '.join(sorted(models.MODELS))}), "
                         f"gguf:FILE or hf:DIR, got '{spec}'")
    from llm_side.backends.models import cache_root

    return models.locate_gguf(models.MODELS[spec], join_dir=cache_root() / "gguf"), spec


def server_argv(gguf: Path, alias: str, *, host: str, port: int, n_ctx: int, threads: int) -> list[str]:
    """The llama-cpp-python server command line."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
            "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--host", host, "--port", str(port)]


def transformers_argv(alias: str, *, host: str, port: int) -> list[str]:
    """The `transformers serve` command line, pinned to the model folder `alias` in its working folder
    (`served_folder`): a pinned server answers only for the name it was started with, so that name is the
    alias clients pass in `openai:URL:ALIAS`."""
    return [sys.executable, "-m", "transformers.cli.transformers", "serve", alias, "--host", host,
            "--port", str(port), "--device", "auto", "--dtype", "auto", "--log-level", "warning"]


def transformers_device() -> str:
    """Where `transformers serve --device auto` puts the model: cuda where torch sees a GPU, else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


SAMPLING = {"do_sample": True, "top_k": 0, "top_p": 1.0}  # what the in-process backend samples with at temperature > 0


def check_alias(alias: str) -> str:
    """A served model's name: one path component a client can put in `openai:URL:NAME`."""
    if not alias or alias in (".", "..") or any(c in alias for c in "/\\: "):
        raise ValueError(f"cannot serve a model named '{alias}': pass --alias NAME (no '/', ':' or spaces)")
    return alias


def served_folder(model_dir: Path, alias: str) -> Path:
    """The working folder for `transformers serve`: it holds `alias/`, links to the unpacked model's files, so
    the pinned server answers under the alias, not under its cache path.

    `alias/generation_config.json` is the model's with SAMPLING added: `transformers serve` samples only where
    the model's generation config says `do_sample` (SmolLM2's does not: measured, a temperature of 1.0 returned
    the greedy text for every seed), and it sets greedy decoding itself at temperature 0. With it, a request's
    temperature means what it means in the OpenAI API and in the in-process backend (plain temperature
    sampling, no top-k). Built once per model folder (its path and its files' sizes and times) and alias, in a
    temporary folder renamed into place."""
    import hashlib
    import json
    import shutil

    from llm_side.backends.models import cache_root
    from muse_common.files import read_json_object

    check_alias(alias)
    model_dir = model_dir.resolve()
    stats = [(f.name, f.stat()) for f in model_dir.iterdir() if f.is_file()]
    files = sorted((name, st.st_size, st.st_mtime_ns) for name, st in stats)
    key = hashlib.sha256(repr((str(model_dir), files)).encode()).hexdigest()[:12]
    root = cache_root() / "served" / f"{model_dir.name}-{key}"  # a changed or another folder of that name: anew
    target = root / alias
    if (target / "generation_config.json").exists():
        return root
    source = model_dir / "generation_config.json"
    config = read_json_object(source, "a generation config", "fix or delete it, then serve again") \
        if source.exists() else {}
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{alias}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for item in model_dir.iterdir():
        if item.name != "generation_config.json" and not item.name.startswith("."):
            (tmp / item.name).symlink_to(item.resolve())
    (tmp / "generation_config.json").write_text(json.dumps({**config, **SAMPLING}, indent=1))
    try:
        tmp.rename(target)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def resolve_engine(engine: str, *, check_installed: bool = True, model: str = "") -> str:
    """`auto`: llama.cpp where llama-cpp-python is installed (and the model is not a transformers folder,
    `hf:DIR`), else transformers; the engine checked installed unless only its command is wanted."""
    import importlib.util

    has_llama = importlib.util.find_spec("llama_cpp") is not None
    if engine == "auto":
        engine = "llama.cpp" if has_llama and not model.strip().startswith("hf:") else "transformers"
    if not check_installed:
        return engine
    if engine == "llama.cpp" and not has_llama:
        raise RuntimeError("llama-cpp-python is not installed: run MUSE_SETUP_SERVER=1 bash scripts/setup.sh "
                           "(it builds llama-cpp-python[server] portably, ~10 minutes on 2 cores), or pass "
                           "--engine transformers")
    if engine == "transformers":
        missing = [m for m in ("fastapi", "uvicorn", "openai") if importlib.util.find_spec(m) is None]
        if missing:
            raise RuntimeError(f"transformers serve needs {', '.join(missing)}: pip install 'transformers[serving]' "
                               "(bash scripts/setup.sh installs it)")
    return engine


def transformers_model(spec: str) -> tuple[Path, str]:
    """(transformers folder, default alias) for a packaged model name or `gguf:FILE` (unpacked on first use), or
    `hf:DIR`, a folder saved by save_pretrained (such as the trained actor of `muse-llm alfworld-pipeline`)."""
    from llm_side.backends import local, models

    spec = spec.strip()
    if spec.startswith("hf:"):
        folder = Path(spec[3:]).expanduser()
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder} is not a transformers model folder (no config.json); pass hf:DIR with "
                                    "a folder saved by save_pretrained")
        from muse_common.files import read_json_object

        read_json_object(folder / "config.json", "a transformers model config", "pass hf:DIR with a folder saved "
                         "by save_pretrained")  # named here in one line, not in the server's traceback
        return folder, default_alias(spec)
    if spec.startswith("gguf:"):
        return local.unpacked_gguf_file(Path(spec[5:]).expanduser()), default_alias(spec)
    if spec not in models.MODELS:
        raise ValueError(f"muse-llm serve takes a packaged model ({', '.join(sorted(models.MODELS))}), "
                         f"gguf:FILE or hf:DIR, got '{spec}'")
    return local.unpacked_packaged(models.MODELS[spec]), spec


class ServerFailed(RuntimeError):
    """A server `running` started exited, or was not ready in time; the message ends with its log's tail."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running(model: str, *, engine: str = "auto", threads: int | None = None, n_ctx: int = 4096,
            ready_s: float = 300, alias: str | None = None) -> Iterator[str]:
    """`muse-llm serve` in a child process at a free local port, for benchmarks and tests: yields the
    `openai:URL:ALIAS` spec once the server answers `/models`, and stops the server on exit. Its log goes to a
    temporary file (a pipe would fill and block the server); a server that exits or is not ready within
    `ready_s` raises ServerFailed with the log's tail."""
    engine = resolve_engine(engine, model=model)
    alias = alias or default_alias(model)
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    cmd = [sys.executable, "-m", "llm_side.cli", "serve", "--model", model, "--engine", engine, "--host", "127.0.0.1",
           "--port", str(port), "--threads", str(threads or os.cpu_count() or 1), "--n-ctx", str(n_ctx),
           "--alias", alias]
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)

        def failed(why: str) -> ServerFailed:
            log.seek(0)
            return ServerFailed(f"muse-llm serve --engine {engine} --model {model} {why}: "
                                f"{' '.join(log.read()[-400:].split())}")

        try:
            deadline = time.monotonic() + ready_s
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            while True:
                if proc.poll() is not None:
                    raise failed(f"exited with code {proc.returncode}")
                try:
                    with opener.open(url + "/models", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise failed(f"was not ready at {url} after {ready_s:g} s") from None
                    time.sleep(0.5)
            yield f"openai:{url}:{alias}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    p = ArgumentParser(prog="muse-llm serve", description=__doc__.split("\n\n")[0])
    from llm_side.backends import DEFAULT_MODEL, default_model

    p.add_argument("--model", default=default_model(),
                   help=f"qwen0.5b | qwen1.5b | smollm2 | gemma270m | gguf:FILE | hf:DIR (a trained actor; "
                        f"transformers only) (default: env MUSE_LLM_MODEL, "
                        f"else {DEFAULT_MODEL})")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="llama.cpp (fast on a CPU: keeps the prompt's KV cache; MUSE_SETUP_SERVER=1 builds it) | "
                        "transformers (transformers serve, nothing to compile) | auto: llama.cpp where installed")
    p.add_argument("--alias", default=None,
                   help="the name clients pass in openai:URL:NAME (default: the packaged model's name, the GGUF "
                        "file's stem or the folder's name)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--n-ctx", type=int, default=N_CTX, help=f"context size in tokens, llama.cpp only (default {N_CTX})")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--print-only", action="store_true", help="print the server command instead of running it")
    a = p.parse_args(argv)
    cwd = None
    env = dict(os.environ)
    try:
        if a.n_ctx < 2048 or a.threads < 1 or not 0 < a.port < 65536:
            raise ValueError("--n-ctx must be >= 2048 (the 2-shot ALFWorld prompt alone is ~1600 tokens), "
                             "--threads >= 1 and --port in 1-65535")
        if a.alias is not None:
            check_alias(a.alias)
        engine = resolve_engine(a.engine, check_installed=not a.print_only, model=a.model)
        if engine == "llama.cpp":
            gguf, alias = resolve_gguf(a.model)
            alias = check_alias(a.alias or alias)
            cmd = server_argv(gguf, alias, host=a.host, port=a.port, n_ctx=a.n_ctx, threads=a.threads)
            what = f"{gguf} with llama.cpp (n_ctx {a.n_ctx}, {a.threads} threads)"
            served = {"engine": engine, "model": a.model, "alias": alias, "threads": a.threads, "n_ctx": a.n_ctx,
                      "device": "cpu"}  # server_argv offloads no layers
        else:
            model_dir, alias = transformers_model(a.model)
            alias = check_alias(a.alias or alias)
            cwd = served_folder(model_dir, alias)
            cmd = transformers_argv(alias, host=a.host, port=a.port)
            env.update(OMP_NUM_THREADS=str(a.threads), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
            what = f"{model_dir} with transformers ({a.threads} threads)"
            served = {"engine": engine, "model": a.model, "alias": alias, "threads": a.threads,
                      "device": transformers_device()}
        if a.print_only:
            print((f"cd {cwd} && " if cwd else "") + " ".join(cmd))
            return 0
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"muse-llm serve: error: {exc}", file=sys.stderr)
        return 2
    print(f"serving {what} as '{alias}' on http://{a.host}:{a.port}/v1; "
          f"run agents with --model openai:http://{a.host}:{a.port}/v1:{alias}", file=sys.stderr, flush=True)
    record_serving(a.host, a.port, served)  # this process id stays the server's through execve
    if cwd is not None:
        os.chdir(cwd)
    os.execve(cmd[0], cmd, env)  # the server replaces this process: Ctrl-C and kill reach it directly
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
