"""A synthetic episode for the replay and label tests (`from episode_helpers import make_episode`)."""

from __future__ import annotations

import numpy as np


def make_episode(length: int, tag: float = 0.0, success_at: int | None = None,
                 proprio: int = 3) -> tuple[dict, np.ndarray]:
    """One episode's arrays and its per-step success flags (True from `success_at` on, never if None).

    `tag` marks the episode: its rewards are `tag` and its proprio starts at `tag` and counts up by step,
    so a test can tell episodes and steps apart after a round trip.
    """
    ep = {
        "proprio": np.full((length, proprio), tag, np.float32) + np.arange(length, dtype=np.float32)[:, None],
        "task_id": np.full(length, 1, np.int32),
        "action": np.zeros((length, 4), np.float32),
        "reward": np.full(length, tag, np.float32),
        "is_first": np.arange(length) == 0,
        "is_terminal": np.zeros(length, bool),
    }
    success = np.zeros(length, bool)
    if success_at is not None:
        success[success_at:] = True
    return ep, success
