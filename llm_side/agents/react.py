"""ReAct (Yao et al. 2022): a completion-style few-shot prompt, one action per LLM call.

Env-generic: the few-shot examples come from `env.react_examples(task_id)` when the env has them,
else `env.instructions()`, else a generic instruction (`base.few_shot_head`). The transcript uses the
original '> action' format, and the LLM is stopped at the end of the line, as in the ReAct ALFWorld
code. The token limit of a line (`max_tokens`, default `prompting.THOUGHT_TOKENS`) is sized to the
examples' longest thought, so an imitated thought is never cut mid-sentence, and a thought of any
length is accepted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from llm_side.agents import prompting
from llm_side.agents.base import TranscriptAgent
from llm_side.harness.contracts import LLM, Decision
from muse_common.settings import build_options, integer_at_least, number_at_least, setting


class ReActAgent(TranscriptAgent):
    """Reason + act with the running trajectory as context; no memory across episodes."""

    name = "react"

    def __init__(self, llm: LLM, *, max_tokens: int = prompting.THOUGHT_TOKENS, context_tokens: int = 6000,
                 temperature: float = 0.0, seed: int | None = 0):
        super().__init__(llm, max_tokens=max_tokens, context_tokens=context_tokens, temperature=temperature,
                         seed=seed)

    def act(self, observation: str, admissible_actions: list[str] | None) -> Decision:
        self._record_observation(observation)
        prompt = self.build_prompt()
        text = self.llm.complete(prompt, n=1, temperature=self.temperature, max_tokens=self.max_tokens,
                                 stop=["\n"], seed=self.seed)[0]
        if not text.strip():  # small models often open with a newline: read past it once
            text = self.llm.complete(prompt, n=1, temperature=self.temperature, max_tokens=self.max_tokens,
                                     stop=["\n>"], seed=self.seed)[0]
        return self._decide(text)

    def _decide(self, text: str, competence: float | None = None, info: dict[str, Any] | None = None) -> Decision:
        parsed = prompting.parse_action(text)
        info = dict(info or {})
        if parsed.invalid:
            self._invalid += 1
            info.update(invalid=parsed.invalid, raw=(text or "")[:300])
        self._last_action = parsed.action  # the transcript shows what the env got ('' when invalid)
        return Decision(action=parsed.action, competence=competence, info=info)


@dataclasses.dataclass(frozen=True)
class Options:
    """ReAct's options (`--agent-opt key=value`); Reflexion and MUSE-LLM extend them."""

    max_tokens: int = setting(prompting.THOUGHT_TOKENS, integer_at_least(1))
    """Token limit of one transcript line, sized to the few-shot examples' longest thought."""
    context_tokens: int = setting(6000, integer_at_least(1))
    """Prompt budget in tokens; the oldest steps of the episode are dropped beyond it."""
    temperature: float = setting(0.0, number_at_least(0))
    """Sampling temperature of the action line (0 = greedy decoding)."""


def make_agent(env_name: str, llm: LLM, opts: Options | Mapping[str, Any] | None = None) -> ReActAgent:
    opts = build_options(Options, opts, "react")
    return ReActAgent(llm, **dataclasses.asdict(opts))
