"""Reflexion (Shinn et al. 2023) as MUSE §4.1.2 describes it: a ReAct actor plus verbal reflections.

After every episode (failures, and successes too, as MUSE extends it) the reflection model M_rx
writes a short plan from the trajectory, the outcome and the earlier reflections. Reflections live in
`memory()`, so they carry across a task's episodes and survive a resumed run. When more than
`max_reflections` pile up, M_rx consolidates them into one summary instead of dropping old ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from llm_side.agents import prompting, react
from llm_side.agents.react import ReActAgent
from llm_side.harness.contracts import LLM, EpisodeOutcome, Observation, TextEnv
from muse_common.settings import build_options, integer_at_least, setting

REFLECT_FAIL = (
    "You will be given the history of a past experience in which you were placed in an environment and "
    "given a task to complete. You were unsuccessful in completing the task. Do not summarize your "
    "environment, but rather think about the strategy and path you took to attempt to complete the task. "
    "Devise a concise, new plan of action that accounts for your mistake with reference to specific actions "
    "that you should have taken. You will need this later when you are solving the same task. "
    "Give your plan after \"New plan:\".")
REFLECT_SUCCESS = (
    "You will be given the history of a past experience in which you were placed in an environment and "
    "given a task to complete. You completed the task. Do not summarize your environment; state concisely "
    "which specific actions led to success and what could be done in fewer steps, so you can repeat it "
    "when you solve the same task again. Give your plan after \"New plan:\".")
CONSOLIDATE = (
    "Here are lessons from several attempts at the same task. Merge them into one short plan (at most "
    "four sentences) that keeps every specific, still-useful instruction and drops repetitions.\n")


def reflection_prompt(scenario: str, success: bool, past: list[str], examples: str) -> str:
    """The M_rx query: instruction, few-shot examples, this episode, earlier plans, 'New plan:' cue."""
    head = REFLECT_SUCCESS if success else REFLECT_FAIL
    text = head + (" Here are two examples:\n\n" + examples.strip() + "\n\n" if examples else "\n\n")
    text += scenario.rstrip("\n") + ("\nSTATUS: SUCCESS" if success else "\nSTATUS: FAIL") + "\n"
    if past:
        text += "\nPlans from past attempts:\n" + "".join(f"Trial #{i}: {m}\n" for i, m in enumerate(past))
    return text + "\nNew plan:"


REFLECTION_STOPS = ["\nTrial #", "\nSTATUS:", "\nYou are in the middle", "\nHere are lessons"]


def clean_reflection(text: str, max_chars: int = 600) -> str:
    """First non-empty paragraph of the reply, bounded (small models ramble)."""
    paras = [p.strip() for p in (text or "").split("\n\n") if p.strip()]
    return paras[0][:max_chars] if paras else ""


class ReflexionAgent(ReActAgent):
    """ReAct + reflections carried across episodes of a task."""

    name = "reflexion"

    def __init__(self, llm: LLM, *, reflection_llm: LLM | None = None, max_reflections: int = 3,
                 reflect_on_success: bool = True, reflection_tokens: int = 128, **kw: Any):
        super().__init__(llm, **kw)
        if max_reflections < 1:
            raise ValueError(f"max_reflections must be >= 1, got {max_reflections}.")
        self.reflection_llm = reflection_llm or llm
        self.max_reflections = max_reflections
        self.reflect_on_success = reflect_on_success
        self.reflection_tokens = reflection_tokens
        self._reflections: list[dict[str, Any]] = []
        self._last_reflection: dict[str, Any] | None = None
        self._reflection_examples = ""

    def begin_episode(self, obs: Observation, *, task_id: str, episode: int, env: TextEnv) -> None:
        super().begin_episode(obs, task_id=task_id, episode=episode, env=env)
        hook = getattr(env, "reflexion_examples", None)
        self._reflection_examples = hook() if callable(hook) else ""
        self._episode = episode
        self._last_reflection = None

    def _memory_block(self) -> str:
        if not self._reflections:
            return ""
        lines = "".join(f"Trial {i}: {r['text']}\n" for i, r in enumerate(self._reflections))
        return "\nYour memory for the task below:\n" + lines

    def scenario(self, outcome: EpisodeOutcome) -> str:
        return self._first_obs + "\n" + prompting.format_steps(outcome.trajectory)

    def end_episode(self, outcome: EpisodeOutcome) -> None:
        super().end_episode(outcome)
        if outcome.success and not self.reflect_on_success:
            return
        past = [r["text"] for r in self._reflections]
        prompt = reflection_prompt(self.scenario(outcome), outcome.success, past, self._reflection_examples)
        prompt = self._fit_reflection(prompt, outcome, past)
        text = self.reflection_llm.complete(prompt, n=1, temperature=0.0, max_tokens=self.reflection_tokens,
                                            stop=REFLECTION_STOPS, seed=self.seed)[0]
        entry = {"episode": outcome.episode, "success": outcome.success, "text": clean_reflection(text) or
                 "(no reflection)", "prompt": prompt}
        self._last_reflection = entry
        self._reflections.append({k: entry[k] for k in ("episode", "success", "text")})
        if len(self._reflections) > self.max_reflections:
            self._consolidate()

    def _fit_reflection(self, prompt: str, outcome: EpisodeOutcome, past: list[str]) -> str:
        """Drop the oldest steps of the scenario until the query fits the context budget."""
        steps = list(outcome.trajectory)
        while prompting.approx_tokens(prompt) > self.context_tokens and steps:
            steps = steps[max(1, len(steps) // 4):]
            scen = self._first_obs + "\n[... earlier steps omitted ...]\n" + prompting.format_steps(steps)
            prompt = reflection_prompt(scen, outcome.success, past, self._reflection_examples)
        return prompt

    def _consolidate(self) -> None:
        lessons = "".join(f"- {r['text']}\n" for r in self._reflections)
        prompt = CONSOLIDATE + lessons + "Merged plan:"
        text = self.reflection_llm.complete(prompt, n=1, temperature=0.0, max_tokens=self.reflection_tokens,
                                            stop=REFLECTION_STOPS, seed=self.seed)[0]
        summary = clean_reflection(text) or " ".join(r["text"] for r in self._reflections[-2:])[:600]
        last = self._reflections[-1]
        self._reflections = [{"episode": last["episode"], "success": last["success"], "text": summary,
                              "consolidated": True}]

    record_models = False  # name the acting and reflection models in each record (fine-tuned ones given)

    def episode_extras(self) -> dict[str, Any]:
        extras = super().episode_extras()
        if self.record_models:
            extras["actor_model"] = getattr(self.llm, "name", None)
            extras["reflection_model"] = getattr(self.reflection_llm, "name", None)
        if self._last_reflection:
            extras["reflection"] = self._last_reflection["text"]
            extras["reflection_prompt"] = self._last_reflection["prompt"]
        return extras

    def memory(self) -> dict[str, Any]:
        return {"reflections": [dict(r) for r in self._reflections]}

    def load_memory(self, memory: dict[str, Any]) -> None:
        refl = (memory or {}).get("reflections", [])
        if not isinstance(refl, list) or not all(isinstance(r, dict) and "text" in r for r in refl):
            raise ValueError("Reflexion memory must be {'reflections': [{'text': ...}, ...]}; got "
                             f"{str(memory)[:200]}")
        self._reflections = [dict(r) for r in refl]


@dataclasses.dataclass(frozen=True)
class Options(react.Options):
    """Reflexion's options: ReAct's, plus the reflection memory (MUSE §4.1.2)."""

    max_reflections: int = setting(3, integer_at_least(1))
    """Reflections kept per task; more are consolidated by M_rx into one summary."""
    reflect_on_success: bool = True
    """Reflect after successful episodes too, as MUSE §4.1.2 extends Reflexion (false = failures only,
    as the original Reflexion)."""
    reflection_model: str | None = None
    """Model spec of a separately fine-tuned reflection model M_rx; none = the acting LLM reflects."""
    actor_model: str | None = None
    """Model spec of a fine-tuned actor (Algorithm 3's SFT stage, e.g. hf:OUT/actor_sft/merged); the run's
    --model then writes the reflections unless reflection_model is given. none = the run's --model acts."""


def load_models(llm: LLM, opts: Any) -> tuple[LLM, LLM | None]:
    """(the acting LLM, the reflection LLM or None for the acting one) of `actor_model` / `reflection_model`."""
    from llm_side.backends import load_llm

    reflection_llm = load_llm(opts.reflection_model) if opts.reflection_model else None
    if opts.actor_model:
        reflection_llm = reflection_llm or llm
        llm = load_llm(opts.actor_model)
    return llm, reflection_llm


def make_agent(env_name: str, llm: LLM, opts: Options | Mapping[str, Any] | None = None) -> ReflexionAgent:
    opts = build_options(Options, opts, "reflexion")
    kw = {k: v for k, v in dataclasses.asdict(opts).items() if k not in ("reflection_model", "actor_model")}
    llm, reflection_llm = load_models(llm, opts)
    agent = ReflexionAgent(llm, reflection_llm=reflection_llm, **kw)
    agent.record_models = bool(opts.actor_model or opts.reflection_model)
    return agent
