"""The package installs from a wheel and `muse-wm pretrain --config smoke` runs from outside the repository.

Offline: the wheel is built without build isolation from a copy of the sources, installed with
`--no-deps --no-index` into a fresh venv whose dependencies come from this venv's site-packages (one
`.pth` line), and the command runs from an empty folder with no PYTHONPATH, so the named config must come
from the installed package, not from the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "muse_common", "muse_jax", "llm_side")
TINY = ("train.env_steps=80", "train.prefill=30", "train.log_every=40", "train.save_every=40",
        "train.train_ratio=16", "replay.capacity=2000", "replay.seq_len=8", "env.max_episode_steps=20")
# seq_len 8: training starts once replay holds one batch (B * T = 32 env steps, sampled from the first
# finished episodes at env step 42)


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the wheel installed; returns its bin/ folder."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(REPO / name, src / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(tmp / "dist"), str(src)])
    (wheel,) = (tmp / "dist").glob("muse_jax-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "deps_from_dev_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
          "--ignore-installed", "-q", str(wheel)])
    return venv / "bin"


def _outside_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # JAX_COMPILATION_CACHE_DIR stays the suite's (tests/conftest.py): a second run skips most compiling
    env.update(JAX_PLATFORMS="cpu", TQDM_DISABLE="1", PYTHONUNBUFFERED="1", HOME=str(tmp))
    return env


@pytest.mark.slow
def test_wheel_ships_the_named_configs(installed: Path, tmp_path: Path) -> None:
    code = ("import muse_jax.config as c; print(c.CONFIG_DIR); print(','.join(c.named_configs())); "
            "print(c.load_config('smoke').name)")
    out = _run([str(installed / "python"), "-c", code], cwd=tmp_path, env=_outside_env(tmp_path)).stdout.split()
    assert Path(out[0]).is_relative_to(installed.parent), f"muse_jax imported from {out[0]}, not the wheel"
    assert {"smoke", "quickstart", "paper"} <= set(out[1].split(",")) and out[2] == "smoke"


@pytest.mark.slow
def test_muse_wm_pretrain_smoke_from_another_folder(installed: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    sets = [a for kv in TINY for a in ("--set", kv)]
    _run([str(installed / "muse-wm"), "pretrain", "--config", "smoke", *sets, "--logdir", "run"], cwd=work,
         env=_outside_env(tmp_path), timeout=600)
    rows = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["env_steps"] == 80 and rows[-1]["train_steps"] > 0
    assert any(p.name.isdigit() for p in (work / "run" / "checkpoints").iterdir())
