"""Metrics shared by both sides (the JAX world-model agent imports this too): pure functions of
numpy arrays, no torch, no jax.

Self-awareness is scored as in MUSE §3.2.2: every step's prediction is compared with its episode's
final outcome (success = 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn import metrics as skm

from muse_common.files import atomic_save_figure


def success_rate(successes: Sequence[bool]) -> float:
    """Fraction of successful episodes (nan for none)."""
    s = np.asarray(successes, dtype=float)
    return float(s.mean()) if s.size else float("nan")


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (sound at 0/n and n/n, unlike the normal one); (nan, nan)
    for n = 0."""
    if n <= 0:
        return float("nan"), float("nan")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar (sign) test p-value of paired outcomes from the discordant counts: episodes
    only A won against episodes only B won (1.0 when there are none)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def mean_time_to_success(steps: Sequence[int], successes: Sequence[bool], penalty: int | None = None) -> float:
    """Mean steps to success. With `penalty`, failures count as that many steps (the MUSE-LLM
    tables use 100); without it, only successful episodes are averaged (nan if none)."""
    st = np.asarray(steps, dtype=float)
    ok = np.asarray(successes, dtype=bool)
    if penalty is not None:
        st = np.where(ok, st, float(penalty))
        return float(st.mean()) if st.size else float("nan")
    return float(st[ok].mean()) if ok.any() else float("nan")


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve; nan when only one class is present (undefined)."""
    y = np.asarray(labels, dtype=int)
    if y.size == 0 or y.min() == y.max():
        return float("nan")
    return float(skm.roc_auc_score(y, np.asarray(scores, dtype=float)))


def rank_auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """ROC AUC as the Mann-Whitney statistic over mid-ranks (ties count one half): the value of `auroc`
    (scikit-learn), without its per-call checks, for the thousands of calls of a bootstrap."""
    from scipy.stats import rankdata

    y = np.asarray(labels, bool)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = rankdata(np.asarray(scores, float))
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _group_resamples(labels: np.ndarray, groups: Sequence[Any], draws: int, seed: int) -> list[np.ndarray]:
    """Row indices of `draws` cluster-bootstrap samples (whole groups drawn with replacement), keeping only
    those that hold both classes; none when fewer than two groups."""
    keys = list(dict.fromkeys(groups))
    if len(keys) < 2:
        return []
    index = {k: np.flatnonzero(np.asarray([g == k for g in groups])) for k in keys}
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(draws):
        rows = np.concatenate([index[keys[i]] for i in rng.integers(0, len(keys), len(keys))])
        if labels[rows].min() != labels[rows].max():
            samples.append(rows)
    return samples


def _percentiles(values: list[float], level: float) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    tail = (1 - level) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def auroc_interval_by_group(scores: Sequence[float], labels: Sequence[bool], groups: Sequence[Any], *,
                            draws: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """A `level` percentile interval of the AUROC from resampling whole groups with replacement (a cluster
    bootstrap): chunks of one game or episode are not independent, so resampling chunks would be too narrow.
    Draws with one class only are skipped; (nan, nan) when fewer than two groups or no draw has both."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    return _percentiles([rank_auroc(s[r], y[r]) for r in _group_resamples(y, groups, draws, seed)], level)


def auroc_difference_by_group(scores_a: Sequence[float], scores_b: Sequence[float], labels: Sequence[bool],
                              groups: Sequence[Any], *, draws: int = 2000, seed: int = 0,
                              level: float = 0.95) -> tuple[float, float, float]:
    """AUROC(a) - AUROC(b) of two scorings of the same rows, with a paired `level` interval: each cluster
    bootstrap draw (as `auroc_interval_by_group`) scores both on the same resampled groups, so what the two
    share (which games were drawn) cancels. Returns (difference, low, high); nan where undefined."""
    a, b = np.asarray(scores_a, dtype=float), np.asarray(scores_b, dtype=float)
    y = np.asarray(labels, dtype=int)
    if not len(a) == len(b) == len(y):
        raise ValueError(f"two scorings of the same rows are needed: got {len(a)}, {len(b)} scores, {len(y)} labels")
    diffs = [rank_auroc(a[r], y[r]) - rank_auroc(b[r], y[r])
             for r in _group_resamples(y, groups, draws, seed)]
    return (auroc(a, labels) - auroc(b, labels), *_percentiles(diffs, level))


def accuracy(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> float:
    """Accuracy of `score > threshold` as a success prediction."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    if s.size == 0:
        return float("nan")
    return float(skm.accuracy_score(y, s > threshold))


def median_threshold(scores: Sequence[float]) -> float:
    """Threshold at the median of the predictions (how MUSE scores Dreamer's critic values)."""
    s = np.asarray(scores, dtype=float)
    return float(np.median(s)) if s.size else float("nan")


def roc_points(scores: Sequence[float], labels: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """(false positive rate, true positive rate) of the ROC curve."""
    y = np.asarray(labels, dtype=int)
    if y.size == 0 or y.min() == y.max():
        return np.array([0.0, 1.0]), np.array([0.0, 1.0])
    fpr, tpr, _ = skm.roc_curve(y, np.asarray(scores, dtype=float))
    return fpr, tpr


def plot_roc(curves: dict[str, tuple[Sequence[float], Sequence[bool]]], path: str | Path, title: str = "") -> Path:
    """Save ROC curves, one per name (MUSE Figure 5 / Table 4 style) to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for name, (scores, labels) in curves.items():
        fpr, tpr = roc_points(scores, labels)
        ax.plot(fpr, tpr, label=f"{name} (AUROC {auroc(scores, labels):.2f})")
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set_xlabel("False positive rate")
    ax.set_ylabel("True positive rate")
    ax.set_title(title or "Self-awareness ROC")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return atomic_save_figure(fig, path)
