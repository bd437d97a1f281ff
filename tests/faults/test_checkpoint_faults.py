"""Fault 3: a truncated checkpoint, one of another model size, or one of another config fails at load
in `muse-wm adapt` with ONE line naming the file and the first mismatched parameter
(path, expected shape, found shape): exit code 2, no pytree traceback.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from fault_helpers import cli, no_traceback


def _copy(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst


def _latest(run: Path) -> Path:
    return max((p for p in (run / "checkpoints").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def _adapt(run: Path, tmp_path: Path, *sets: str) -> str:
    args = ["adapt", "--checkpoint", str(run), "--agent", "muse", "--tasks", "coffee-button-v3",
            "--episodes", "1", "--logdir", str(tmp_path / "out")]
    for s in sets:
        args += ["--set", s]
    proc = cli("muse-wm", *args, timeout=300)
    no_traceback(proc.stderr)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("muse-wm: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


@pytest.mark.slow
def test_truncated_checkpoint_names_the_file(tmp_path: Path, pretrained_run: Path) -> None:
    run = _copy(pretrained_run, tmp_path)
    files = [p for p in (_latest(run) / "state").rglob("*") if p.is_file() and p.stat().st_size > 64]
    victim = max(files, key=lambda p: p.stat().st_size)
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    err = _adapt(run, tmp_path)
    assert str(victim) in err and "truncated" in err, err


@pytest.mark.slow
def test_checkpoint_with_missing_file_names_it(tmp_path: Path, pretrained_run: Path) -> None:
    run = _copy(pretrained_run, tmp_path)
    victim = _latest(run) / "manifest" / "metadata"
    victim.unlink()
    err = _adapt(run, tmp_path)
    assert str(victim) in err and "missing" in err, err


@pytest.mark.slow
@pytest.mark.parametrize(("override", "key"), [("model.deter=64", "model.deter=32"),
                                               ("model.competence_quantiles=3", "model.competence_quantiles=5")],
                         ids=["other-model-size", "other-config"])
def test_adapt_model_override_names_the_key_and_both_values(tmp_path: Path, pretrained_run: Path, override: str,
                                                             key: str) -> None:
    """A `--set model.*` that disagrees with the checkpoint: refused before anything is built."""
    err = _adapt(pretrained_run, tmp_path, override)
    assert str(_latest(pretrained_run)) in err and "does not fit" in err, err
    assert f"{key} (--set gives {override.split('=')[1]})" in err, err


@pytest.mark.slow
def test_checkpoint_of_other_observation_spec_names_first_mismatch(tmp_path: Path, pretrained_run: Path) -> None:
    """A non-model setting that reshapes the networks (images on a proprio-only run) fails at restore with
    the first mismatched parameter (path, expected shape, found shape)."""
    err = _adapt(pretrained_run, tmp_path, "env.image=true")
    assert str(_latest(pretrained_run)) in err, err
    assert re.search(r"parameter '([^']+)'", err), err
    assert "pytree" not in err.lower() and "Custom node type mismatch" not in err
