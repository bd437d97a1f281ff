"""The errors of `muse-wm` a user can act on: each message is one line naming the cause and the fix.

`muse-wm` prints these as `muse-wm: error: ...` (exit 2: fix the command) or `muse-wm: stopped: ...`
(exit 1: the run stopped; finished work is kept). Config errors live with the config
(`muse_jax.config.ConfigError`).
"""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """Base class of checkpoint problems a user can act on."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint does not fit what was asked for: another model size or layout, or another agent kind."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint file is missing, truncated or damaged."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No finished checkpoint where one was expected."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (disk full, read-only); the previous one is intact."""


class NonFiniteLossError(FloatingPointError):
    """A loss became NaN/inf; the message names it and the train step."""
