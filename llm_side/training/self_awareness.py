"""Pre-deployment training of M_sa (Algorithm 3, 'use all data in memory buffer to train M_sa').

Input: runner records (episodes.jsonl of the Reflexion collection run). Output folder: the MLP
weights + meta (see `agents.self_awareness`), `replay.jsonl` (the training chunks, replayed during
deployment adaptation) and `train_metrics.json`. Everything is written atomically, the metrics file
last, so its presence marks a finished stage.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from llm_side.agents import self_awareness as sa
from llm_side.agents.base import cached
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


def loop_control(chunk: str) -> float:
    """The control score of a chunk, with no training: minus the share of its steps that ALFWorld answered
    'Nothing happens.' (a failing small model repeats actions that do nothing). M_sa must beat this to have
    learned more than loop detection."""
    steps = [line for line in chunk.split("\n") if line.startswith(">")]
    return -chunk.count(LOOP_ANSWER) / max(len(steps), 1)


def without_chunk(examples: Iterable[sa.SAExample]) -> list[sa.SAExample]:
    """Every example's chunk (with its plan) blanked. With the task input off too (`msa_without_input`), M_sa
    can learn only its training data's share of won chunks. On novel games it scores every chunk alike (AUROC
    0.5); in `leave_one_game_out` it measures what the folds alone do to a pooled AUROC: holding out a won
    game lowers the fold's share of wins, so an M_sa that reads nothing scores the won game's chunks below the
    lost games' (AUROC below 0.5)."""
    return [dataclasses.replace(e, chunk="") for e in examples]


@dataclasses.dataclass(frozen=True)
class Variant:
    """One M_sa input scored side by side with the others."""

    task_input: bool
    """`SelfAwarenessModel(task_input=...)`: off is the model `alfworld-pipeline --sa-without-task` trains (the
    MLP sees one constant task embedding); a score that rises without it on novel games says the task input
    told train games apart rather than progress."""
    view: Callable[[list[sa.SAExample]], list[sa.SAExample]] = list
    """What the examples show the model (`without_chunk`: nothing of the episode)."""


VARIANTS: dict[str, Variant] = {
    "msa": Variant(task_input=True),
    "msa_without_task": Variant(task_input=False),
    "msa_without_input": Variant(task_input=False, view=without_chunk)}
"""The M_sa inputs scored side by side: the paper's (chunk + plan, task), the ablation without the task (the
model's own flag, as `--sa-without-task` trains it), and the one without any input (the folds' base rate)."""


def _fit_and_score(train: list[sa.SAExample], test: list[sa.SAExample], embedder: Embedder, *, epochs: int,
                   lr: float, hidden: int, seed: int) -> dict[str, list[float]]:
    """Each variant's M_sa trained on `train` (as `train_msa` does) scoring `test`, and the control's scores."""
    out: dict[str, list[float]] = {}
    for name, variant in VARIANTS.items():
        model = sa.SelfAwarenessModel(embedder, hidden=hidden, seed=seed, task_input=variant.task_input)
        model.fit(variant.view(train), epochs=epochs, lr=lr, seed=seed)
        rows = variant.view(test)
        out[name] = [float(x) for x in model.predict([e.task for e in rows], [e.chunk for e in rows])]
    out["control"] = [loop_control(e.chunk) for e in test]
    return out


def _auroc_summary(scores: dict[str, list[float]], labels: list[bool], groups: list[str],
                   seed: int) -> dict[str, Any]:
    """AUROC of each scoring with its game-resampled 95% interval, each M_sa variant minus the control and each
    ablation minus the paper's M_sa, paired on the same resampled games (`metrics.auroc_difference_by_group`)."""
    out: dict[str, Any] = {}
    for name, values in scores.items():
        lo, hi = metrics.auroc_interval_by_group(values, labels, groups, seed=seed)
        out[name] = {"auroc": metrics.auroc(values, labels), "auroc_ci95": [lo, hi]}
        for other in ("control", "msa"):
            if name not in ("control", other) and other in scores:
                d, dlo, dhi = metrics.auroc_difference_by_group(values, scores[other], labels, groups, seed=seed)
                out[name][f"minus_{other}"] = {"auroc": d, "ci95": [dlo, dhi]}
    out["control"]["what"] = "minus the share of the chunk's steps answered 'Nothing happens.'"
    return out


def leave_one_game_out(records: Iterable[dict[str, Any]], embedder: Embedder, *, epochs: int = 30,
                       lr: float = 1e-3, hidden: int = 256, seed: int = 0) -> dict[str, Any]:
    """M_sa on games it has not seen (paper 000 §4.2.2 scores M_sa on novel tasks): for each game, an M_sa
    trained as `train_msa` does on the other games' chunks scores that game's chunks; the AUROC is over all
    games' chunks pooled, with a 95% interval from resampling games (`auroc_interval_by_group`), beside the
    same for `loop_control` and for the ablations (`VARIANTS`). A fold whose training games hold one outcome
    class is left out and counted. Pooling folds biases the AUROC downwards (`without_chunk` says why and
    measures by how much): with few games, read M_sa against its `msa_without_input` row, or use
    `novel_games`, which trains once and has no folds."""
    records = [r for r in records if r.get("actions")]
    games = sorted({str(r["task"]) for r in records})
    memo = cached(embedder)
    scores: dict[str, list[float]] = {}
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
        for name, values in _fit_and_score(train, test, memo, epochs=epochs, lr=lr, hidden=hidden,
                                           seed=seed).items():
            scores.setdefault(name, []).extend(values)
        labels.extend(e.label > 0.5 for e in test)
        groups.extend([game] * len(test))
    won = sorted({g for g, y in zip(groups, labels, strict=True) if y})
    out: dict[str, Any] = {"games": len(games), "folds": len(set(groups)), "folds_one_class_train": skipped,
                           "games_won": len(won), "chunks": len(labels), "positive": sum(labels)}
    if not scores:
        scores = {name: [] for name in (*VARIANTS, "control")}
    return {**out, **_auroc_summary(scores, labels, groups, seed)}


def check_novel(train_records: Iterable[dict[str, Any]], test_records: Iterable[dict[str, Any]], *,
                train_from: str = "the train records", test_from: str = "the test records") -> None:
    """Refuses (one-line ValueError) test episodes on a game M_sa trains on: their score would not be a
    novel-game score. `train_from`/`test_from` name where the records came from in the message."""
    shared = {str(r["task"]) for r in train_records} & {str(r["task"]) for r in test_records}
    if shared:
        raise ValueError(f"{len(shared)} game(s) of {test_from} are also train games of {train_from} (e.g. "
                         f"{sorted(shared)[0]}); novel-game scores need a run on games M_sa was not trained on")


def novel_games(train_records: Iterable[dict[str, Any]], test_records: Iterable[dict[str, Any]],
                embedder: Embedder, *, epochs: int = 30, lr: float = 1e-3, hidden: int = 256,
                seed: int = 0) -> dict[str, Any]:
    """M_sa trained on the whole collection (`train_records`, the train games) scoring the chunks of episodes
    played on other games (`test_records`, e.g. an agent's run on eval_out_of_distribution games): the
    novel-task self-awareness of paper 000 §4.2.2, beside `loop_control` and the ablation without the task
    input, with intervals from resampling the test games. Test games that are also train games are refused:
    they would not be novel."""
    train_records = [r for r in train_records if r.get("actions")]
    test_records = [r for r in test_records if r.get("actions")]
    check_novel(train_records, test_records)
    train = sa.examples_from_records(train_records)
    test = sa.examples_from_records(test_records)
    if len({e.label > 0.5 for e in train}) < 2:
        raise ValueError("the train records hold one outcome class only: M_sa would learn a constant.")
    groups = [g for r in test_records for g in [str(r["task"])] * len(sa.examples_from_record(r))]
    labels = [e.label > 0.5 for e in test]
    scores = _fit_and_score(train, test, cached(embedder), epochs=epochs, lr=lr, hidden=hidden,
                            seed=seed)
    counts = {"train_games": len({str(r["task"]) for r in train_records}), "train_chunks": len(train),
              "train_positive": sum(e.label > 0.5 for e in train), "games": len(set(groups)),
              "games_won": len({g for g, y in zip(groups, labels, strict=True) if y}), "episodes": len(test_records),
              "chunks": len(test), "positive": sum(labels)}
    return {**counts, **_auroc_summary(scores, labels, groups, seed)}


def train_msa(records: Iterable[dict[str, Any]], embedder: Embedder, out_dir: str | Path, *, epochs: int = 30,
              lr: float = 1e-3, hidden: int = 256, val_fraction: float = 0.0, seed: int = 0,
              allow_one_class: bool = False, task_input: bool = True,
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit M_sa on the chunks of `records` and save it to `out_dir`; returns the metrics written (with
    `extra`, e.g. `leave_one_game_out`'s, in the same file). `task_input=False` trains the variant without
    the task input (`SelfAwarenessModel`; not the paper's M_sa: benchmarks/msa_novel.py measures both).
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
    model = sa.SelfAwarenessModel(embedder, hidden=hidden, seed=seed, task_input=task_input)
    before = model.loss(train)
    history = model.fit(train, epochs=epochs, lr=lr, seed=seed)
    out = Path(out_dir)
    model.save(out)
    atomic_write_jsonl(out / REPLAY_FILE, ({"task": e.task, "plan": e.plan, "chunk": e.chunk, "label": e.label}
                                              for e in train))
    result = {"examples": len(train), "positive": sum(e.label for e in train), "loss_before": before,
              "loss_history": history, "train": evaluate(model, train), "val": evaluate(model, val),
              "embedder": embedder.name, "task_input": task_input, **(extra or {})}
    atomic_write_json(out / METRICS_FILE, result)
    return result
