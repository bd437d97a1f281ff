"""ReAct (Yao et al. 2022): a completion-style few-shot prompt, one action per LLM call.

Env-generic: the few-shot examples come from `env.react_examples(task_id)` when the env has them,
else `env.instructions()`, else a generic instruction. The transcript uses the original '> action'
format, and the LLM is stopped at the end of the line, as in the ReAct ALFWorld code. The token limit
of a line (`max_tokens`, default `prompting.THOUGHT_TOKENS`) is sized to the examples' longest thought,
so an imitated thought is never cut mid-sentence, and a thought of any length is accepted.
"""

from __future__ import annotations

from typing import Any

from llm_side.agents import prompting
from llm_side.harness.contracts import LLM, Decision, EpisodeOutcome, Observation, TextEnv

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


class ReActAgent:
    """Reason + act with the running trajectory as context; no memory across episodes."""

    name = "react"

    def __init__(self, llm: LLM, *, max_tokens: int = prompting.THOUGHT_TOKENS, context_tokens: int = 6000,
                 temperature: float = 0.0, seed: int | None = 0):
        self.llm = llm
        self.max_tokens = max_tokens
        self.context_tokens = context_tokens
        self.temperature = temperature
        self.seed = seed
        self._head = ""
        self._task = ""
        self._task_id = ""
        self._steps: list[tuple[str, str]] = []
        self._last_action: str | None = None
        self._invalid = 0
        self._outcome: EpisodeOutcome | None = None

    # -- episode lifecycle -------------------------------------------------------------------------
    def begin_episode(self, obs: Observation, *, task_id: str, episode: int, env: TextEnv) -> None:
        self._task_id = task_id
        self._task = obs.task
        self._examples = few_shot_head(env, task_id)
        self._first_obs = obs.text.strip()
        self._steps = []
        self._last_action = None
        self._invalid = 0
        self._outcome = None

    def _memory_block(self) -> str:
        return ""

    def build_prompt(self) -> str:
        """Examples + memory + task + the most recent steps that fit + the '>' cue."""
        head = self._examples + self._memory_block() + "\nHere is the task.\n" + self._first_obs + "\n"
        lines = [prompting.format_steps([s]) for s in self._steps]
        return prompting.fit_to_budget(head, lines, ">", self.context_tokens)

    def _record_observation(self, observation: str) -> None:
        if self._last_action is not None:
            self._steps.append((self._last_action, observation.strip()))

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

    def end_episode(self, outcome: EpisodeOutcome) -> None:
        self._outcome = outcome

    def episode_extras(self) -> dict[str, Any]:
        """What the runner does not record itself (it records actions, observations, task text)."""
        return {"invalid_actions": self._invalid}

    # -- memory (ReAct has none) -------------------------------------------------------------------
    def memory(self) -> dict[str, Any]:
        return {}

    def load_memory(self, memory: dict[str, Any]) -> None:
        return None


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
