"""Pre-deployment training of M_sa (Algorithm 3, 'use all data in memory buffer to train M_sa').

Input: runner records (episodes.jsonl of the Reflexion collection run). Output folder: the MLP
weights + meta (see `agents.self_awareness`), `replay.jsonl` (the training chunks, replayed during
deployment adaptation) and `train_metrics.json`. Everything is written atomically, the metrics file
last, so its presence marks a finished stage.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llm_side.agents import self_awareness as sa
from llm_side.agents.muse import REPLAY_FILE
from llm_side.harness.contracts import Embedder
from muse_common import metrics
from muse_common.files import atomic_write_json, atomic_write_jsonl

METRICS_FILE = "train_metrics.json"


def split_by_task(records: list[dict[str, Any]], val_fraction: float, seed: int) -> tuple[list, list]:
    """Hold out whole tasks (not chunks) so validation AUROC measures transfer to unseen tasks."""
    tasks = sorted({str(r["task"]) for r in records})
    rng = random.Random(seed)
    rng.shuffle(tasks)
    n_val = int(round(len(tasks) * val_fraction)) if len(tasks) > 1 else 0
    val = set(tasks[:n_val])
    return [r for r in records if str(r["task"]) not in val], [r for r in records if str(r["task"]) in val]


def evaluate(model: sa.SelfAwarenessModel, examples: list[sa.SAExample]) -> dict[str, float]:
    """Chunk-wise accuracy (threshold 0.5) and AUROC, as paper 000 §4.2.2 scores self-awareness."""
    if not examples:
        return {"n": 0, "auroc": float("nan"), "accuracy": float("nan"), "loss": float("nan")}
    scores = model.predict([e.task for e in examples], [e.chunk for e in examples])
    labels = [e.label > 0.5 for e in examples]
    return {"n": len(examples), "auroc": metrics.auroc(scores, labels),
            "accuracy": metrics.accuracy(scores, labels, sa.THRESHOLD), "loss": model.loss(examples)}


LOOP_ANSWER = "Nothing happens."
"""ALFWorld's answer to an action that does nothing: the control below counts it."""


class _CachedEmbedder:
    """An embedder that encodes each text once across the folds of `leave_one_game_out`."""

    def __init__(self, inner: Embedder):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self._memo: dict[str, Any] = {}

    def encode(self, texts: Any) -> Any:
        import numpy as np

        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            self._memo.update(zip(missing, np.asarray(self.inner.encode(missing), dtype=np.float32), strict=True))
        return np.stack([self._memo[t] for t in texts])


def loop_control(chunk: str) -> float:
    """The control score of a chunk, with no training: minus the share of its steps that ALFWorld answered
    'Nothing happens.' (a failing small model repeats actions that do nothing). M_sa must beat this to have
    learned more than loop detection."""
    steps = [line for line in chunk.split("\n") if line.startswith(">")]
    return -chunk.count(LOOP_ANSWER) / max(len(steps), 1)


def leave_one_game_out(records: Iterable[dict[str, Any]], embedder: Embedder, *, epochs: int = 30,
                       lr: float = 1e-3, hidden: int = 256, seed: int = 0) -> dict[str, Any]:
    """M_sa on games it has not seen (paper 000 §4.2.2 scores M_sa on novel tasks): for each game, an M_sa
    trained as `train_msa` does on the other games' chunks scores that game's chunks; the AUROC is over all
    games' chunks pooled, with a 95% interval from resampling games (`auroc_interval_by_group`), beside the
    same for `loop_control`. A fold whose training games hold one outcome class is left out and counted."""
    records = [r for r in records if r.get("actions")]
    games = sorted({str(r["task"]) for r in records})
    cached = _CachedEmbedder(embedder)
    scores: list[float] = []
    control: list[float] = []
    labels: list[bool] = []
    groups: list[str] = []
    skipped = 0
    for game in games:
        train = sa.examples_from_records(r for r in records if str(r["task"]) != game)
        test = sa.examples_from_records(r for r in records if str(r["task"]) == game)
        if not test:
            continue
        if len({e.label > 0.5 for e in train}) < 2:
            skipped += 1
            continue
        model = sa.SelfAwarenessModel(cached, hidden=hidden, seed=seed)
        model.fit(train, epochs=epochs, lr=lr, seed=seed)
        scores.extend(float(x) for x in model.predict([e.task for e in test], [e.chunk for e in test]))
        control.extend(loop_control(e.chunk) for e in test)
        labels.extend(e.label > 0.5 for e in test)
        groups.extend([game] * len(test))
    won = sorted({g for g, y in zip(groups, labels, strict=True) if y})
    out: dict[str, Any] = {"games": len(games), "folds": len(set(groups)), "folds_one_class_train": skipped,
                           "games_won": len(won), "chunks": len(labels), "positive": sum(labels)}
    for name, values in (("msa", scores), ("control", control)):
        lo, hi = metrics.auroc_interval_by_group(values, labels, groups, seed=seed)
        out[name] = {"auroc": metrics.auroc(values, labels), "auroc_ci95": [lo, hi]}
    out["control"]["what"] = "minus the share of the chunk's steps answered 'Nothing happens.'"
    return out


def train_msa(records: Iterable[dict[str, Any]], embedder: Embedder, out_dir: str | Path, *, epochs: int = 30,
              lr: float = 1e-3, hidden: int = 256, val_fraction: float = 0.0, seed: int = 0,
              allow_one_class: bool = False, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit M_sa on the chunks of `records` and save it to `out_dir`; returns the metrics written (with
    `extra`, e.g. `leave_one_game_out`'s, in the same file).
    Chunks of one outcome class only are refused (unless `allow_one_class`): M_sa would learn the
    constant and report accuracy 1.0 while telling nothing apart."""
    records = [r for r in records if r.get("actions")]
    train_recs, val_recs = split_by_task(records, val_fraction, seed)
    train = sa.examples_from_records(train_recs)
    val = sa.examples_from_records(val_recs)
    if not train:
        raise ValueError("no trajectories to train M_sa on: the collection run recorded no actions.")
    positive = sum(e.label > 0.5 for e in train)
    if not allow_one_class and positive in (0, len(train)):
        kind = "failed" if positive == 0 else "successful"
        raise ValueError(f"M_sa training data has one class only: all {len(train)} chunks come from {kind} "
                         "episodes, so M_sa would learn a constant (accuracy 1.0, no information); collect both "
                         "outcomes (alfworld-pipeline seeds successes with ALFWorld's expert: --expert-share).")
    model = sa.SelfAwarenessModel(embedder, hidden=hidden, seed=seed)
    before = model.loss(train)
    history = model.fit(train, epochs=epochs, lr=lr, seed=seed)
    out = Path(out_dir)
    model.save(out)
    atomic_write_jsonl(out / REPLAY_FILE, ({"task": e.task, "plan": e.plan, "chunk": e.chunk, "label": e.label}
                                              for e in train))
    result = {"examples": len(train), "positive": sum(e.label for e in train), "loss_before": before,
              "loss_history": history, "train": evaluate(model, train), "val": evaluate(model, val),
              "embedder": embedder.name, **(extra or {})}
    atomic_write_json(out / METRICS_FILE, result)
    return result
