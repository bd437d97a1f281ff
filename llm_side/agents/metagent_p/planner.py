"""Experience-enhanced planner (paper 002, section 2.2): the two levels of eq. 1. `decompose` asks the
LLM for the task's sub-goals {g_1..g_n} (with the most similar successful cases); `plan` asks for the
actions of one sub-goal in Table 9's JSON workflow form, with the scene, the inventory, the experience,
the verifier's rules as guidance (top-down, "rules converted into prompts") and the feedback of the
last check or review in the reflection slot.

Choices the paper leaves open: appendix F gives only the action-level prompt (Table 9), so the
decomposition prompt is ours, in the same style, with one example; Plancraft (one crafting target) is
not decomposed, its only sub-goal is the task. Malformed JSON is retried a bounded number of times
(temperature raised); after that the caller gets None (decomposition: the task itself is the one
sub-goal; actions: the agent falls back, see `agent.py`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from llm_side.agents.metagent_p.memory import SuccessCase
from llm_side.agents.metagent_p.parsing import parse_subgoals, parse_workflow

JSON_ONLY = "Ensure the response can be parsed by Python json.loads.\n"
MINECRAFT_EXAMPLE_USER = """Example:
USER:
- task: cobblestone, quantity: 4, tool: wooden pickaxe
- inventory: {"wooden_pickaxe": 1}
SYSTEM:
"""
"""The example task both Minecraft prompts show (Table 9's), before each prompt's own answer to it."""

DECOMPOSE_HEADER = """You are a helpful planner in Minecraft. Break the task into an ordered list of sub-goals. \
Each sub-goal obtains, crafts, smelts or equips one item, using game item names.
RESPONSE FORMAT: {"subgoals": ["sub-goal", "sub-goal"]}
""" + JSON_ONLY + MINECRAFT_EXAMPLE_USER + """{"subgoals": ["equip 1 wooden_pickaxe", "mine 4 cobblestone"]}
"""

MINECRAFT_HEADER = """You are a helpful planner in Minecraft, and good at planning workflows to complete \
tasks. Create a workflow composed of a sequence of actions to complete the task.
The actions which can compose a workflow are as follows:
find (obj); approach (obj); craft (obj, materials, platform); smelt (obj, materials, platform); mine \
(obj, tool); attack (obj, tool); equip (obj); digdown (y_level, tool); digup (tool); apply (obj, tool).
RESPONSE FORMAT: {"workflow": [{"times": "n", "actions": [{"name": "action name", "args": {"arg name": value}}]}]}
""" + JSON_ONLY + MINECRAFT_EXAMPLE_USER + """{"workflow": [{"times": "1", "actions": [{"name": "equip", "args": \
{"obj": "wooden pickaxe"}}]}, {"times": "4", "actions": [{"name": "find", "args": {"obj": "stone"}}, {"name": \
"approach", "args": {"obj": "stone"}}, {"name": "mine", "args": {"obj": "stone", "tool": "wooden pickaxe"}}]}]}
"""

PLANCRAFT_HEADER = """You are a helpful planner for crafting in Minecraft. The crafting grid is \
[A1]..[C3], the output slot is [0], the inventory is [I1]..[I36].
Actions: move (from, to, quantity): move items between slots; smelt (from, to, quantity): smelt an item; \
impossible (reason): the target cannot be crafted.
To craft, move ingredients into the grid in the recipe's shape, then move the result from [0] to an \
empty inventory slot.
RESPONSE FORMAT: {"workflow": [{"name": "move", "args": {"from": "[I1]", "to": "[A1]", "quantity": 1}}]}
Example:
USER:
- task: oak_planks
- inventory: oak_log [I1] quantity 1
SYSTEM:
{"workflow": [{"name": "move", "args": {"from": "[I1]", "to": "[A1]", "quantity": 1}}, {"name": "move", \
"args": {"from": "[0]", "to": "[I2]", "quantity": 4}}]}
"""


@dataclasses.dataclass(eq=False)
class Planner:
    """LLM planner; `use_experience=False` is the LLM-only planner of the ablation's base model;
    `decompose_header=None` plans the whole task as one sub-goal. `calls` and `parse_failures` count
    the LLM calls and the replies that did not parse."""

    llm: Any
    header: str = MINECRAFT_HEADER
    use_experience: bool = True
    retries: int = 2
    max_tokens: int = 256
    decompose_header: str | None = DECOMPOSE_HEADER
    calls: int = dataclasses.field(default=0, init=False)
    parse_failures: int = dataclasses.field(default=0, init=False)

    def _experience(self, experience: list[SuccessCase]) -> str:
        if self.use_experience and experience:
            return " | ".join(f"task {c.task}: plan {json.dumps(c.plan[:12])}" for c in experience[:2])
        return "none"

    @staticmethod
    def _info(task_info: dict[str, Any]) -> str:
        return ", ".join(f"{k}: {v}" for k, v in task_info.items() if v is not None)

    def decompose_prompt(self, task_info: dict[str, Any], scene: str, inventory: dict[str, int],
                         experience: list[SuccessCase], feedback: str = "") -> str:
        inv = json.dumps({k: v for k, v in inventory.items() if v > 0})
        return (f"{self.decompose_header}USER:\n- task: {self._info(task_info)}\n- current environment: {scene}\n"
                f"- inventory: {inv}\n- based on experience: {self._experience(experience)}\n"
                f"- the reflection is: {feedback or 'none'}\nSYSTEM:\n")

    def decompose(self, task_info: dict[str, Any], scene: str, inventory: dict[str, int],
                  experience: list[SuccessCase] | None = None, feedback: str = "") -> list[str] | None:
        """Eq. 1, first level: the sub-goals g_1..g_n, or None (no decomposition prompt, or unparseable)."""
        if self.decompose_header is None:
            return None
        prompt = self.decompose_prompt(task_info, scene, inventory, experience or [], feedback)
        return self._ask(prompt, parse_subgoals, min(self.max_tokens, 128))

    def prompt(self, task_info: dict[str, Any], scene: str, inventory: dict[str, int],
               experience: list[SuccessCase], feedback: str, subgoal: str | None = None,
               rules: list[str] | None = None) -> str:
        inv = json.dumps({k: v for k, v in inventory.items() if v > 0})
        goal = f"- current sub-goal: {subgoal}\n" if subgoal else ""
        guide = f"- known rules: {'; '.join(rules)}\n" if rules else ""
        return (f"{self.header}USER:\n- task: {self._info(task_info)}\n{goal}- current environment: {scene}\n"
                f"- inventory: {inv}\n- based on experience: {self._experience(experience)}\n{guide}"
                f"- the reflection is: {feedback or 'none'}\nSYSTEM:\n")

    def plan(self, task_info: dict[str, Any], scene: str, inventory: dict[str, int],
             experience: list[SuccessCase] | None = None, feedback: str = "", subgoal: str | None = None,
             rules: list[str] | None = None) -> list[dict[str, Any]] | None:
        """Eq. 1, second level: a flat list of {"name", "args"} actions for `subgoal` (the whole task when
        None), or None after `retries` unparseable replies."""
        prompt = self.prompt(task_info, scene, inventory, experience or [], feedback, subgoal, rules)
        return self._ask(prompt, parse_workflow, self.max_tokens)

    def _ask(self, prompt: str, parse: Callable[[str], list[Any] | None], max_tokens: int) -> list[Any] | None:
        """The LLM's parsed reply: greedy first, then `retries` more tries at temperature 0.8; None if
        no reply parses."""
        for attempt in range(self.retries + 1):
            self.calls += 1
            reply = self.llm.complete(prompt, max_tokens=max_tokens, temperature=0.0 if attempt == 0 else 0.8,
                                      seed=attempt, stop=["\nUSER:"])[0]
            parsed = parse(reply)
            if parsed:
                return parsed
            self.parse_failures += 1
        return None
