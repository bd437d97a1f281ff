"""What the transcript agents share (ReAct, Reflexion, MUSE, RefRea, CoT, SayCan): one episode's
few-shot head, task and (action, observation) steps, the prompt made from them, and the defaults of
the `Agent` contract (no memory across episodes, the invalid-action count as the episode's extra).
`LazyEmbedder` is the sentence embedder that SayCan, RefRea and Metagent-P load on first use.

The prompt (`TranscriptAgent.build_prompt`) is the ReAct ALFWorld layout: few-shot examples (or the
env's action help), the agent's memory block, "Here is the task.", the task line when the first
observation does not already state it (ScienceWorld's first observation is the room, not the task),
the first observation, then the most recent steps that fit the context budget and the cue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from llm_side.agents import prompting
from llm_side.harness.contracts import LLM, Embedder, EpisodeOutcome, Observation, TextEnv

REACT_INTRO = "Interact with the environment to solve a task. Here are some examples.\n"
GENERIC_INTRO = "Interact with the environment to solve a task.\n"


def few_shot_head(env: TextEnv | None, task_id: str) -> str:
    """Examples (or action help) for this task, from the env's optional hooks
    (`react_intro()`, `react_examples(task_id)`, `instructions()`)."""
    examples = getattr(env, "react_examples", None)
    if callable(examples):
        text = examples(task_id)
        if text:
            intro = getattr(env, "react_intro", None)
            return (intro() if callable(intro) else REACT_INTRO) + text.rstrip("\n") + "\n"
    instructions = getattr(env, "instructions", None)
    if callable(instructions):
        text = instructions()
        if text:
            return GENERIC_INTRO + text.rstrip("\n") + "\n" + prompting.generic_instructions()
    return prompting.generic_instructions()


class TranscriptAgent:
    """An LLM agent whose prompt is the episode's transcript. Subclasses write `act`; those with memory
    across episodes override `memory`/`load_memory` and `_memory_block`."""

    name = "transcript"

    def __init__(self, llm: LLM, *, max_tokens: int, context_tokens: int, temperature: float, seed: int | None):
        self.llm = llm
        self.max_tokens = max_tokens
        self.context_tokens = context_tokens
        self.temperature = temperature
        self.seed = seed
        self._start_transcript(None, "", Observation(text="", task=""))

    def _start_transcript(self, env: TextEnv | None, task_id: str, obs: Observation) -> None:
        self._env = env
        self._task_id = task_id
        self._task = obs.task.strip()
        self._first_obs = obs.text.strip()
        self._examples = few_shot_head(env, task_id) if env is not None else ""
        self._steps: list[tuple[str, str]] = []
        self._last_action: str | None = None
        self._invalid = 0
        self._t = 0  # act() calls so far this episode (subclasses count them)

    # -- episode lifecycle -------------------------------------------------------------------------
    def begin_episode(self, obs: Observation, *, task_id: str, episode: int, env: TextEnv) -> None:
        self._start_transcript(env, task_id, obs)

    def _record_observation(self, observation: str) -> None:
        """The observation that answered the last action closes that step of the transcript."""
        if self._last_action is not None:
            self._steps.append((self._last_action, observation.strip()))

    def _seed(self) -> int | None:
        """This step's sampling seed: `seed + t` (None: unseeded)."""
        return None if self.seed is None else self.seed + self._t

    def end_episode(self, outcome: EpisodeOutcome) -> None:
        self._env = None

    def episode_extras(self) -> dict[str, Any]:
        """What the runner does not record itself (it records actions, observations, task text)."""
        return {"invalid_actions": self._invalid}

    # -- the prompt --------------------------------------------------------------------------------
    def _memory_block(self) -> str:
        return ""

    def build_prompt(self, tail: str = ">", memory: str | None = None) -> str:
        """Examples + memory (`_memory_block()` unless given) + task + the most recent steps that fit
        + `tail` (the '>' cue of the next action by default)."""
        task = self._task + "\n" if self._task and self._task not in self._first_obs else ""
        head = (self._examples + (self._memory_block() if memory is None else memory) + "\nHere is the task.\n"
                + task + self._first_obs + "\n")
        lines = [prompting.format_steps([s]) for s in self._steps]
        return prompting.fit_to_budget(head, lines, tail, self.context_tokens)

    # -- memory (none by default) ------------------------------------------------------------------
    def memory(self) -> dict[str, Any]:
        return {}

    def load_memory(self, memory: dict[str, Any]) -> None:
        return None


class CachedEmbedder:
    """An embedder that encodes each text once: M_sa re-embeds the same task and chunks every epoch, fold and
    step, SayCan the same valid actions every step. Holds at most `max_texts` (the oldest half is dropped past
    it; a dropped text is encoded again when asked). `cached` wraps an embedder once, so models given the
    same CachedEmbedder share its memo."""

    def __init__(self, inner: Embedder, max_texts: int = 50_000):
        self.inner, self.name, self.dim, self.max_texts = inner, inner.name, inner.dim, int(max_texts)
        self._memo: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            self._memo.update(zip(missing, np.asarray(self.inner.encode(missing), dtype=np.float32), strict=True))
        rows_NxD = np.stack([self._memo[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)
        if len(self._memo) > self.max_texts:
            self._memo = dict(list(self._memo.items())[-(self.max_texts // 2):])
        return rows_NxD


def cached(embedder: Embedder) -> CachedEmbedder:
    """`embedder` with a memo (itself when it already has one)."""
    return embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(embedder)


class LazyEmbedder:
    """`self.embedder`: the one given, else the one named by `embedder_name` (the packaged MiniLM when
    None), loaded on first use so that runs that never embed do not pay for it."""

    _embedder: Embedder | None = None
    embedder_name: str | None = None

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from llm_side.backends import load_embedder

            self._embedder = load_embedder(self.embedder_name)
        return self._embedder
