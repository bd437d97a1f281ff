"""ReAct (Yao et al. 2022): a completion-style few-shot prompt, one action per LLM call.

Env-generic: the few-shot examples come from `env.react_examples(task_id)` when the env has them,
else `env.instructions()`, else a generic instruction (`base.few_shot_head`). The transcript uses the
original '> action' format, and the LLM is stopped at the end of the line, as in the ReAct ALFWorld
code. The token limit of a line (`max_tokens`, default `prompting.THOUGHT_TOKENS`) is sized to the
examples' longest thought, so an imitated thought is never cut mid-sentence, and a thought of any
length is accepted.
"""

from __future__ import annotations

from typing import Any

from llm_side.agents import prompting
from llm_side.agents.base import TranscriptAgent
from llm_side.harness.contracts import LLM, Decision


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


def make_agent(env_name: str, llm: LLM, options: dict[str, Any]) -> ReActAgent:
    return ReActAgent(llm, **_common_options(options))


def _common_options(options: dict[str, Any]) -> dict[str, Any]:
    """Parse the `--agent-opt` options every ReAct-style agent shares."""
    out: dict[str, Any] = {}
    for key, cast in (("max_tokens", int), ("context_tokens", int), ("temperature", float)):
        if key in options:
            try:
                out[key] = cast(options[key])
            except (TypeError, ValueError) as e:
                raise ValueError(f"agent option {key}={options[key]!r} is not a {cast.__name__}.") from e
    return out
