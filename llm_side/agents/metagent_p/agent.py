"""Metagent-P (paper 002): plan -> verify -> execute -> reflect, one env action per `act()` call.

Planning has the two levels of eq. 1: the task is decomposed into sub-goals, then each sub-goal is
planned into actions when it becomes current. The verifier checks each action before it runs; the
reflector monitors each outcome and, on an anomaly, evaluates (eq. 7) and regulates through the LLM
(revised sub-goals, then a re-plan with its suggestion, eq. 6).

The ablation ladder of Table 3 is a set of switches: base = LLM planner + controller + LLM reflector;
+planner adds the experience pools; +verifier adds the symbolic verifier; +reflector (the full
agent) makes the reflector metacognitive. The pools and the rule pool are cross-task knowledge: they
persist across tasks in the agent, are returned by `memory()` and can be saved to `memory_file`.

Replanning count (RC, section 3.1.3): "the number of times an agent recovers from failed states to
eventually complete the task successfully". An episode's `recoveries` counts the re-plans made in
response to a failed execution (verifier rejections happen before execution and are no failed state;
a re-plan because a plan ran out is none either); it is the episode's RC when the episode succeeds,
and the report averages it over successful episodes only. `replans` (every re-plan) stays in the
record as a diagnostic.

Choices the paper leaves open: when the planner returns nothing usable, the agent takes the most
similar successful plan, else the exploratory step `find <task target>` of this task (never a plan
written for another task). Re-planning is not capped by default: the env's step budget bounds an
episode, and the paper reports RC of 13-28 on hard and complex tasks. `max_replans=N` (an option, off by
default) restores a cap after which the agent goes on without verifier vetoes and reflector re-plans;
measured with a scripted planner on mine_log (13 failed steps), a cap of 12 held RC at 12 where the
uncapped agent reached 20, so a cap changes Table 2's RC column.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from llm_side.agents.base import LazyEmbedder
from llm_side.agents.metagent_p.controller import MinecraftController, PlancraftController
from llm_side.agents.metagent_p.memory import FailureCase, Pool, SuccessCase
from llm_side.agents.metagent_p.planner import MINECRAFT_HEADER, PLANCRAFT_HEADER, Planner
from llm_side.agents.metagent_p.reflector import REGULATIONS, Reflector, simulator_message_regulation
from llm_side.agents.metagent_p.verifier import Verifier, norm_item
from llm_side.harness.contracts import Decision, EpisodeOutcome, Observation
from muse_common.files import RunFileError, atomic_write_json, read_json_object

LADDER = {  # Table 3
    "base": dict(experience=False, verifier=False, metacognitive=False),
    "planner": dict(experience=True, verifier=False, metacognitive=False),
    "verifier": dict(experience=True, verifier=True, metacognitive=False),
    "full": dict(experience=True, verifier=True, metacognitive=True),
}


@dataclasses.dataclass
class Config:
    experience: bool = True
    verifier: bool = True
    metacognitive: bool = True
    scene: bool = True  # DEPS plans without the scene (no visual information)
    decompose: bool = True  # eq. 1's first level (Minecraft; Plancraft tasks are one target)
    regulation: str = "llm"  # "message-rules": ablation with hand-written fixes (not the paper's)
    max_tokens: int = 256
    max_replans: int | None = None  # per episode; None: no cap (the env's step budget bounds an episode)
    plan_retries: int = 2
    alpha: float = 0.5
    beta: float = 0.5
    replan_limit: int = 3
    max_evaluations: int = 3  # reflector re-evaluations while confidence <= 0.5
    rule_evidence: int = 0  # confirmations by the env before a rule may veto (0: the paper, vetoes at once)
    rule_veto_limit: int | None = None  # vetoes of one action per episode before it runs anyway (None: no cap)
    memory_file: str | None = None

    def __post_init__(self) -> None:
        if self.regulation not in REGULATIONS:
            raise ValueError(f"unknown regulation '{self.regulation}'; choose one of: {', '.join(REGULATIONS)}")


class MetagentPAgent(LazyEmbedder):
    """Planner, verifier, controller and reflector around one LLM; the Table 3 switches in `Config`."""

    cross_task_memory = True  # the pools are knowledge about the world, not about one task

    def __init__(self, llm: Any, env_name: str, config: Config, embedder: Any | None = None,
                 name: str = "metagent-p"):
        self.name = name
        self.llm = llm
        self.cfg = config
        self.env_name = env_name
        self._embedder = embedder
        self.controller: Any = PlancraftController() if env_name == "plancraft" else MinecraftController()
        header = PLANCRAFT_HEADER if env_name == "plancraft" else MINECRAFT_HEADER
        self.planner = Planner(llm, header, use_experience=config.experience, retries=config.plan_retries,
                               max_tokens=config.max_tokens)
        if env_name == "plancraft" or not config.decompose:
            self.planner.decompose_header = None
        canon = norm_item
        if env_name == "minecraft":
            from llm_side.envs.minecraft.data import canonical as canon
        self.verifier = Verifier(llm, canon=canon, max_tokens=min(config.max_tokens, 128),
                                 retries=min(config.plan_retries, 1), min_evidence=config.rule_evidence,
                                 veto_limit=config.rule_veto_limit)
        self.reflector = Reflector(llm, None, metacognitive=config.metacognitive, alpha=config.alpha,
                                   beta=config.beta, replan_limit=config.replan_limit,
                                   max_evaluations=config.max_evaluations,
                                   max_tokens=min(config.max_tokens, 128))
        self.successes = Pool(SuccessCase, self)
        self.failures = Pool(FailureCase, self)
        if config.memory_file and Path(config.memory_file).exists():
            self.load_memory(read_memory_file(config.memory_file))
        self._reset_episode()

    def encode(self, texts: Any) -> Any:
        """The pools' embedder: loaded on first retrieval only (the ablation base never needs it)."""
        self.reflector.embedder = self.embedder
        return self.embedder.encode(texts)

    def _reset_episode(self) -> None:
        self.subgoals: list[str] = []
        self.subgoal = ""
        self.plan: list[dict[str, Any]] = []
        self.pending: dict[str, Any] | None = None
        self.pending_inventory: dict[str, int] = {}
        self.executed: list[str] = []
        self.replans = 0
        self.recoveries = 0
        self.subgoal_replans: dict[str, int] = {}
        self.fallbacks = 0
        self.blocked = 0
        self.reflections = 0
        self.task_info: dict[str, Any] = {}
        self.first_scene = ""
        self.first_inventory: dict[str, int] = {}
        self.inventory: dict[str, int] = {}
        self.observation = ""

    # ---- episode ------------------------------------------------------------------------------
    def begin_episode(self, obs: Observation, *, task_id: str, episode: int, env: Any) -> None:
        self._reset_episode()
        self._episode_env = env
        self._ended_by: dict[str, Any] = {}
        self.verifier.begin_episode()
        info_fn = getattr(env, "task_info", None)
        self.task_info = info_fn(task_id) if callable(info_fn) else {"task": obs.task}
        self.task_info.pop("tick_limit", None)
        self.observation = obs.text
        self.inventory = self.controller.inventory(obs.text, obs.info)
        self.first_scene = self.controller.scene(obs.text)
        self.first_inventory = dict(self.inventory)
        self._decompose(feedback="")
        self._next_subgoal()

    def _experience(self) -> list[SuccessCase]:
        if not self.cfg.experience or not len(self.successes):
            return []
        return [c for _, c in self.successes.retrieve(self._task_key(), k=2)]

    def _task_key(self) -> str:
        return f"task: {self.task_info.get('task')}; scene: {self.controller.scene(self.observation)}"

    def _scene(self) -> str:
        return self.controller.scene(self.observation) if self.cfg.scene else "unknown"

    def _task_goal(self) -> str:
        info = self.task_info
        return f"obtain {info.get('quantity', 1)} {info.get('task')}" if "quantity" in info else str(info.get("task"))

    def _decompose(self, feedback: str) -> None:
        """Eq. 1, first level; an unparseable answer leaves the task itself as the one sub-goal."""
        goals = self.planner.decompose(self.task_info, self._scene(), self.inventory, self._experience(), feedback)
        self.subgoals = goals or [self._task_goal()]

    def _next_subgoal(self) -> None:
        """Make the next sub-goal current and plan it (eq. 1, second level; not a re-plan)."""
        self.subgoal = self.subgoals.pop(0) if self.subgoals else ""
        self.plan = self._plan(feedback="") if self.subgoal else []

    def _plan(self, feedback: str) -> list[dict[str, Any]]:
        exp = self._experience()
        rules = self.verifier.guidance(f"{self.subgoal} {self.task_info.get('task')}") if self.cfg.verifier else []
        actions = self.planner.plan(self.task_info, self._scene(), self.inventory, exp, feedback,
                                    subgoal=self.subgoal if self.planner.decompose_header else None, rules=rules)
        if actions:
            return actions
        self.fallbacks += 1
        if exp:  # safe fallback: the most similar successful plan
            return [_text_action(a) for a in exp[0].plan]
        return self._explore()

    def _explore(self) -> list[dict[str, Any]]:
        """The exploratory step of *this* task: look for its target (Minecraft); nothing for Plancraft."""
        target = self.task_info.get("task")
        if self.env_name != "minecraft" or not target:
            return []
        return [{"name": "find", "args": {"obj": str(target)}}]

    def _may_replan(self) -> bool:
        """False only once an optional `max_replans` cap is spent (no cap by default)."""
        return self.cfg.max_replans is None or self.replans < self.cfg.max_replans

    def _replan(self, feedback: str) -> None:
        self.replans += 1
        self.subgoal_replans[self.subgoal] = self.subgoal_replans.get(self.subgoal, 0) + 1
        self.plan = self._plan(feedback)

    def act(self, observation: str, admissible_actions: list[str] | None) -> Decision:
        self.observation = observation
        self.inventory = self.controller.inventory(observation)
        if self.pending is not None:
            self._after(self.pending, observation)
            self.pending = None
        for _ in range(4):
            if not self.plan:
                if self.subgoals:
                    self._next_subgoal()
                elif self._may_replan():
                    self.replans += 1  # every sub-goal is done but the task is not: decompose again
                    self._decompose("the sub-goals are done but the task is not complete yet")
                    self._next_subgoal()
                if not self.plan:
                    break
            action = self.plan.pop(0)
            command = self.controller.to_command(action)
            if command is None:
                continue  # an action the env cannot express: skip it
            if self.cfg.verifier and action.get("name") != "_raw" and self._may_replan():
                fb = self.verifier.check(action, self.inventory)
                if not fb.ok:
                    self.blocked += 1
                    self._replan(fb.suggestion)
                    continue
            return self._execute(action, command)
        self.fallbacks += 1
        explore = self._explore()
        command = self.controller.to_command(explore[0]) if explore else None
        if command is None:  # Plancraft: a no-op move keeps the episode going
            return self._execute({"name": "_raw", "args": {}}, "move: from [0] to [I36] with quantity 1")
        return self._execute(explore[0], command)

    def _execute(self, action: dict[str, Any], command: str) -> Decision:
        self.pending = action
        self.pending_inventory = dict(self.inventory)
        self.executed.append(command)
        return Decision(command, info=self._step_info())

    def _after(self, action: dict[str, Any], observation: str) -> None:
        failed = self.controller.failed(observation)
        if self.cfg.verifier and action.get("name") != "_raw":
            self.verifier.observe(action, self.pending_inventory, failed)
        if not self.reflector.monitor(failed, self.subgoal_replans.get(self.subgoal, 0)):
            return
        self.reflections += 1
        self.subgoal_replans[self.subgoal] = 0  # the anomaly is being handled: count afresh
        key = self.subgoal or self._task_goal()
        plan_text = [self.controller.to_command(a) or "" for a in self.plan]
        best = [c.plan for _, c in self.successes.retrieve(self._task_key(), k=1)] if len(self.successes) else []
        ev = self.reflector.evaluate(key, self.executed, observation, plan_text,
                                     self.failures if self.cfg.experience else None, best[0] if best else None)
        if self.cfg.experience:
            self.failures.add(self.reflector.failure_case(key, self.executed, self.controller.scene(observation),
                                                          ev.suggestion))
        if not self._may_replan():
            return
        if self.cfg.metacognitive:
            if self.cfg.regulation == "message-rules":  # ablation: hand-written fixes, not the paper's
                self.plan = simulator_message_regulation(observation, self.plan)
            if self.reflector.keeps_plan(ev):
                return  # accepted and rational: exploration continues with the current plan
            if self.cfg.regulation == "llm":
                revised = self.reflector.regulate(self._task_goal(), observation, [key, *self.subgoals], ev)
                if revised:
                    self.subgoal, self.subgoals = revised[0], revised[1:]
        self._replan(advice(observation, ev.suggestion))
        if failed:
            self.recoveries += 1

    def _step_info(self) -> dict[str, Any]:
        return {"replans": self.replans, "subgoal": self.subgoal}

    def end_episode(self, outcome: EpisodeOutcome) -> None:
        self._ended_by = ended_by(getattr(self, "_episode_env", None), outcome)
        self._episode_env = None
        if outcome.success and self.cfg.experience:
            plan = [a for a, o in outcome.trajectory if not self.controller.failed(o)]
            self.successes.add(SuccessCase(str(self.task_info.get("task")), self.first_scene, plan[:60],
                                           self.first_inventory))
        if self.cfg.memory_file:
            atomic_write_json(self.cfg.memory_file, self.memory())

    def ablation(self) -> str:
        """The Table 3 rung this configuration is ("custom" for other switch sets)."""
        flags = dict(experience=self.cfg.experience, verifier=self.cfg.verifier, metacognitive=self.cfg.metacognitive)
        rung = next((k for k, v in LADDER.items() if v == flags), "custom")
        return rung if self.cfg.regulation == "llm" else f"{rung}+{self.cfg.regulation}"

    def episode_extras(self) -> dict[str, Any]:
        extra = {"ablation": self.ablation()} if self.name == "metagent-p" else {}
        return {**extra, "replans": self.replans, "recoveries": self.recoveries, "plan_fallbacks": self.fallbacks,
                "verifier_blocks": self.blocked, "reflections": self.reflections, "rule_pool": len(self.verifier),
                "success_pool": len(self.successes), "failure_pool": len(self.failures),
                "rules_rejected": self.verifier.rejected, "rules_dropped": self.verifier.dropped,
                **getattr(self, "_ended_by", {})}

    # ---- memory -------------------------------------------------------------------------------
    def memory(self) -> dict[str, Any]:
        return {"success": self.successes.to_json(), "failure": self.failures.to_json(),
                "rules": self.verifier.to_json()}

    def load_memory(self, memory: dict[str, Any]) -> None:
        """Restore saved pools. An empty dict (the runner's 'fresh task') keeps the pools: they are
        cross-task knowledge, as in the paper's cognitive shaping."""
        if not memory:
            return
        self.successes.load_json(memory.get("success", []))
        self.failures.load_json(memory.get("failure", []))
        self.verifier.load_json(memory.get("rules", []))


MEMORY_POOLS = ("success", "failure", "rules")
"""The keys of a saved memory file (`MetagentP.memory()`): the success and failure case pools and the rules."""


def read_memory_file(path: str | Path) -> dict[str, Any]:
    """A memory file saved by `memory_file=PATH`, checked before the pools load it: a JSON object whose pools
    are lists (one line naming the file otherwise; a pool's malformed entries are then skipped as it loads)."""
    fix = "delete it to start with empty pools, or point memory_file= at a file this agent saved"
    memory = read_json_object(path, "a Metagent-P memory file", fix)
    for key in MEMORY_POOLS:
        if not isinstance(memory.get(key, []), list):
            raise RunFileError(path, "a Metagent-P memory file", f"{key!r} is not a list", fix)
    return memory


def ended_by(env: Any, outcome: EpisodeOutcome) -> dict[str, Any]:
    """How the episode ended: `success`, `death`, `tick_limit` (the paper's end), `error`, or `action_cap`:
    none of those, so the runner's action limit (the env's 300 by default, `--max-steps`) cut it first.
    With the game ticks used and the task's tick limit, when the env is the tech-tree world."""
    world, task = getattr(env, "world", None), getattr(env, "task", None)
    ticks = getattr(world, "elapsed", None)
    limit = getattr(task, "tick_limit", None)
    if outcome.success:
        how = "success"
    elif outcome.reason:
        how = "error"
    elif world is not None and getattr(world, "dead", False):
        how = "death"
    elif ticks is not None and limit is not None and ticks >= limit:
        how = "tick_limit"
    else:
        how = "action_cap"
    return {"ended_by": how, "ticks": ticks, "tick_limit": limit}


def advice(observation: str, suggestion: str) -> str:
    """The planner's reflection slot after a failed or doubtful step: what happened and what to change,
    in words that name no agent component (a small model reads "reflector" as an item)."""
    what = observation.strip().splitlines()[0][:200] if observation.strip() else "the last step did not work"
    return f"the last step gave: {what} Advice: {suggestion.strip() or 'try a different way'}"


def _text_action(command: str) -> dict[str, Any]:
    """A stored plan step (env command text) back into a plan action the controller passes through."""
    return {"name": "_raw", "args": {"command": command}}
