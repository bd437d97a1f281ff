"""The CoT and SayCan baselines of the RefRea paper's Table 1 (ReAct and Reflexion live in react.py /
reflexion.py). Both are env-generic and memoryless.

CoT (Wei et al. 2022): one LLM call per step that reasons first and ends with 'Action: ...'.

SayCan (Ahn et al. 2022, as the RefRea paper sets it up): the LLM proposes its top-5 actions (5
samples; 'think:' lines only count when there is nothing else); every valid action a is scored by
relevance(a) x value(a), where relevance is the highest cosine similarity between a and a proposal
under the sentence embedder (paraphrase-MiniLM in the paper, the packaged MiniLM here), and value is
the affordance/value term: `value=heuristic` (default) discounts actions already taken this episode,
1 / (1 + times taken), so the agent does not loop; `value=llm` asks the LLM to rate the
`value_top_k` most relevant actions 0-9 and uses (r + 1) / 10.
The valid actions come from the step's admissible list or, if absent, `env.admissible_actions()`;
without any, the most frequent proposal is executed.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from llm_side.agents import prompting
from llm_side.agents.base import CachedEmbedder, LazyEmbedder, TranscriptAgent
from llm_side.harness.contracts import LLM, Decision, Embedder, Observation, TextEnv
from muse_common.settings import build_options, integer_at_least, number_at_least, setting

_ACTION_RE = re.compile(
    r"(?:^|\n)\s*(?:\*\*)?\s*(?:next\s+)?action\s*(?:\*\*)?\s*[:=]\s*(?:\*\*)?(?P<a>[^\n]*)", re.I)
_RATING_RE = re.compile(r"\b([0-9])\b")


def parse_cot(text: str | None) -> prompting.ParsedAction:
    """The action after the last 'Action:' of a chain-of-thought reply; invalid (never raises) when
    there is none or it is unusable."""
    if not isinstance(text, str):
        return prompting.ParsedAction("", invalid="no text")
    matches = list(_ACTION_RE.finditer(text))
    if not matches:
        return prompting.ParsedAction("", invalid="no 'Action:' line")
    return prompting.parse_action(matches[-1].group("a"))


def parse_rating(text: str | None) -> int | None:
    """First digit 0-9 of a value reply, or None."""
    m = _RATING_RE.search(text or "")
    return int(m.group(1)) if m else None


def saycan_scores(relevance_V: np.ndarray, value_V: np.ndarray) -> np.ndarray:
    """Combined SayCan score per valid action: relevance x value."""
    return np.asarray(relevance_V, dtype=np.float64) * np.asarray(value_V, dtype=np.float64)


def heuristic_value(actions: Sequence[str], taken: Counter) -> np.ndarray:
    """1 / (1 + times the action was already taken this episode)."""
    return np.array([1.0 / (1.0 + taken[a]) for a in actions], dtype=np.float64)


COT_CUE = ("\nThink step by step about what to do next, then give exactly one action on a final line "
           "that starts with 'Action:'.\nThought:")


class CoTAgent(TranscriptAgent):
    """Think, then act, in a single LLM call per step."""

    name = "cot"

    def __init__(self, llm: LLM, *, max_tokens: int = 128, context_tokens: int = 3000, temperature: float = 0.0,
                 seed: int | None = 0):
        super().__init__(llm, max_tokens=max_tokens, context_tokens=context_tokens, temperature=temperature,
                         seed=seed)

    def act(self, observation: str, admissible_actions: list[str] | None) -> Decision:
        self._record_observation(observation)
        text = self.llm.complete(self.build_prompt(COT_CUE), n=1, temperature=self.temperature,
                                 max_tokens=self.max_tokens, stop=["\n\n\n"], seed=self._seed())[0]
        parsed = parse_cot(text)
        info: dict[str, Any] = {"thought": (text or "")[:400]}
        if parsed.invalid:
            self._invalid += 1
            info["invalid"] = parsed.invalid
        self._last_action = parsed.action or "(invalid output)"
        self._t += 1
        return Decision(action=parsed.action, info=info)


VALUE_PROMPT = ("Task: {task}\nLast observation: {obs}\nHow useful is the action '{action}' for the task right "
                "now? Answer with one digit from 0 (useless) to 9 (essential).\nRating:")


class SayCanAgent(TranscriptAgent, LazyEmbedder):
    """Rerank the valid actions by similarity to the LLM's top-5 proposals times a value term."""

    name = "saycan"

    def __init__(self, llm: LLM, *, embedder: Embedder | None = None, embedder_name: str | None = None,
                 n_candidates: int = 5, value: str = "heuristic", value_top_k: int = 5, max_tokens: int = 32,
                 context_tokens: int = 3000, temperature: float = 0.8, seed: int | None = 0):
        if value not in ("heuristic", "llm"):
            raise ValueError(f"saycan value={value!r}: use 'heuristic' or 'llm'.")
        if n_candidates < 1:
            raise ValueError(f"n_candidates must be >= 1, got {n_candidates}.")
        super().__init__(llm, max_tokens=max_tokens, context_tokens=context_tokens, temperature=temperature,
                         seed=seed)
        self._embedder, self.embedder_name = embedder, embedder_name
        self.n_candidates, self.value, self.value_top_k = n_candidates, value, value_top_k
        self._taken: Counter = Counter()
        self._memo: CachedEmbedder | None = None

    def begin_episode(self, obs: Observation, *, task_id: str, episode: int, env: TextEnv) -> None:
        super().begin_episode(obs, task_id=task_id, episode=episode, env=env)
        self._taken = Counter()

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings with a per-agent memo (the valid-action set repeats from step to step)."""
        if self._memo is None:
            self._memo = CachedEmbedder(self.embedder)
        return self._memo.encode(texts) if texts else np.zeros((0, 1), np.float32)

    def _llm_value(self, actions: Sequence[str], observation: str) -> np.ndarray:
        out = []
        for a in actions:
            reply = self.llm.complete(VALUE_PROMPT.format(task=self._task, obs=observation[:300], action=a),
                                      n=1, temperature=0.0, max_tokens=3, seed=self._seed())[0]
            r = parse_rating(reply)
            out.append(0.5 if r is None else (r + 1) / 10.0)
        return np.array(out, dtype=np.float64)

    def act(self, observation: str, admissible_actions: list[str] | None) -> Decision:
        self._record_observation(observation)
        texts = self.llm.complete(self.build_prompt(), n=self.n_candidates, temperature=self.temperature,
                                  max_tokens=self.max_tokens, stop=["\n"], seed=self._seed())
        parsed = [p for p in map(prompting.parse_action, texts) if p.action]
        # thoughts are not actions; they still carry intent when the model proposes nothing else
        proposals = [p.action for p in parsed if not p.is_think] or [p.action for p in parsed]
        valid = admissible_actions
        if valid is None and self._env is not None and callable(getattr(self._env, "admissible_actions", None)):
            valid = self._env.admissible_actions()
        info: dict[str, Any] = {"proposals": proposals, "n_valid": len(valid) if valid else 0}
        if not proposals:
            self._invalid += 1
            info["invalid"] = "no usable proposal"
            action = ""
        elif not valid:
            action = Counter(proposals).most_common(1)[0][0]
        else:
            valid = list(dict.fromkeys(valid))
            e_VxD, e_PxD = self._embed(valid), self._embed(proposals)
            relevance_V = (e_VxD @ e_PxD.T).max(axis=1)
            value_V = heuristic_value(valid, self._taken)
            if self.value == "llm":
                top = np.argsort(-relevance_V)[: self.value_top_k]
                value_V = np.zeros(len(valid))
                value_V[top] = self._llm_value([valid[i] for i in top], observation)
            score_V = saycan_scores(relevance_V, value_V)
            best = int(np.argmax(score_V))
            action = valid[best]
            info.update(relevance=float(relevance_V[best]), value=float(value_V[best]), score=float(score_V[best]))
        self._taken[action] += 1
        self._last_action = action or "(invalid output)"
        self._t += 1
        return Decision(action=action, info=info)


@dataclasses.dataclass(frozen=True)
class CoTOptions:
    """CoT's options (Wei et al. 2022, as RefRea's Table 1 runs it)."""

    max_tokens: int = setting(128, integer_at_least(1))
    """Token limit of one reasoning-then-action reply."""
    context_tokens: int = setting(3000, integer_at_least(1))
    """Prompt budget in tokens; the oldest steps are dropped beyond it."""
    temperature: float = setting(0.0, number_at_least(0))
    """Sampling temperature (0 = greedy decoding)."""


@dataclasses.dataclass(frozen=True)
class SayCanOptions:
    """SayCan's options (Ahn et al. 2022, as RefRea's Table 1 sets it up; see the module docstring)."""

    n_candidates: int = setting(5, integer_at_least(1))
    """Proposals sampled from the LLM per step (its top-5)."""
    value: Literal["heuristic", "llm"] = "heuristic"
    """The value term: `heuristic` discounts actions already taken; `llm` rates the most relevant actions 0-9."""
    value_top_k: int = setting(5, integer_at_least(1))
    """With value=llm, how many of the most relevant actions the LLM rates."""
    embedder: str | None = None
    """Sentence embedder of the relevance term (name or folder); none = the packaged MiniLM."""
    max_tokens: int = setting(32, integer_at_least(1))
    """Token limit of one proposal."""
    context_tokens: int = setting(3000, integer_at_least(1))
    """Prompt budget in tokens; the oldest steps are dropped beyond it."""
    temperature: float = setting(0.8, number_at_least(0))
    """Sampling temperature of the proposals."""


def make_cot(env_name: str, llm: LLM, opts: CoTOptions | Mapping[str, Any] | None = None) -> CoTAgent:
    return CoTAgent(llm, **dataclasses.asdict(build_options(CoTOptions, opts, "cot")))


def make_saycan(env_name: str, llm: LLM, opts: SayCanOptions | Mapping[str, Any] | None = None) -> SayCanAgent:
    kw = dataclasses.asdict(build_options(SayCanOptions, opts, "saycan"))
    return SayCanAgent(llm, embedder_name=kw.pop("embedder"), **kw)
