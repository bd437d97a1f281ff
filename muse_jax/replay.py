"""Sequence replay: whole episodes in, uniformly sampled length-T chunks out.

Design choices (documented because DreamerV3 implementations differ):
- Storage is per finished episode, so each episode's `time_to_success` labels can be computed once
  its outcome is known (`add_episode`). Unfinished episodes are never sampled.
- Chunks never cross episode boundaries: a chunk start is drawn uniformly over every valid start
  position of every stored episode (longer episodes are proportionally more likely), so every step
  is equally likely to be replayed. Episodes shorter than T are kept out of sampling.
- Capacity is bounded in steps; when exceeded, whole episodes are evicted oldest first.
- `state_dict()` flattens everything into a few numpy arrays so checkpoints can save it and
  adaptation can start from the pre-training buffer (MUSE §3.2 retains it). That flat layout
  (`episode_lengths` + each key concatenated over episodes) is this module's: `pack_episodes` and
  `unpack_episodes` are the only readers and writers of it, for checkpoints of unfinished (pretrain)
  or new (adapt) episodes too.
- `time_to_success` is the stored name of the per-step competence labels (steps until the episode's
  first success, 0 at and after it, -1 throughout a failed episode; `competence.steps_to_success`; under
  `model.competence_reading: from_start` the first success's step index at every step instead),
  the key the world model's competence loss reads from a batch.
- Replay context (dreamerv3 `replay_context: 1`): episodes may carry the posterior latent the agent
  had at each step (`deter` float16 [T, D], `stoch` uint8 class indices [T, S]; the collector stores
  the acting-time posterior). A chunk starting at offset o > 0 then comes with `start_deter` /
  `start_stoch`, the latent after step o-1, and keeps its stored `is_first`, so the world model
  continues the episode's state instead of restarting from zeros mid-episode. As dreamerv3 does
  (`agent.train` returns `outs['replay']`, `replay.update`), every train step's posteriors are written
  back over the sampled chunk's stored latents (`write_back`, with the chunk positions `sample` keeps
  in `last_positions`), so chunks start from latents of a recent model, not from those of the
  random-init model that collected the prefill. Episodes added with `write_back=False` keep their
  latents (adaptation shares the retained pre-training episodes between tasks as read-only views).
  Without stored latents (or `context=False`) every chunk's first step is marked `is_first`.
- Online queue (dreamerv3 `replay.online: True`, `embodied/core/replay.py` `add`/`_sample`), optional
  (`online=True`): every stored episode's non-overlapping chunks (offsets 0, T, 2T, ...) are queued as
  it is added, and `sample` fills a batch from that queue first, uniformly only for the rows left, so
  every fresh chunk is trained on right after it arrives. Departures, stated: the official queues a
  chunk as soon as its steps are collected, across episode boundaries; here a chunk is queued when its
  episode ends (the competence labels need the outcome), within that episode. The queue is not part of
  `state_dict`: after a resume, sampling is uniform until the next episode is added (the official does
  not save it either). Chunks of evicted episodes are skipped.
- Unfinished episodes (dreamerv3 samples every step as soon as it is stored), optional: `set_unfinished`
  hands over the envs' episodes so far, which `sample` then draws from with the stored ones, uniformly
  over every valid start, until the next call. They are copies the caller made, never stored, written
  back, evicted or saved (a finished episode comes back through `add_episode`, a checkpoint keeps the
  collector's own), and their `time_to_success` is -1 throughout: the outcome is unknown, so only an
  agent without the competence loss may sample them (config `replay.unfinished`, Dreamer only).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np

from muse_jax.competence import steps_to_success

STEP_KEYS = ("action", "reward", "is_first", "is_terminal", "task_id")
"""Keys every stored step has; `image` and `proprio` are present when the observation has them."""
LATENT_KEYS = ("deter", "stoch")
"""Optional per-step posterior latents (replay context); never part of a sampled batch themselves."""


def step_bytes(image_shape: tuple[int, int, int] | None, proprio_dim: int | None, act_dim: int,
               deter: int = 0, stoch: int = 0) -> int:
    """Bytes one stored step takes (uint8 image, float32 vectors, bool flags, float16 deter, uint8 stoch)."""
    n = 0 if image_shape is None else int(np.prod(image_shape))
    n += 4 * (proprio_dim or 0)
    n += 4 * act_dim + 4 + 2 + 4 + 4  # action, reward, is_first/is_terminal, task_id, time_to_success
    n += 2 * deter + stoch
    return n


def latent_arrays(deter_BxD: np.ndarray, stoch_BxSxK: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Compact storage form of posterior latents: float16 deter, uint8 class index per categorical."""
    return np.asarray(deter_BxD, np.float16), np.asarray(stoch_BxSxK).argmax(-1).astype(np.uint8)


def pack_episodes(episodes: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Episodes ([T, ...] arrays each) as the flat layout: `episode_lengths` + every key all of them
    have, concatenated. No episodes: just an empty `episode_lengths`."""
    eps = list(episodes)
    out: dict[str, np.ndarray] = {"episode_lengths": np.array([len(ep["reward"]) for ep in eps], np.int64)}
    if eps:
        for k in eps[0]:
            if all(k in ep for ep in eps):  # latents stored by some episodes only are dropped
                out[k] = np.concatenate([np.asarray(ep[k]) for ep in eps])
    return out


def unpack_episodes(flat: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Inverse of `pack_episodes`: one dict of [T, ...] arrays (views, no copy) per episode."""
    if "episode_lengths" not in flat:
        raise ValueError("not a replay state: 'episode_lengths' is missing.")
    bounds = np.concatenate([[0], np.cumsum(np.asarray(flat["episode_lengths"], np.int64))]).tolist()
    keys = [k for k in flat if k not in ("episode_lengths", "meta")]
    return [{k: np.asarray(flat[k])[a:b] for k in keys} for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


class Replay:
    """Bounded FIFO of episodes with uniform chunk sampling."""

    def __init__(self, capacity: int, seq_len: int, seed: int = 0, context: bool = True,
                 online: bool = False) -> None:
        if capacity < seq_len:
            raise ValueError(f"replay capacity={capacity} must be >= seq_len={seq_len} (replay.capacity).")
        self.capacity, self.seq_len, self.context = int(capacity), int(seq_len), bool(context)
        self.online = bool(online)
        self._queue: deque[tuple[dict[str, np.ndarray], int]] = deque()
        """(episode, offset) of fresh chunks not yet sampled, oldest first (online mode only)."""
        self._episodes: deque[dict[str, np.ndarray]] = deque()
        self._steps = 0
        self._rng = np.random.default_rng(seed)
        self.episodes_added = 0
        self._read_only: set[int] = set()  # ids of episodes whose latents are shared views (no write-back)
        self._unfinished: list[dict[str, np.ndarray]] = []  # set_unfinished: sampled, never stored
        self.last_positions: list[tuple[dict[str, np.ndarray], int]] = []
        """(episode, offset) of each row of the latest `sample`, for `write_back`."""

    def __len__(self) -> int:
        """Stored steps."""
        return self._steps

    @property
    def num_episodes(self) -> int:
        return len(self._episodes)

    def nbytes(self) -> int:
        return sum(v.nbytes for ep in self._episodes for v in ep.values())

    def add_episode(self, episode: Mapping[str, np.ndarray], success_T: np.ndarray | None = None,
                    write_back: bool = True, reading: str = "steps_left") -> None:
        """Store one finished episode (arrays with a leading time axis).

        With `success_T` (per-step success flags) the `time_to_success` labels are computed here, under
        `reading` (`competence.steps_to_success`, config `model.competence_reading`); otherwise the
        episode must already carry them. `write_back=False`: its stored latents are never
        overwritten by `write_back` (arrays shared with other replays).
        """
        ep = {k: np.asarray(v) for k, v in episode.items()}
        if success_T is not None:
            ep["time_to_success"] = steps_to_success(success_T, reading)
        missing = [k for k in (*STEP_KEYS, "time_to_success") if k not in ep]
        if missing:
            raise ValueError(f"episode lacks keys {missing}; every step needs {STEP_KEYS} + time_to_success.")
        lengths = {k: len(v) for k, v in ep.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"episode arrays have different lengths: {lengths}.")
        length = next(iter(lengths.values()))
        if length > self.capacity:
            raise ValueError(f"an episode of {length} steps does not fit replay.capacity={self.capacity}.")
        ep["time_to_success"] = ep["time_to_success"].astype(np.float32)
        if write_back:  # own copies, so writing back never reaches the caller's arrays
            for k in LATENT_KEYS:
                if k in ep:
                    ep[k] = np.array(ep[k], copy=True)
        else:
            self._read_only.add(id(ep))
        self._episodes.append(ep)
        self._steps += length
        self.episodes_added += 1
        if self.online:
            self._queue.extend((ep, o) for o in range(0, length - self.seq_len + 1, self.seq_len))
        while self._steps > self.capacity:
            old = self._episodes.popleft()
            self._read_only.discard(id(old))
            self._steps -= len(old["reward"])

    def set_unfinished(self, episodes: Sequence[Mapping[str, np.ndarray]]) -> None:
        """The envs' unfinished episodes so far ([T, ...] arrays, the stored keys but `time_to_success`),
        sampled with the stored episodes until the next call (see the module docstring)."""
        self._unfinished = [{**{k: np.asarray(v) for k, v in ep.items()},
                             "time_to_success": np.full(len(ep["reward"]), -1.0, np.float32)} for ep in episodes]

    def _sampleable(self) -> list[dict[str, np.ndarray]]:
        return [*self._episodes, *self._unfinished]

    def _start_counts(self, eps: Sequence[Mapping[str, np.ndarray]]) -> np.ndarray:
        """Valid chunk starts per episode (0 for one shorter than T)."""
        return np.array([max(len(ep["reward"]) - self.seq_len + 1, 0) for ep in eps], np.int64)

    def num_starts(self) -> int:
        """Chunk start positions `sample` can draw from (dreamerv3's `len(replay)`: items, one per start)."""
        return int(self._start_counts(self._sampleable()).sum())

    def can_sample(self) -> bool:
        return any(len(ep["reward"]) >= self.seq_len for ep in self._sampleable())

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """B chunks of T consecutive steps from within single episodes, as [B, T, ...] arrays, plus
        `start_deter` [B, D] / `start_stoch` [B, S] (class indices) when replay context applies.
        Online mode: queued fresh chunks fill the first rows (see the module docstring)."""
        T = self.seq_len
        eps = self._sampleable()
        starts = self._start_counts(eps)
        total = int(starts.sum())
        if total == 0:
            raise ValueError(f"no stored episode has >= seq_len={T} steps yet; collect more before sampling.")
        fresh = self._pop_fresh(batch_size)
        flat = self._rng.integers(0, total, size=batch_size - len(fresh))
        bounds = np.cumsum(starts)
        idx = np.searchsorted(bounds, flat, side="right")
        offs_uniform = flat - (bounds[idx] - starts[idx])
        chosen = [ep for ep, _ in fresh] + [eps[i] for i in idx]
        offs = np.array([o for _, o in fresh] + [int(o) for o in offs_uniform], np.int64)
        self.last_positions = [(ep, int(o)) for ep, o in zip(chosen, offs, strict=True)]
        keys = [k for k in chosen[0] if k not in LATENT_KEYS]
        out = {k: np.stack([ep[k][o : o + T] for ep, o in zip(chosen, offs, strict=True)]) for k in keys}
        out["is_first"] = out["is_first"].copy()
        if self.context and all(k in ep for ep in chosen for k in LATENT_KEYS):
            prev = np.maximum(offs - 1, 0)
            out["start_deter"] = np.stack([ep["deter"][p] for ep, p in zip(chosen, prev, strict=True)])
            out["start_stoch"] = np.stack([ep["stoch"][p] for ep, p in zip(chosen, prev, strict=True)])
            at_start = offs == 0  # the episode's own first step: zeros, and is_first (already stored) resets
            out["start_deter"][at_start] = 0
            out["start_stoch"][at_start] = 0
            out["is_first"][at_start, 0] = True
        else:
            out["is_first"][:, 0] = True  # no stored latent: a chunk's first step starts the model state afresh
        return out

    def _pop_fresh(self, n: int) -> list[tuple[dict[str, np.ndarray], int]]:
        """Up to n queued fresh chunks of episodes still stored, oldest first."""
        live = {id(ep) for ep in self._episodes} if self._queue else set()
        out: list[tuple[dict[str, np.ndarray], int]] = []
        while self._queue and len(out) < n:
            ep, o = self._queue.popleft()
            if id(ep) in live:
                out.append((ep, o))
        return out

    def write_back(self, positions: Sequence[tuple[dict[str, np.ndarray], int]], deter_BxTxD: np.ndarray,
                   stoch_BxTxS: np.ndarray) -> int:
        """Store the training posteriors of a sampled batch (rows in `positions` order, from `last_positions`)
        over the chunks' latents; returns how many rows were written (evicted, latent-free or read-only
        episodes are skipped). `stoch` is class indices [B, T, S] (or one-hots [B, T, S, K])."""
        deter = np.asarray(deter_BxTxD, np.float16)
        stoch = np.asarray(stoch_BxTxS)
        if stoch.ndim == 4:
            stoch = stoch.argmax(-1)
        stoch = stoch.astype(np.uint8)
        live = {id(ep) for ep in self._episodes}
        n = 0
        for b, (ep, o) in enumerate(positions):
            if id(ep) not in live or id(ep) in self._read_only or "deter" not in ep:
                continue
            T = min(deter.shape[1], len(ep["deter"]) - o)
            ep["deter"][o : o + T] = deter[b, :T]
            ep["stoch"][o : o + T] = stoch[b, :T]
            n += 1
        return n

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything as flat numpy arrays: each key concatenated over episodes plus `episode_lengths`."""
        out = pack_episodes(self._episodes)
        out["meta"] = np.array([self.capacity, self.seq_len, self.episodes_added], np.int64)
        return out

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Inverse of `state_dict`; the current capacity applies (oldest episodes evicted if smaller)."""
        episodes = unpack_episodes(state)
        self._episodes.clear()
        self._steps = 0
        for ep in episodes:
            self.add_episode(ep)
        self._queue.clear()  # restored episodes are not fresh
        self.episodes_added = int(np.asarray(state["meta"])[2]) if "meta" in state else len(episodes)
