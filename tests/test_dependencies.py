"""Dependencies point one way (docs/architecture.md): model <- loops -> infra -> muse_common <- llm_side.

Checked from the source text and import statements, plus real imports in a fresh interpreter, which
also see what a module pulls in through the modules it imports: what `import muse_common` pulls in is
what a user of either half pays for, and the model (with its config) must load without an env stack.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JAX_STACK = ("jax", "jaxlib", "flax", "optax", "orbax")
TORCH_STACK = ("torch", "transformers", "peft", "trl")
MODEL = ("nets", "dists", "rssm", "world_model", "competence", "behavior", "regulation", "agent")
"""muse_jax modules that hold the model: pure functions and modules, no I/O, no loops."""
INFRA = ("checkpoint", "orbax_quiet", "orbax_one_process", "run_log", "parallel", "errors")
"""muse_jax infrastructure: storage, logging, devices. Never imports the model."""


def python_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """Every module an `import` / `from ... import` statement in `path` names (anywhere in the file)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def offenders(package: str, banned: tuple[str, ...]) -> list[str]:
    """`file: module` for each import in `package` of a module under one of the `banned` prefixes."""
    bad = []
    for path in python_files(package):
        for mod in imported_modules(path):
            if any(mod == b or mod.startswith(b + ".") for b in banned):
                bad.append(f"{path.relative_to(ROOT)}: {mod}")
    return sorted(bad)


def test_muse_common_imports_neither_half_nor_their_frameworks():
    assert offenders("muse_common", (*JAX_STACK, *TORCH_STACK, "muse_jax", "llm_side")) == []
    watched = (*JAX_STACK, *TORCH_STACK, "muse_jax", "llm_side")
    code = ("import importlib, pkgutil, sys, muse_common\n"
            "for m in pkgutil.walk_packages(muse_common.__path__, 'muse_common.'):\n"
            "    importlib.import_module(m.name)\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({watched!r})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def test_muse_jax_never_mentions_llm_side_nor_imports_torch():
    mentions = [str(p.relative_to(ROOT)) for p in python_files("muse_jax") if "llm_side" in p.read_text()]
    assert mentions == []
    assert offenders("muse_jax", ("llm_side", *TORCH_STACK)) == []


def test_llm_side_never_imports_jax_or_muse_jax():
    assert offenders("llm_side", (*JAX_STACK, "muse_jax")) == []


@pytest.mark.parametrize("module", INFRA)
def test_infrastructure_never_imports_the_model_or_the_loops(module):
    path = ROOT / "muse_jax" / f"{module}.py"
    banned = tuple(f"muse_jax.{m}" for m in (*MODEL, "loops", "evaluate", "cli"))
    bad = [m for m in imported_modules(path) if any(m == b or m.startswith(b + ".") for b in banned)]
    assert bad == [], f"{module}.py imports {bad}"


@pytest.mark.parametrize("module", MODEL)
def test_the_model_never_imports_loops_storage_or_logging(module):
    """(`agent.make_train_step` may lay its jitted step out over a device mesh with `parallel`.)"""
    path = ROOT / "muse_jax" / f"{module}.py"
    paths = [path] if path.exists() else python_files(f"muse_jax/{module}")
    banned = tuple(f"muse_jax.{m}" for m in ("checkpoint", "run_log", "errors", "loops", "evaluate", "cli", "envs"))
    bad = [m for p in paths for m in imported_modules(p) if any(m == b or m.startswith(b + ".") for b in banned)]
    assert bad == [], f"{module} imports {bad}"


ENV_STACK = ("gymnasium", "mujoco", "metaworld")


def _fresh_import(modules: list[str]) -> list[str]:
    """Top-level packages in sys.modules after importing `modules` (and every submodule of a package)."""
    code = ("import importlib, pkgutil, sys\n"
            f"for name in {modules!r}:\n"
            "    mod = importlib.import_module(name)\n"
            "    for m in pkgutil.walk_packages(getattr(mod, '__path__', []), name + '.'):\n"
            "        importlib.import_module(m.name)\n"
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_the_model_and_its_config_load_without_envs_or_torch():
    """Transitively, not only by direct imports: the config once pulled gymnasium into every model module
    through the env's task lists."""
    loaded = _fresh_import([f"muse_jax.{m}" for m in (*MODEL, "config")])
    assert "jax" in loaded  # the import did happen
    assert sorted(set(loaded) & {*ENV_STACK, *TORCH_STACK, "llm_side"}) == []


LLM_COMMANDS = ("cli", "sweep", "compare")
"""`muse-llm` subcommand modules: each builds its runs with llm_side.run_spec and runs them through the
harness; `cli` reaches `sweep-tau` and `compare` only by name, when that subcommand is asked for."""


@pytest.mark.parametrize("module", LLM_COMMANDS)
def test_llm_commands_do_not_import_one_another(module):
    others = [f"llm_side.{m}" for m in LLM_COMMANDS if m != module]
    direct = [m for m in imported_modules(ROOT / "llm_side" / f"{module}.py")
              if any(m == o or m.startswith(o + ".") for o in others)]
    assert direct == [], f"llm_side/{module}.py imports {direct}"
    code = f"import sys, llm_side.{module}; print(' '.join(m for m in {others!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"importing llm_side.{module} imports {out.stdout.strip()}"
