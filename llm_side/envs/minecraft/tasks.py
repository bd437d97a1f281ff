"""The 50 Metagent-P tasks (paper 002, Table 7; Table 8 for the ones Table 7's extraction lost).

Each task: a stable id, the level, the paper's minimum sub-goal count, the tool/platform column,
the tick limit (12K / 24K / 36K) and the target item in this world. Choices: "carpentry table" is
the 1.16 smithing_table (2 iron ingots + 4 planks, which matches its level and 11 sub-goals);
"craft minecart" comes from Table 8 (hard); the 50th task is Table 8's "craft raw gold block" (complex:
9 raw gold from gold ore, which needs an iron pickaxe at y<=31; the 1.17 items come from `data.LATER`).
"mine iron ore" is medium, as Table 7 has it (8 sub-goals, stone pickaxe): 10 tasks per level.
"""

from __future__ import annotations

import dataclasses

LEVELS = ("basic", "easy", "medium", "hard", "complex")
STEP_LIMIT = {"basic": 12000, "easy": 12000, "medium": 24000, "hard": 36000, "complex": 36000}


@dataclasses.dataclass(frozen=True)
class Task:
    task_id: str
    name: str  # as in the paper's table
    level: str
    subgoals: int
    tool: str | None
    target: str
    quantity: int = 1

    @property
    def tick_limit(self) -> int:
        return STEP_LIMIT[self.level]

    @property
    def text(self) -> str:
        return f"Obtain {self.quantity} {self.target} ({self.name})."


_T = [  # id, paper name, level, sub-goals, tools/platform, target item
    ("mine_log", "mine log", "basic", 1, None, "oak_log"),
    ("mine_sand", "mine sand", "basic", 1, None, "sand"),
    ("mine_sapling", "mine sapling", "basic", 1, None, "oak_sapling"),
    ("mine_wheat_seeds", "mine wheat seeds", "basic", 1, None, "wheat_seeds"),
    ("mine_dirt", "mine dirt", "basic", 1, None, "dirt"),
    ("mine_grass", "mine grass", "basic", 1, None, "grass"),
    ("craft_planks", "craft plank", "basic", 2, None, "oak_planks"),
    ("craft_stick", "craft stick", "basic", 3, None, "stick"),
    ("craft_button", "craft button", "basic", 3, None, "oak_button"),
    ("craft_crafting_table", "craft crafting table", "basic", 3, None, "crafting_table"),
    ("craft_chest", "craft chest", "easy", 4, "crafting table", "chest"),
    ("craft_bowl", "craft bowl", "easy", 4, "crafting table", "bowl"),
    ("craft_boat", "craft boat", "easy", 4, "crafting table", "oak_boat"),
    ("craft_wooden_slab", "craft wooden slab", "easy", 5, "crafting table", "oak_slab"),
    ("craft_wooden_pressure_plate", "craft wooden pressure plate", "easy", 5, "crafting table",
     "oak_pressure_plate"),
    ("craft_ladder", "craft ladder", "easy", 5, "crafting table", "ladder"),
    ("craft_barrel", "craft barrel", "easy", 5, "crafting table", "barrel"),
    ("craft_wooden_axe", "craft wooden axe", "easy", 5, "crafting table", "wooden_axe"),
    ("craft_wooden_pickaxe", "craft wooden pickaxe", "easy", 5, "crafting table", "wooden_pickaxe"),
    ("craft_wooden_sword", "craft wooden sword", "easy", 5, "crafting table", "wooden_sword"),
    ("mine_cobblestone", "mine cobblestone", "medium", 6, "wooden pickaxe", "cobblestone"),
    ("mine_coal_ore", "mine coal ore", "medium", 7, "wooden pickaxe", "coal"),
    ("craft_furnace", "craft furnace", "medium", 7, "crafting table", "furnace"),
    ("craft_lever", "craft lever", "medium", 7, "crafting table", "lever"),
    ("craft_stone_pickaxe", "craft stone pickaxe", "medium", 7, "crafting table", "stone_pickaxe"),
    ("craft_stone_axe", "craft stone axe", "medium", 7, "crafting table", "stone_axe"),
    ("craft_stone_hoe", "craft stone hoe", "medium", 7, "crafting table", "stone_hoe"),
    ("craft_stone_shovel", "craft stone shovel", "medium", 7, "crafting table", "stone_shovel"),
    ("craft_stone_sword", "craft stone sword", "medium", 7, "crafting table", "stone_sword"),
    ("mine_iron_ore", "mine iron ore", "medium", 8, "stone pickaxe", "iron_ore"),
    ("smelt_glass", "smelt glass", "hard", 9, "furnace", "glass"),
    ("smelt_iron_ingot", "smelt iron ingot", "hard", 10, "furnace", "iron_ingot"),
    ("craft_iron_bars", "craft iron bars", "hard", 11, "crafting table", "iron_bars"),
    ("craft_carpentry_table", "craft carpentry table", "hard", 11, "crafting table", "smithing_table"),
    ("craft_iron_pickaxe", "craft iron pickaxe", "hard", 11, "crafting table", "iron_pickaxe"),
    ("craft_iron_door", "craft iron door", "hard", 11, "crafting table", "iron_door"),
    ("craft_iron_trapdoor", "craft iron trapdoor", "hard", 11, "crafting table", "iron_trapdoor"),
    ("craft_rail", "craft rail", "hard", 11, "crafting table", "rail"),
    ("craft_cauldron", "craft cauldron", "hard", 11, "crafting table", "cauldron"),
    ("craft_minecart", "craft minecart", "hard", 11, "crafting table", "minecart"),
    ("obtain_diamond", "obtain diamond", "complex", 12, "iron pickaxe", "diamond"),
    ("mine_redstone", "mine redstone", "complex", 12, "iron pickaxe", "redstone"),
    ("craft_dropper", "craft dropper", "complex", 13, "crafting table", "dropper"),
    ("craft_redstone_torch", "craft redstone torch", "complex", 13, "crafting table", "redstone_torch"),
    ("craft_compass", "craft compass", "complex", 13, "crafting table", "compass"),
    ("craft_clock", "craft clock", "complex", 13, "crafting table", "clock"),
    ("craft_piston", "craft piston", "complex", 13, "crafting table", "piston"),
    ("craft_diamond_pickaxe", "craft diamond pickaxe", "complex", 13, "crafting table", "diamond_pickaxe"),
    ("craft_diamond_sword", "craft diamond sword", "complex", 13, "crafting table", "diamond_sword"),
    ("craft_raw_gold_block", "craft raw gold block", "complex", 13, "crafting table", "raw_gold_block"),
]
TASKS: dict[str, Task] = {t[0]: Task(*t) for t in _T}


def task_ids(split: str | None = None) -> list[str]:
    """All 50 ids in table order; `split` may name a level ('basic' ... 'complex') or be 'all'/None."""
    if split in (None, "all", "test", "train"):
        return list(TASKS)
    if split not in LEVELS:
        raise ValueError(f"unknown Minecraft split '{split}'; use 'all' or a level: {', '.join(LEVELS)}")
    return [t for t, task in TASKS.items() if task.level == split]


def get_task(task_id: str) -> Task:
    if task_id not in TASKS:
        raise ValueError(f"unknown Minecraft task '{task_id}'; list them with `muse-llm tasks --env minecraft`")
    return TASKS[task_id]
