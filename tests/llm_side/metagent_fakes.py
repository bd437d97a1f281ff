"""Test doubles shared by the Metagent-P tests (never part of the package): a bag-of-words sentence
embedder, an agent built with a scripted LLM and that embedder, and one played episode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from llm_side.agents.metagent_p import MetagentPAgent, make_agent
from llm_side.backends.scripted import ScriptedLLM
from llm_side.harness.contracts import EpisodeOutcome, TextEnv

GOOD_SCORES = '{"common_sense_consistency": 0.9, "condition_clarity": 0.9, "action_feasibility": 0.95}'

class BagOfWordsEmbedder:
    """Test double for the sentence embedder: hashed bag of words, L2-normalised."""

    name, dim = "bow", 64

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace(";", " ").split():
                out[i, sum(map(ord, w)) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

def agent_with(reply: Any, env_name: str = "minecraft", **opts: Any) -> MetagentPAgent:
    """A Metagent-P agent whose LLM is `ScriptedLLM(reply)` (a list of replies or a function of
    (prompt, call index)), with the bag-of-words embedder and `--agent-opt`-style string options."""
    agent = make_agent(env_name, ScriptedLLM(reply), {k: str(v) for k, v in opts.items()})
    agent._embedder = BagOfWordsEmbedder()
    return agent

def play(agent: Any, env: TextEnv, task_id: str, seed: int = 1, steps: int = 15) -> tuple[bool, list[tuple[str, str]]]:
    """One episode of at most `steps` actions, told to the agent as the runner would; (won, trajectory)."""
    obs = env.reset(task_id, seed=seed)
    agent.begin_episode(obs, task_id=task_id, episode=0, env=env)
    text, traj, r = obs.text, [], None
    for _ in range(steps):
        d = agent.act(text, None)
        r = env.step(d.action)
        traj.append((d.action, r.observation))
        text = r.observation
        if r.done:
            break
    agent.end_episode(EpisodeOutcome(task_id, 0, bool(r and r.won), len(traj), None, traj))
    return bool(r and r.won), traj
