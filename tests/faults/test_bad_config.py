"""Fault 4: bad configuration fails before any work starts, naming the key and what is allowed.

Checked through the real `muse-wm` / `muse-llm` CLIs: exit code 2, one `error:` line, no traceback,
and no run folder content (nothing was started).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_helpers import cli, no_traceback

CLI_SETS = [
    # (override, words the message must contain); each costs one CLI start, so only four
    ("model.no_such_key=3", ["model.no_such_key"]),
    ("regulation.horizon=-3", ["regulation.horizon", "-3", ">= 1"]),
    ("regulation.beta=nan", ["regulation.beta", "finite"]),
    ("model.competence_quantiles=0", ["model.competence_quantiles", "N >= 1"]),
]
MORE_SETS = [
    ("model.deter=big", ["model.deter", "integer"]),
    ("regulation.strategy=telepathy", ["regulation.strategy", "gradient"]),
    ("model.size=size3m", ["model.size", "size1m"]),
    ("replay.capacity=4", ["replay.capacity", "seq_len"]),
    ("train.env_steps", ["key=value"]),
    # values a run used to accept and then fail on much later (or never notice)
    ("behavior.actent=nan", ["behavior.actent", "finite number >= 0"]),
    ("behavior.slow_rate=5", ["behavior.slow_rate", "0 < slow_rate <= 1"]),
    ("replay.batch_size=1e9", ["replay.batch_size", "replay.capacity", "fit in the replay"]),
    ("train.seed=-1", ["train.seed", "-1", "from 0 to"]),
    ("model.mlp_layers=-1", ["model.mlp_layers", ">= 1"]),
]


@pytest.mark.slow
@pytest.mark.parametrize(("override", "words"), CLI_SETS, ids=[o for o, _ in CLI_SETS])
def test_muse_wm_rejects_bad_override_before_work(tmp_path: Path, override: str, words: list[str]) -> None:
    logdir = tmp_path / "run"
    proc = cli("muse-wm", "pretrain", "--config", "smoke", "--set", override, "--logdir", str(logdir), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    no_traceback(proc.stderr)
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith("muse-wm: error:"), proc.stderr
    for w in words:
        assert w in err, f"{w!r} missing from: {err}"
    assert not logdir.exists() or not any(logdir.rglob("*")), "work started despite a bad config"


@pytest.mark.parametrize(("override", "words"), MORE_SETS, ids=[o for o, _ in MORE_SETS])
def test_load_config_rejects_bad_override(override: str, words: list[str]) -> None:
    """The same checks the CLI runs, in-process (cheap) for the remaining kinds of bad value."""
    from muse_jax.config import ConfigError, load_config

    with pytest.raises(ConfigError) as info:
        load_config("smoke", [override])
    for w in words:
        assert w in str(info.value), f"{w!r} missing from: {info.value}"


@pytest.mark.slow
def test_muse_wm_missing_config_file_names_choices(tmp_path: Path) -> None:
    proc = cli("muse-wm", "pretrain", "--config", str(tmp_path / "nope.yaml"), "--logdir", str(tmp_path / "r"))
    assert proc.returncode == 2
    no_traceback(proc.stderr)
    assert "nope.yaml" in proc.stderr and "smoke" in proc.stderr


@pytest.mark.slow
def test_muse_wm_adapt_missing_checkpoint_path(tmp_path: Path) -> None:
    missing = tmp_path / "no_run"
    proc = cli("muse-wm", "adapt", "--checkpoint", str(missing), "--agent", "muse", "--logdir", str(tmp_path / "o"))
    assert proc.returncode == 2
    no_traceback(proc.stderr)
    assert str(missing) in proc.stderr and "does not exist" in proc.stderr


@pytest.mark.slow
def test_muse_llm_missing_data_path(tmp_path: Path) -> None:
    missing = tmp_path / "no_alfworld_data"
    proc = cli("muse-llm", "tasks", "--env", "alfworld", "--env-opt", f"data={missing}")
    assert proc.returncode != 0
    no_traceback(proc.stderr)
    assert "no_alfworld_data" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_muse_llm_unknown_env_option(tmp_path: Path) -> None:
    proc = cli("muse-llm", "tasks", "--env", "minecraft", "--env-opt", "colour=blue")
    assert proc.returncode != 0
    no_traceback(proc.stderr)
    assert "colour" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_muse_llm_unknown_agent_names_choices(tmp_path: Path) -> None:
    proc = cli("muse-llm", "run", "--env", "minecraft", "--agent", "oracle", "--model", "smollm2",
               "--out", str(tmp_path / "o"), "--no-progress")
    assert proc.returncode != 0
    no_traceback(proc.stderr)
    assert "oracle" in proc.stderr and "react" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "o" / "episodes.jsonl").exists()
