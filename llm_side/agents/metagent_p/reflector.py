"""Metacognitive reflector (paper 002, section 2.4): monitoring, evaluation, regulation.

Monitoring triggers on anomalies only: a failed execution or too many replans of one sub-goal.
Evaluation asks the LLM with two thought components, the current observation (T_e) and the most
similar failed cases (T_h), and scores the answer with eq. 7 (`confidence`); the conclusion is accepted
above 0.5, otherwise evaluation is repeated (bounded by `max_evaluations`). Regulation prompts the LLM
with the evaluation: it revises the remaining sub-goals (Figure 6 adds a "re-craft the stone pickaxe"
sub-goal), and the agent re-plans with the suggestion in the planner's reflection slot (eq. 6,
P* = plan(E, T, s_i)). No knowledge of the simulator's messages is written into the reflector.

Choices the paper leaves open (written down here):
- C_history without a retrievable successful plan: eq. 7 defines C_history as the similarity to a
  successful plan; with none it is undefined, not 0 (0 would cap confidence at beta = 0.5 and make
  the "accept above 0.5" branch unreachable). Its weight then shifts to C_LLM: confidence = C_LLM.
- An evaluation that is still not accepted after `max_evaluations` tries is treated as "irrational":
  an anomaly happened and no trusted conclusion says the plan is fine, so the agent regulates.
- Regulation's prompt (appendix F has none for the reflector) asks for the revised sub-goal list in
  the JSON form of the decomposition prompt; an unparseable reply keeps the sub-goals and only
  re-plans the current one with the suggestion.
- The prompts never name the agent's components ("reflector", "verifier"): small models read such
  words as game objects ("find reflector").

The LLM-only reflector (ablation base model, DEPS) explains the failure and suggests a fix, with no
history, confidence or sub-goal revision. `simulator_message_regulation` is a named ablation
(`--agent-opt regulation=message-rules`, off by default): hand-written fixes keyed to this world's own
failure messages, domain knowledge the paper's agent does not have.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from llm_side.agents.metagent_p.memory import FailureCase, Pool, cosine
from llm_side.agents.metagent_p.parsing import parse_reflection, parse_subgoals

ACCEPT = 0.5
REGULATIONS = ("llm", "message-rules")

EVALUATE_PROMPT = """You review the plan of a Minecraft player after a step went wrong or was retried too often.
Current observation: {obs}
Similar failed cases from the past: {history}
Sub-goal: {subgoal}; steps taken: {actions}; remaining steps: {plan}
Is the remaining plan rational? Answer in JSON with "rational" (true or false), "suggestion" (what to \
change) and "confidence" (one number from 0 to 1), e.g. {"rational": false, "suggestion": "...", "confidence": 0.6}
Answer:"""

REGULATE_PROMPT = """You are a helpful planner in Minecraft. Task: {task}.
A review of the plan found a problem.
Current observation: {obs}
Sub-goals still to do: {subgoals}
Review (confidence {confidence}): {suggestion}
Revise the list of sub-goals still to do so that the problem is fixed (for example, add a sub-goal that \
obtains a missing or broken item again). Keep sub-goals that are still needed.
RESPONSE FORMAT: {"subgoals": ["sub-goal", "sub-goal"]}
Answer:"""

LLM_ONLY_PROMPT = """A Minecraft player's last step failed.
Observation: {obs}
Steps taken: {actions}
Explain what went wrong and how to fix the plan. Answer in JSON: {"rational": false, "suggestion": "..."}
Answer:"""


def confidence(c_history: float | None, c_llm: float, alpha: float = 0.5, beta: float = 0.5) -> float:
    """Eq. 7: alpha * C_history + beta * C_LLM with alpha + beta = 1. `c_history=None` (no successful
    plan to compare with) shifts the weight to C_LLM (see the module docstring)."""
    if abs(alpha + beta - 1.0) > 1e-6:
        raise ValueError(f"reflector weights must sum to 1 (alpha={alpha}, beta={beta})")
    if c_history is None:
        return c_llm
    return alpha * c_history + beta * c_llm


@dataclasses.dataclass
class Evaluation:
    rational: bool
    suggestion: str
    c_history: float | None
    c_llm: float
    confidence: float
    tries: int
    accepted: bool = False


class Reflector:
    def __init__(self, llm: Any, embedder: Any | None, metacognitive: bool = True, alpha: float = 0.5,
                 beta: float = 0.5, accept: float = ACCEPT, max_evaluations: int = 3, replan_limit: int = 3,
                 max_tokens: int = 96):
        confidence(0.0, 0.0, alpha, beta)  # validates the weights
        self.llm = llm
        self.embedder = embedder
        self.metacognitive = metacognitive
        self.alpha, self.beta, self.accept = alpha, beta, accept
        self.max_evaluations = max_evaluations
        self.replan_limit = replan_limit
        self.max_tokens = max_tokens
        self.evaluations: list[Evaluation] = []

    def monitor(self, failed: bool, replans_of_subgoal: int) -> bool:
        """Trigger on execution failure or excessive replanning only."""
        return failed or replans_of_subgoal > self.replan_limit

    def evaluate(self, subgoal: str, actions: list[str], observation: str, plan: list[str],
                 failures: Pool | None, best_success_plan: list[str] | None) -> Evaluation:
        if not self.metacognitive:
            prompt = LLM_ONLY_PROMPT.replace("{obs}", observation[:400]).replace("{actions}", json.dumps(actions[-4:]))
            parsed = parse_reflection(self.llm.complete(prompt, max_tokens=self.max_tokens)[0])
            suggestion = parsed[1] if parsed and parsed[1] else _first_line(observation)
            ev = Evaluation(False, suggestion, None, 0.0, 0.0, 1)
            self.evaluations.append(ev)
            return ev
        history = "none"
        if failures is not None and len(failures):
            hits = failures.retrieve(f"subgoal: {subgoal}; scene: {observation[:200]}", k=2)
            history = " | ".join(f"{c.subgoal} failed ({c.scene[:80]}); suggestion: {c.suggestion}" for _, c in hits)
        c_hist: float | None = None
        if best_success_plan and self.embedder is not None:
            c_hist = cosine(self.embedder, " ; ".join(plan), " ; ".join(best_success_plan))
        prompt = (EVALUATE_PROMPT.replace("{obs}", observation[:400]).replace("{history}", history)
                  .replace("{subgoal}", subgoal).replace("{actions}", json.dumps(actions[-4:]))
                  .replace("{plan}", json.dumps(plan[:8])))
        ev = Evaluation(False, _first_line(observation), c_hist, 0.0, 0.0, 0)
        for attempt in range(self.max_evaluations):
            reply = self.llm.complete(prompt, max_tokens=self.max_tokens, temperature=0.0 if attempt == 0 else 0.8,
                                      seed=attempt)[0]
            parsed = parse_reflection(reply)
            rational, suggestion, c_llm = parsed if parsed else (False, "", 0.0)
            conf = confidence(c_hist, c_llm, self.alpha, self.beta)
            ev = Evaluation(rational, suggestion or _first_line(observation), c_hist, c_llm, conf, attempt + 1,
                            accepted=conf > self.accept)
            if ev.accepted:
                break  # accepted; otherwise re-evaluate
        self.evaluations.append(ev)
        return ev

    @staticmethod
    def keeps_plan(ev: Evaluation) -> bool:
        """'If rational, exploration continues': only an accepted evaluation that finds the plan rational."""
        return ev.accepted and ev.rational

    def regulate(self, task: str, observation: str, subgoals: list[str], ev: Evaluation) -> list[str] | None:
        """Prompt the LLM with the evaluation for the revised sub-goals still to do; None if unparseable."""
        prompt = (REGULATE_PROMPT.replace("{task}", task).replace("{obs}", observation[:400])
                  .replace("{subgoals}", json.dumps(subgoals[:10])).replace("{confidence}", f"{ev.confidence:.2f}")
                  .replace("{suggestion}", ev.suggestion[:300]))
        return parse_subgoals(self.llm.complete(prompt, max_tokens=self.max_tokens, temperature=0.0)[0])

    @staticmethod
    def failure_case(subgoal: str, actions: list[str], scene: str, suggestion: str) -> FailureCase:
        return FailureCase(subgoal, actions[-6:], scene, suggestion)


def simulator_message_regulation(observation: str, remaining: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ABLATION ONLY (`regulation=message-rules`, off by default): edit the plan with regular expressions
    keyed to this world's failure messages. Not the paper's reflector, which regulates through the LLM."""
    fix: list[dict[str, Any]] = []
    m = re.search(r"Your (\w+) broke", observation)
    if m:
        tool = m.group(1)
        fix.append({"name": "craft", "args": {"obj": {tool: 1}, "platform": "crafting_table"}})
        fix.append({"name": "equip", "args": {"obj": tool}})
    m = re.search(r"use 'find (\w+)'", observation)
    if m:
        fix += [{"name": "find", "args": {"obj": m.group(1)}}, {"name": "approach", "args": {"obj": m.group(1)}}]
    m = re.search(r"use 'approach (\w+)' first", observation)
    if m:
        fix.append({"name": "approach", "args": {"obj": m.group(1)}})
    if "needs the 3x3 grid of a crafting table" in observation:
        fix.append({"name": "craft", "args": {"obj": {"crafting_table": 1}}})
    if "no fuel" in observation:
        fix.append({"name": "craft", "args": {"obj": {"oak_planks": 1}}})
    return fix + remaining if fix else remaining


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text.strip() else ""
