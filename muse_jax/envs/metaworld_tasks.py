"""The Meta-World task lists of MUSE §3.2.1, apart from the env code so that the run config
(`muse_jax.config.schema`) can name them without importing gymnasium or mujoco."""

from __future__ import annotations

MT10_TASKS: tuple[str, ...] = (
    "reach-v3",
    "push-v3",
    "pick-place-v3",
    "door-open-v3",
    "drawer-open-v3",
    "drawer-close-v3",
    "button-press-topdown-v3",
    "peg-insert-side-v3",
    "window-open-v3",
    "window-close-v3",
)
"""Pre-deployment training set (MUSE §3.2.1, Meta-World MT10)."""

NOVEL_TASKS: tuple[str, ...] = (
    "button-press-topdown-wall-v3",
    "soccer-v3",
    "push-wall-v3",
    "push-back-v3",  # the paper's "push-block"
    "coffee-button-v3",
    "plate-slide-v3",
    "peg-unplug-side-v3",
    "lever-pull-v3",
    "handle-press-v3",
    "door-unlock-v3",
)
"""Deployment (novel) set of MUSE Figure 4. Meta-World has no "push-block"; push-back is that task."""
