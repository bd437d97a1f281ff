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


def train_msa(records: Iterable[dict[str, Any]], embedder: Embedder, out_dir: str | Path, *, epochs: int = 30,
              lr: float = 1e-3, hidden: int = 256, val_fraction: float = 0.0, seed: int = 0,
              allow_one_class: bool = False) -> dict[str, Any]:
    """Fit M_sa on the chunks of `records` and save it to `out_dir`; returns the metrics written.
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
              "embedder": embedder.name}
    atomic_write_json(out / METRICS_FILE, result)
    return result
