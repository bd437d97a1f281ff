"""Self-awareness targets of MUSE §3.1.1: time-to-success quantile labels and the competence score.

With k steps left until success and episode length L, component i (1..N) is 1 iff k <= (N+1-i)·L/N.
Success within the first quantile gives all ones, success in the last quantile only the first
component, failure (k = -1) all zeros. Competence = sum of the N predicted probabilities (0..N).

Reading (MUSE §3.1.1 leaves it open): k counts the steps LEFT from the current step to the first success
("time-to-success" from where the agent stands), so every step of a solved episode gets its own quantile
class and the labels tighten as the success nears. The other reading takes the quantile of the success
time measured from the episode START, the same label at every step of an episode. psi_1 ("succeeds within
the time limit") is identical under both, so Table 1's accuracy is too; psi_2..psi_N, the competence sum's
AUROC and the quantile accuracy differ. The other reading is not implemented (its effect is not measured).
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


def steps_to_success(success_T: np.ndarray) -> np.ndarray:
    """Per-step labels: steps until the episode's first success (0 at it and after it), all -1 if none.

    A helper for replay writers: `success_T` is one episode's boolean success flags. Steps after the
    first success count as already succeeded (0), which is how MUSE labels a solved episode.
    """
    success_T = np.asarray(success_T, bool)
    out = np.full(success_T.shape, -1.0, np.float32)
    hits = np.flatnonzero(success_T)
    if hits.size:
        first = int(hits[0])
        out[: first + 1] = first - np.arange(first + 1)
        out[first + 1 :] = 0.0
    return out
