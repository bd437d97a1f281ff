"""`--env plancraft`: the Plancraft benchmark (Dagan et al., PyPI `plancraft==0.4.9`, offline) as a
`TextEnv`: a crafting-table GUI with slots [0] (output), [A1]..[C3] (grid), [I1]..[I36] (inventory),
the actions `move: from [X] to [Y] with quantity N`, `smelt: ...` and `impossible: <reason>`, and
train/val/test splits with impossible tasks (stopping with `impossible` on those is a success).

Task ids are the dataset's example ids (VAL0491, TEST0487, ...). Options: split (default
val.small), max_steps (default 30, the package's own limit), resolution (low|medium|high image
size the package renders internally; low is fastest).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, Literal

from llm_side.harness.contracts import Observation, StepResult
from muse_common.settings import build_options, integer_at_least, setting

SPLITS = ("train", "val", "test", "val.small", "val.small.easy", "test.small")
INSTRUCTIONS = (
    "Actions: `move: from [Source] to [Target] with quantity N` moves items between slots; "
    "`smelt: from [Source] to [Target] with quantity N` smelts; `impossible: <reason>` stops when the "
    "target cannot be crafted from the inventory. Slots: [0] crafting output, [A1]..[C3] the 3x3 grid "
    "(rows A-C, columns 1-3), [I1]..[I36] the inventory. Craft by placing ingredients in the grid in "
    "the recipe's shape, then move the result from [0] into an empty inventory slot."
)


def _plancraft() -> Any:
    try:
        import plancraft.simple as simple
    except ImportError as e:
        raise ImportError(
            "--env plancraft needs the 'plancraft' package: pip install --no-deps plancraft==0.4.9 "
            "pydantic-settings loguru networkx (its full dependency list pulls wandb/hydra, not needed here)"
        ) from e
    return simple


@functools.lru_cache(maxsize=8)
def _examples(split: str) -> dict[str, Any]:
    return {ex.id: ex for ex in _plancraft().get_plancraft_examples(split)}


def split_of(task_id: str) -> list[str]:
    """Splits that may hold an id (TRAIN*/VAL*/TEST*); small splits are subsets of the big ones."""
    head = task_id.upper()
    for prefix, split in (("TRAIN", "train"), ("VAL", "val"), ("TEST", "test")):
        if head.startswith(prefix):
            return [split]
    return list(SPLITS)


class PlancraftEnv:
    name = "plancraft"

    def __init__(self, split: str = "val.small", max_steps: int = 30, resolution: str = "low"):
        if split not in SPLITS:
            raise ValueError(f"unknown plancraft split '{split}'; choose one of: {', '.join(SPLITS)}")
        if resolution not in ("low", "medium", "high"):
            raise ValueError("plancraft resolution must be low, medium or high")
        self.split = split
        self.default_max_steps = int(max_steps)
        self.resolution = resolution
        self.wrapper: Any = None
        self.example: Any = None

    def task_ids(self, split: str | None = None) -> list[str]:
        split = split or self.split
        if split not in SPLITS:
            raise ValueError(f"unknown plancraft split '{split}'; choose one of: {', '.join(SPLITS)}")
        return list(_examples(split))

    def example_of(self, task_id: str) -> Any:
        for split in split_of(task_id):
            ex = _examples(split).get(task_id)
            if ex is not None:
                return ex
        raise ValueError(f"unknown plancraft task '{task_id}'; list ids with `muse-llm tasks --env plancraft`")

    def reset(self, task_id: str, seed: int = 0) -> Observation:
        simple = _plancraft()
        from plancraft.environment.actions import (
            ImpossibleActionHandler,
            MoveActionHandler,
            SmeltActionHandler,
        )

        self.example = self.example_of(task_id)
        self.wrapper = simple.PlancraftGymWrapper(
            self.example, actions=[MoveActionHandler(), SmeltActionHandler(), ImpossibleActionHandler()],
            max_steps=self.default_max_steps, resolution=self.resolution)
        obs, *_ = self.wrapper.step()
        return Observation(text=obs["text"], task=f"Craft an item of type: {self.example.target}",
                           admissible_actions=None, info=self._info())

    def step(self, action: str) -> StepResult:
        if self.wrapper is None:
            raise RuntimeError("call reset(task_id) before step()")
        obs, reward, terminated, truncated, info = self.wrapper.step(action)
        won = bool(reward > 0)
        return StepResult(observation=obs.get("text", ""), reward=float(reward), done=bool(terminated or truncated),
                          won=won, score=None, admissible_actions=None, info={**self._info(), **info})

    def _info(self) -> dict[str, Any]:
        ex = self.example
        return {"target": ex.target, "impossible": ex.impossible, "complexity": ex.complexity_split,
                "optimal_path_length": ex.optimal_path_length}

    def task_info(self, task_id: str) -> dict[str, Any]:
        ex = self.example_of(task_id)
        return {"task": ex.target, "quantity": 1}

    def admissible_actions(self) -> list[str] | None:
        return None

    def instructions(self) -> str:
        return INSTRUCTIONS

    def restart(self) -> None:
        self.wrapper = None

    def close(self) -> None:
        self.wrapper = None


@dataclasses.dataclass(frozen=True)
class Options:
    """Plancraft's options (`--env-opt key=value`)."""

    split: str = "val.small"
    """Default split of `task_ids`: one of SPLITS."""
    max_steps: int = setting(30, integer_at_least(1))
    """Actions per episode."""
    resolution: Literal["low", "medium", "high"] = "low"
    """Resolution of the crafting-table description."""


def make_env(opts: Options | Mapping[str, Any] | None = None, **options: Any) -> PlancraftEnv:
    """The env from an `Options` or from keyword options (`make_env(split="val")`)."""
    return PlancraftEnv(**dataclasses.asdict(build_options(Options, opts or options, "plancraft")))
