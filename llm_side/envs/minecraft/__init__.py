"""`--env minecraft`: the offline tech-tree world with the 50 Metagent-P tasks as a `TextEnv`.

One env step is one high-level action (Table 5); the task's tick limit (12K/24K/36K game ticks,
Table 7) ends the episode, as does death. Success = the target item in the inventory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from llm_side.envs.minecraft.grammar import instructions
from llm_side.envs.minecraft.tasks import LEVELS, TASKS, get_task, task_ids
from llm_side.harness.contracts import Observation, StepResult
from muse_common.settings import build_options, integer_at_least, setting

__all__ = ["MinecraftEnv", "make_env", "report_tables", "task_ids"]

INSTRUCTIONS = instructions()


class MinecraftEnv:
    """A `TextEnv` over `world.World`; one instance runs one episode at a time."""

    name = "minecraft"
    default_max_steps = 300

    def __init__(self, hazards: bool = True, max_steps: int | None = None):
        from llm_side.envs.minecraft.data import load_game_data

        self.data = load_game_data()
        self.hazards = hazards
        if max_steps is not None:
            self.default_max_steps = int(max_steps)
        self.world: Any = None
        self.task: Any = None

    def task_ids(self, split: str | None = None) -> list[str]:
        return task_ids(split)

    def reset(self, task_id: str, seed: int = 0) -> Observation:
        from llm_side.envs.minecraft.world import World

        self.task = get_task(task_id)
        self.world = World(self.data, seed=seed, hazards=self.hazards)
        text = f"Task: {self.task.text} Tick limit: {self.task.tick_limit}.\n{self.world.describe()}"
        return Observation(text=text, task=self.task.text, admissible_actions=None, info=self._info())

    def step(self, action: str) -> StepResult:
        if self.world is None:
            raise RuntimeError("call reset(task_id) before step()")
        out = self.world.act(action)
        won = self.world.inventory[self.task.target] >= self.task.quantity
        over = self.world.elapsed >= self.task.tick_limit
        done = won or self.world.dead or over
        text = out.message
        if over and not won:
            text += f" Time is up ({self.task.tick_limit} ticks)."
        text += "\n" + self.world.describe()
        return StepResult(observation=text, reward=1.0 if won else 0.0, done=done, won=won, score=None,
                          info={**self._info(), "ok": out.ok, "dead": self.world.dead})

    def _info(self) -> dict[str, Any]:
        w = self.world
        return {"inventory": dict(w.inventory), "equipped": w.equipped, "health": w.health, "y": w.y,
                "ticks": w.elapsed, "nearby": list(w.visible), "level": self.task.level,
                "target": self.task.target, "task_id": self.task.task_id, "night": w.is_night()}

    def admissible_actions(self) -> list[str] | None:
        return None

    def instructions(self) -> str:
        return INSTRUCTIONS

    def task_info(self, task_id: str) -> dict[str, Any]:
        """The planner prompt's 'task information' block (Table 9)."""
        t = get_task(task_id)
        return {"task": t.target, "quantity": t.quantity, "tool": t.tool, "level": t.level,
                "tick_limit": t.tick_limit}

    def react_examples(self, task_id: str) -> str:
        return ("Task: Obtain 1 oak_planks.\n> find oak_log\nOK: found oak_log.\n> approach oak_log\n"
                "OK: you are next to the oak_log.\n> mine oak_log\nOK: mined oak_log, got 1 oak_log.\n"
                "> craft oak_planks\nOK: crafted 4 oak_planks.\n")

    def restart(self) -> None:
        self.world = None

    def close(self) -> None:
        self.world = None


@dataclasses.dataclass(frozen=True)
class Options:
    """The Minecraft text world's options (`--env-opt key=value`)."""

    hazards: bool = True
    """Night mobs and cave mobs that can end an episode."""
    max_steps: int | None = setting(None, integer_at_least(1))
    """Actions per episode; none = the task's own limit."""


def make_env(opts: Options | Mapping[str, Any] | None = None, **options: Any) -> MinecraftEnv:
    """The env from an `Options` or from keyword options (`make_env(hazards=False)`)."""
    return MinecraftEnv(**dataclasses.asdict(build_options(Options, opts or options, "minecraft")))


def _fmt(x: float) -> str:
    return f"{x:.2f}"


def _who(r: dict) -> str:
    """Agent name, with the Table 3 ablation rung when the record has one."""
    agent = str(r.get("agent", "?"))
    ab = r.get("ablation")
    return f"{agent} ({ab})" if ab and ab != "full" else agent


def _cell(rs: list[dict]) -> str:
    """"SR / RC": RC is paper 002's replanning count, the recoveries from failed states of the episodes
    that succeed (section 3.1.3), so it is "-" when none succeeded (Table 3's "0.00(-)")."""
    if not rs:
        return "-"
    sr = 100 * sum(bool(r.get("success")) for r in rs) / len(rs)
    won = [float(r["recoveries"]) for r in rs if r.get("success") and r.get("recoveries") is not None]
    rc = f"{sum(won) / len(won):.1f}" if won else "-"
    return f"{sr:.2f} / {rc}"


def report_tables(records: list[dict]) -> list[tuple[str, str]]:
    """Table 2/3 layout (SR % / RC per level, one row per agent or ablation rung; RC as in `_cell`),
    Table 8 (per task) and Table 4 (growth of the rule and experience pools over episodes)."""
    recs = [r for r in records if r.get("env", "minecraft") == "minecraft" and r.get("task") in TASKS]
    if not recs:
        return []
    agents = sorted({_who(r) for r in recs})
    by: dict[tuple[str, str], list[dict]] = {}
    by_task: dict[tuple[str, str], list[dict]] = {}
    for r in recs:
        by.setdefault((_who(r), TASKS[r["task"]].level), []).append(r)
        by_task.setdefault((_who(r), r["task"]), []).append(r)
    head = "| agent | " + " | ".join(LEVELS) + " |\n|---|" + "---|" * len(LEVELS) + "\n"
    rows = "".join(f"| {a} | " + " | ".join(_cell(by.get((a, lv), [])) for lv in LEVELS) + " |\n" for a in agents)
    tables = [("Minecraft: success rate (%) / replanning count (recoveries from failed states, successful "
               "episodes) per level (Tables 2-3)", head + rows)]
    head8 = "| level | task | " + " | ".join(agents) + " |\n|---|---|" + "---|" * len(agents) + "\n"
    rows8 = ""
    for tid, task in TASKS.items():
        if any((a, tid) in by_task for a in agents):
            cells = " | ".join(_cell(by_task.get((a, tid), [])) for a in agents)
            rows8 += f"| {task.level} | {tid} | {cells} |\n"
    tables.append(("Minecraft: SR (%) / RC per task (Table 8)", head8 + rows8))
    pools = [r for r in recs if "rule_pool" in r]
    if pools:
        head4 = "| agent | episodes | rules | success cases | failure cases |\n|---|---|---|---|---|\n"
        rows4 = ""
        for a in agents:
            rs = [r for r in pools if _who(r) == a]
            for n in sorted({max(1, round(len(rs) * q)) for q in (0.25, 0.5, 0.75, 1.0)}) if rs else []:
                r = rs[n - 1]
                sizes = (r["rule_pool"], r.get("success_pool", 0), r.get("failure_pool", 0))
                rows4 += f"| {a} | {n} | " + " | ".join(map(str, sizes)) + " |\n"
        tables.append(("Minecraft: rule and experience pool growth (Table 4)", head4 + rows4))
    ends = [r for r in recs if r.get("ended_by")]
    if ends:
        kinds = ("success", "tick_limit", "death", "action_cap", "error")
        head_e = "| agent | episodes | " + " | ".join(kinds) + " | mean ticks at the cap |\n|---|---|" + "---|" * (
            len(kinds) + 1) + "\n"
        rows_e = ""
        for a in agents:
            rs = [r for r in ends if _who(r) == a]
            if not rs:
                continue
            capped = [r["ticks"] for r in rs if r["ended_by"] == "action_cap" and r.get("ticks") is not None]
            mean = f"{sum(capped) / len(capped):.0f}" if capped else "-"
            rows_e += (f"| {a} | {len(rs)} | " + " | ".join(str(sum(r["ended_by"] == k for r in rs)) for k in kinds)
                       + f" | {mean} |\n")
        tables.append(("Minecraft: how episodes ended (action_cap = cut by the runner's action limit, 300 by "
                       "default, before the paper's tick limit)", head_e + rows_e))
    return tables
