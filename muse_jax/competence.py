"""Self-awareness targets of MUSE §3.1.1: time-to-success quantile labels and the competence score.

With time to success k and episode length L, component i (1..N) is 1 iff k <= (N+1-i)·L/N.
Success within the first quantile gives all ones, success in the last quantile only the first
component, failure (k = -1) all zeros. Competence = sum of the N predicted probabilities (0..N).

Reading (MUSE §3.1.1 leaves it open), the config's `model.competence_reading`:
- `steps_left` (the default, what every run before the setting did): k counts the steps LEFT from the
  current step to the first success ("time-to-success" from where the agent stands), so every step of a
  solved episode gets its own quantile class and the labels tighten as the success nears.
- `from_start`: k is the success time measured from the episode START (the first success's step index),
  the same label at every step of the episode, the steps after the first success included.
psi_1 ("succeeds within the time limit") is identical under both, so Table 1's accuracy target is too;
psi_2..psi_N, the competence sum's AUROC and the quantile accuracy differ.

Measured on one run each (quickstart, MUSE, seed 0; docs/competence_reading_quickstart.json), the figures on
docs/experiments/competence-reading.md, generated from that file. One seed: a measurement, not a conclusion.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def competence_labels(steps_left: jax.Array | np.ndarray, max_steps: int, n: int) -> jax.Array:
    """[...] steps-to-success labels (-1 = never) -> [..., n] float32 labels in {0, 1}."""
    if max_steps < 1:
        raise ValueError(f"competence_labels: max_steps={max_steps} must be >= 1 (the episode length L).")
    if n < 1:
        raise ValueError(f"competence_labels: n={n} must be >= 1 (model.competence_quantiles).")
    k = jnp.asarray(steps_left, jnp.float32)[..., None]
    i = jnp.arange(1, n + 1, dtype=jnp.float32)
    thresholds = (n + 1 - i) * max_steps / n  # L, (N-1)L/N, ..., L/N
    success = k >= 0
    return jnp.logical_and(success, k <= thresholds).astype(jnp.float32)


def agent_steps_per_episode(env_cfg) -> int:
    """L in agent steps: an episode of `max_episode_steps` env steps has ceil(max / action_repeat) actions.

    Time-to-success labels count agent steps (replay indices), so the quantile thresholds must too.
    """
    return -(-int(env_cfg.max_episode_steps) // int(env_cfg.action_repeat))


def competence(probs: jax.Array) -> jax.Array:
    """Competence score: the sum of the N success-quantile probabilities (0..N)."""
    return probs.sum(-1)


READINGS = ("steps_left", "from_start")
"""The two readings of the time to success (module docstring; config `model.competence_reading`)."""


def steps_to_success(success_T: np.ndarray, reading: str = "steps_left") -> np.ndarray:
    """Per-step time-to-success labels of one episode (`success_T`: its boolean success flags), all -1 if
    it never succeeds. A helper for replay writers; `competence_labels` turns them into the N targets.

    `steps_left`: steps until the episode's first success, 0 at it and after it (steps after the first
    success count as already succeeded, which is how MUSE labels a solved episode).
    `from_start`: the first success's step index (steps from the episode start) at every step, those after
    the first success included: the episode has one label, its success time.
    """
    if reading not in READINGS:
        raise ValueError(f"steps_to_success: reading={reading!r} is not one of {READINGS} "
                         "(model.competence_reading).")
    success_T = np.asarray(success_T, bool)
    out = np.full(success_T.shape, -1.0, np.float32)
    hits = np.flatnonzero(success_T)
    if hits.size:
        first = int(hits[0])
        if reading == "from_start":
            out[:] = float(first)
        else:
            out[: first + 1] = first - np.arange(first + 1)
            out[first + 1 :] = 0.0
    return out
