"""Whole-suite settings: the test LLM as default model, offline model hubs, and one on-disk XLA
compilation cache shared by every test process (the CLI tests start subprocesses that would each
recompile the same train step)."""

import gc
import os
import tempfile
from pathlib import Path

import pytest

# Why: the suite's time is mostly XLA compiling tiny models; at backend optimisation level 0 that takes about
# half as long (tests/muse_jax/test_rssm.py: 140 s -> 70 s). Results differ from the default level only in the
# last bits of float32 rounding, so a test comparing two programs' floats allows a few ulps. Subprocesses inherit it.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(tempfile.gettempdir()) / "muse-jax-tests-xla-cache"))
try:  # the suite's own process compiles without that cache; its subprocesses inherit the variable and use it
    import jax

    # Why: in two full-suite runs (never alone) writing the image world model's step to the cache segfaulted
    # inside jaxlib 0.10.2's `executable.serialize()`; the in-process jit cache serves the suite anyway.
    jax.config.update("jax_enable_compilation_cache", False)
except ImportError:  # an install without the world-model extra
    pass
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUSE_LLM_MODEL", "smollm2")  # the installed test model; qwen0.5b is the `models` extra
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _memory_mappings() -> tuple[int, int]:
    """(mappings this process holds, the kernel's limit per process), or (0, 0) where /proc cannot tell."""
    try:
        with open("/proc/self/maps", "rb") as f:
            held = sum(1 for _ in f)
        return held, int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return 0, 0


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code_when_mappings_run_high():
    """Drop every compiled XLA executable when a test module ends with a third of the process's memory
    mappings used (or where /proc cannot tell).

    Why: each CPU executable holds a handful of memory mappings, and the kernel allows 65,530 per
    process (`vm.max_map_count`). The whole suite compiles thousands of programs in one process, and
    at ~96% of it XLA's compiler aborted or segfaulted in two fresh-clone CI runs (never in a module
    run alone). Releasing them only when the count runs high lets later modules reuse the train steps
    earlier ones compiled for the same model (memo_jit), instead of recompiling them module by module.
    """
    yield
    try:
        import jax
    except ImportError:
        return
    held, limit = _memory_mappings()
    if not limit or held > limit // 3:
        jax.clear_caches()
    gc.collect()
