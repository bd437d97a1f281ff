"""A tiny text env and agent for the harness's own tests (never part of the package).

Task ids say how the episode goes: `easy-N` is won by saying "win" (the agent learns to after one
failed episode, so memory matters), `crash-N` raises EnvCrashed on the first step, `bad-N` makes the
agent raise as if the LLM output were malformed, `slow-N` sleeps per step (for kill tests).
"""

from __future__ import annotations

import os
import time
from typing import Any

from llm_side.harness.contracts import Decision, EnvCrashed, EpisodeOutcome, Observation, StepResult


class FakeEnv:
    name = "fake"
    default_max_steps = 5

    def __init__(self, n_tasks: int = 3, kinds: str = "easy", sleep: float = 0.0):
        self.n_tasks, self.kinds, self.sleep = int(n_tasks), str(kinds).split("+"), float(sleep)
        self.task_id: str | None = None
        self.restarts = 0
        self.resets: list[tuple[str, int]] = []

    def task_ids(self, split: str | None = None) -> list[str]:
        if split not in (None, "test", "train"):
            raise ValueError(f"unknown split '{split}'; choose test or train")
        return [f"{k}-{i}" for k in self.kinds for i in range(self.n_tasks)]

    def reset(self, task_id: str, seed: int = 0) -> Observation:
        self.task_id = task_id
        self.resets.append((task_id, seed))
        return Observation(
            text=f"You are in room {task_id}.", task=f"win {task_id}", admissible_actions=["look", "win"]
        )

    def step(self, action: str) -> StepResult:
        if self.sleep:
            time.sleep(self.sleep)
        assert self.task_id is not None
        if self.task_id.startswith("crash"):
            raise EnvCrashed("fake env process died")
        won = action == "win"
        return StepResult(
            observation="You won." if won else "Nothing happens.",
            reward=float(won),
            done=won,
            won=won,
            score=100.0 if won else 0.0,
            admissible_actions=["look", "win"],
        )

    def admissible_actions(self) -> list[str] | None:
        return ["look", "win"]

    def restart(self) -> None:
        self.restarts += 1

    def close(self) -> None:
        pass


class NoMemoryAgent:
    """A test agent with nothing to remember across episodes: subclasses write `begin_episode` and `act`."""

    def end_episode(self, outcome: EpisodeOutcome) -> None:
        return None

    def memory(self) -> dict[str, Any]:
        return {}

    def load_memory(self, memory: dict[str, Any]) -> None:
        return None


class MemoryAgent:
    """Looks around on a task's first episode, says "win" once memory holds a failure.
    Competence is 0.9 when it will win and 0.1 otherwise."""

    name = "memory"

    def __init__(self) -> None:
        self.failures: list[int] = []
        self.loaded: list[dict[str, Any]] = []
        self.task_id = ""

    def begin_episode(self, obs: Observation, *, task_id: str, episode: int, env: Any) -> None:
        self.task_id = task_id

    def act(self, observation: str, admissible_actions: list[str] | None) -> Decision:
        if self.task_id.startswith("bad"):
            raise ValueError("could not parse LLM output: '???'")
        if self.failures:
            return Decision("win", competence=0.9, info={"why": "remembered"})
        return Decision("look", competence=0.1)

    def end_episode(self, outcome: EpisodeOutcome) -> None:
        if not outcome.success:
            self.failures.append(outcome.episode)

    def memory(self) -> dict[str, Any]:
        return {"failures": list(self.failures)}

    def load_memory(self, memory: dict[str, Any]) -> None:
        self.loaded.append(dict(memory))
        self.failures = list(memory.get("failures", []))

    def episode_extras(self) -> dict[str, Any]:
        return {"n_failures_seen": len(self.failures), "pid": os.getpid()}


def make_env(**options: Any) -> FakeEnv:
    return FakeEnv(**options)


def make_agent(env_name: str, llm: Any, options: dict[str, Any]) -> MemoryAgent:
    if options.get("refuse"):
        raise ValueError(f"agent 'memory' makes no sense on env '{env_name}'")
    return MemoryAgent()


def report_tables(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The optional per-env report hook: successes per task kind."""
    kinds = sorted({r["task"].split("-")[0] for r in records})
    rows = [f"| {k} | {sum(r['success'] for r in records if r['task'].startswith(k))} |" for k in kinds]
    return [("Fake env: successes by kind", "\n".join(["| kind | successes |", "| --- | --- |", *rows]))]
