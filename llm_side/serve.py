"""`muse-llm serve`: llama.cpp's OpenAI-compatible server (llama-cpp-python) on a packaged GGUF model.

    muse-llm serve --model qwen0.5b            # then: muse-llm run ... --model openai:http://127.0.0.1:8080/v1:qwen0.5b

The fast local path on a CPU: the server keeps the prompt's KV cache between calls, so a ReAct step on
an ALFWorld game takes seconds instead of the tens of seconds in-process transformers needs on 2 cores.
Split packages (qwen0.5b, qwen1.5b, gemma270m) are joined once into MUSE_LLM_CACHE/gguf/ (sha256
checked) before the server starts; `gguf:FILE` serves any GGUF file.

Context size (`--n-ctx`, default N_CTX): llama.cpp's own default of 2048 is too small. Measured with the
Qwen2.5 tokenizer, the 2-shot ALFWorld ReAct head alone is 1110-1566 tokens (SmolLM2: 1168-1645), the
examples run 2.7-2.9 characters a token, so the agents' prompt budget (`context_tokens=6000` estimated at
4 characters a token, i.e. 24,000 characters) can reach ~8,900 real tokens; 12288 holds that plus one
generation. Threads default to all cores (llama-cpp-python's own default is 1).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from muse_common.arg_parser import ArgumentParser

N_CTX = 12288
DEFAULT_PORT = 8080


def resolve_gguf(spec: str) -> tuple[Path, str]:
    """(GGUF path, model alias) for a packaged model name or `gguf:FILE`; split packages are joined."""
    from llm_side.backends import models

    spec = spec.strip()
    if spec.startswith("gguf:"):
        path = Path(spec[5:]).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {path} not found; pass gguf:/path/to/model.gguf")
        return path, path.stem
    if spec not in models.MODELS:
        raise ValueError(f"muse-llm serve takes a packaged model ({', '.join(sorted(models.MODELS))}) or "
                         f"gguf:FILE, got '{spec}'")
    from llm_side.backends.local import cache_root

    return models.locate_gguf(models.MODELS[spec], join_dir=cache_root() / "gguf"), spec


def server_argv(gguf: Path, alias: str, *, host: str, port: int, n_ctx: int, threads: int) -> list[str]:
    """The llama-cpp-python server command line."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
            "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--host", host, "--port", str(port)]


def main(argv: Sequence[str] | None = None) -> int:
    p = ArgumentParser(prog="muse-llm serve", description=__doc__.split("\n\n")[0])
    from llm_side.backends import DEFAULT_MODEL, default_model

    p.add_argument("--model", default=default_model(),
                   help=f"qwen0.5b | qwen1.5b | smollm2 | gemma270m | gguf:FILE (default: env MUSE_LLM_MODEL, "
                        f"else {DEFAULT_MODEL})")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--n-ctx", type=int, default=N_CTX, help=f"context size in tokens (default {N_CTX})")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--print-only", action="store_true", help="print the server command instead of running it")
    a = p.parse_args(argv)
    try:
        if a.n_ctx < 2048 or a.threads < 1 or not 0 < a.port < 65536:
            raise ValueError("--n-ctx must be >= 2048 (the 2-shot ALFWorld prompt alone is ~1600 tokens), "
                             "--threads >= 1 and --port in 1-65535")
        gguf, alias = resolve_gguf(a.model)
        cmd = server_argv(gguf, alias, host=a.host, port=a.port, n_ctx=a.n_ctx, threads=a.threads)
        if a.print_only:
            print(" ".join(cmd))
            return 0
        import importlib.util

        if importlib.util.find_spec("llama_cpp") is None:
            raise RuntimeError("llama-cpp-python is not installed: run MUSE_SETUP_SERVER=1 bash scripts/setup.sh "
                               "(it builds llama-cpp-python[server] portably, ~10 minutes on 2 cores)")
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"muse-llm serve: error: {exc}", file=sys.stderr)
        return 2
    print(f"serving {gguf} as '{alias}' on http://{a.host}:{a.port}/v1 (n_ctx {a.n_ctx}, {a.threads} threads); "
          f"run agents with --model openai:http://{a.host}:{a.port}/v1:{alias}", file=sys.stderr, flush=True)
    os.execv(cmd[0], cmd)  # the server replaces this process: Ctrl-C and kill reach it directly
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
