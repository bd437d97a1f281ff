"""Opening a run's checkpoints read-only (adapt, evaluation) prints no orbax notices; real warnings still do."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from muse_jax.checkpoint import Checkpointer


def test_read_only_open_logs_nothing_but_other_warnings_pass(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    with Checkpointer(tmp_path, keep=2) as ck:
        ck.save(1, {"w": np.ones(3, np.float32)}, meta={"counters": {"env_steps": 1}})
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="absl"), Checkpointer(tmp_path, read_only=True) as ck:
        assert ck.read_meta()["counters"] == {"env_steps": 1}
        logging.getLogger("absl").warning("Given directory is read only=%s, but this one is %s", tmp_path, "real")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [f"Given directory is read only={tmp_path}, but this one is real"], warnings
