"""The Self-Awareness Model M_sa of MUSE-LLM (paper 000, §4.1.3, Algorithm 2).

y_pred = sigmoid(g_eta(concat(M(tau, P^e), M(I)))): a frozen sentence encoder M embeds the
trajectory chunk together with the episode's initial plan, and the task text; a small MLP g_eta maps
the concatenation to a success probability, trained with binary cross-entropy on chunks of four
action-observation pairs labelled with their episode's outcome. Only the MLP is trained (also during
deployment adaptation), so embeddings are cached by text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from llm_side.agents.base import cached
from llm_side.harness.contracts import Embedder
from muse_common.files import RunFileError, atomic_write_json, read_json_object

CHUNK_PAIRS = 4
THRESHOLD = 0.5
META_FILE = "msa_meta.json"
MAX_HIDDEN = 1 << 16
"""The widest hidden layer a saved M_sa may name (the default is 256): a larger width is not a model this
project wrote, and would only make loading allocate without bound."""
WEIGHTS_FILE = "msa_mlp.pt"


@dataclasses.dataclass(frozen=True)
class SAExample:
    """One training row of Algorithm 2: (I, P^e, tau, y)."""

    task: str
    plan: str
    chunk: str
    label: float


def chunk_text(plan: str, pairs: Sequence[tuple[str, str]]) -> str:
    """The text M embeds for a chunk: the plan, then '> action\\nobservation' lines."""
    body = "".join(f"> {a}\n{o}\n" for a, o in pairs)
    return (f"Plan: {plan.strip()}\n" if plan.strip() else "") + body


def chunks(pairs: Sequence[tuple[str, str]], size: int = CHUNK_PAIRS) -> list[list[tuple[str, str]]]:
    """Non-overlapping chunks of `size` pairs (the last one may be shorter)."""
    return [list(pairs[i:i + size]) for i in range(0, len(pairs), size)]


def episode_plan(actions: Sequence[str]) -> str:
    """P^e: the first 'think:' of the episode (the ReAct plan), or '' if the agent never planned."""
    for a in actions:
        if a.lower().startswith("think:"):
            return a[len("think:"):].strip()
    return ""


def examples_from_record(record: dict[str, Any]) -> list[SAExample]:
    """Chunks of one runner record (needs `actions`, `observations`, `task_text`, `success`)."""
    actions = list(record.get("actions") or [])
    observations = list(record.get("observations") or [])
    if len(actions) != len(observations):
        raise ValueError(f"record of task {record.get('task')} has {len(actions)} actions but "
                         f"{len(observations)} observations; was it written by llm_side.harness.runner?")
    plan = episode_plan(actions)
    task = record.get("task_text") or str(record.get("task", ""))
    label = 1.0 if record.get("success") else 0.0
    pairs = list(zip(actions, observations, strict=True))
    return [SAExample(task, plan, chunk_text(plan, c), label) for c in chunks(pairs)]


def examples_from_records(records: Iterable[dict[str, Any]]) -> list[SAExample]:
    out: list[SAExample] = []
    for r in records:
        out.extend(examples_from_record(r))
    return out


class SelfAwarenessModel:
    """Frozen embedder + trainable MLP. `predict` gives success probabilities in [0, 1]."""

    def __init__(self, embedder: Embedder, *, hidden: int = 256, seed: int = 0, task_input: bool = True):
        self.embedder = cached(embedder)
        self.hidden = int(hidden)
        self.task_input = bool(task_input)
        torch.manual_seed(seed)
        d = int(embedder.dim)
        self.mlp = nn.Sequential(nn.Linear(2 * d, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    # -- features ----------------------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings (rows) of `texts`; the frozen encoder runs once per text (`CachedEmbedder`)."""
        return self.embedder.encode(texts)

    def features(self, tasks: Sequence[str], texts: Sequence[str]) -> torch.Tensor:
        """concat(M(tau, P^e), M(I)); with `task_input` off, M("") in place of every task (a constant: the
        variant that cannot tell games apart by their task text)."""
        s_NxD = self.embed(texts)
        z_NxD = self.embed(tasks if self.task_input else [""] * len(tasks))
        return torch.from_numpy(np.concatenate([s_NxD, z_NxD], axis=1))

    # -- inference ---------------------------------------------------------------------------------
    @torch.no_grad()
    def predict(self, tasks: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        if len(tasks) != len(texts):
            raise ValueError(f"predict needs one task per text, got {len(tasks)} tasks and {len(texts)} texts.")
        if not texts:
            return np.zeros(0, dtype=np.float32)
        self.mlp.eval()
        logits_N = self.mlp(self.features(tasks, texts)).squeeze(-1)
        return torch.sigmoid(logits_N).numpy()

    def score(self, task: str, plan: str, pairs: Sequence[tuple[str, str]]) -> float:
        return float(self.predict([task], [chunk_text(plan, pairs)])[0])

    # -- training ----------------------------------------------------------------------------------
    def fit(self, examples: Sequence[SAExample], *, epochs: int = 20, lr: float = 1e-3, batch_size: int = 64,
            seed: int = 0, weight_decay: float = 1e-4) -> list[float]:
        """Minimise BCE (Eq. 6) on `examples`; returns the mean loss of each epoch."""
        if not examples:
            raise ValueError("no M_sa training examples: collect episodes first (records with actions).")
        x_NxF = self.features([e.task for e in examples], [e.chunk for e in examples])
        y_N = torch.tensor([e.label for e in examples], dtype=torch.float32)
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.AdamW(self.mlp.parameters(), lr=lr, weight_decay=weight_decay)
        loss_fn = nn.BCEWithLogitsLoss()
        history = []
        self.mlp.train()
        for _ in range(epochs):
            perm = torch.randperm(len(y_N), generator=gen)
            total = 0.0
            for i in range(0, len(perm), batch_size):
                idx = perm[i:i + batch_size]
                loss = loss_fn(self.mlp(x_NxF[idx]).squeeze(-1), y_N[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(idx)
            history.append(total / len(perm))
        self.mlp.eval()
        return history

    @torch.no_grad()
    def loss(self, examples: Sequence[SAExample]) -> float:
        """Mean BCE on `examples` (for before/after comparisons)."""
        x_NxF = self.features([e.task for e in examples], [e.chunk for e in examples])
        y_N = torch.tensor([e.label for e in examples], dtype=torch.float32)
        return float(nn.functional.binary_cross_entropy_with_logits(self.mlp(x_NxF).squeeze(-1), y_N))

    # -- persistence -------------------------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Weights (torch.save, temp + rename) and a JSON meta naming the embedder and sizes."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / (WEIGHTS_FILE + ".tmp")
        torch.save(self.mlp.state_dict(), tmp)
        tmp.replace(folder / WEIGHTS_FILE)
        atomic_write_json(folder / META_FILE, {"embedder": self.embedder.name, "dim": int(self.embedder.dim),
                                               "hidden": self.hidden, "task_input": self.task_input,
                                               "format": 1})
        return folder

    @classmethod
    def load(cls, folder: str | Path, embedder: Embedder) -> SelfAwarenessModel:
        folder = Path(folder)
        meta_path = folder / META_FILE
        if not meta_path.is_file() or not (folder / WEIGHTS_FILE).is_file():
            raise FileNotFoundError(f"no M_sa model in {folder} (expected {META_FILE} and {WEIGHTS_FILE}); "
                                    "train one with `muse-llm alfworld-pipeline --stage train-sa`.")
        retrain = "retrain M_sa with `muse-llm alfworld-pipeline --stage train-sa`"
        meta = read_json_object(meta_path, "an M_sa meta file", retrain,
                                fields=(("embedder", str), ("dim", int), ("hidden", int)))
        if not 0 < meta["hidden"] <= MAX_HIDDEN:
            raise RunFileError(meta_path, "an M_sa meta file", f"'hidden' is {meta['hidden']}, not 1 to {MAX_HIDDEN}",
                               retrain)
        if meta.get("dim") != int(embedder.dim) or meta.get("embedder") != embedder.name:
            raise ValueError(
                f"M_sa in {folder} was trained on embedder '{meta.get('embedder')}' (dim {meta.get('dim')}) but "
                f"'{embedder.name}' (dim {embedder.dim}) is loaded; load the same embedder "
                "(MUSE_LLM_EMBEDDER / --agent-opt embedder=...) or retrain M_sa.")
        task_input = meta.get("task_input", True)  # absent in files written before the variant existed
        if not isinstance(task_input, bool):
            raise RunFileError(meta_path, "an M_sa meta file", f"'task_input' is {task_input!r}, not true or false",
                               retrain)
        model = cls(embedder, hidden=int(meta["hidden"]), task_input=task_input)
        model.mlp.load_state_dict(torch.load(folder / WEIGHTS_FILE, map_location="cpu", weights_only=True))
        model.mlp.eval()
        return model
