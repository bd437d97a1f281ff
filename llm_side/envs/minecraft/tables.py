"""The text Minecraft world's own tables: what `minecraft-data` does not say (terrain, ore depths,
mobs, tool speeds, day length, action costs). The game rules that do come from the data package
(recipes, harvest tools, drops, durability, smelting) live in `data.py`; the simulation that reads
both is `world.py`.

Modelling choices (documented, not from the paper): the surface is at y=64 and a 1-D strip of
16-block chunks, each with a biome; walking costs 5 ticks a block. Underground, what `find` can
see depends on the y band (vanilla 1.16 ore heights). 24000 ticks make a day; night is
13000-23000.
"""

from __future__ import annotations

SURFACE_Y = 64
BEDROCK_Y = 5
DAY_TICKS = 24000
NIGHT = (13000, 23000)
MAX_HEALTH = 20.0
WALK_TICKS_PER_BLOCK = 5
SEARCH_CHUNKS = 48

BIOMES: dict[str, dict[str, int]] = {  # surface things and patch sizes
    "forest": {"oak_log": 5, "oak_leaves": 8, "grass": 6, "dirt": 64, "grass_block": 64, "pig": 1},
    "plains": {"grass": 12, "dirt": 64, "grass_block": 64, "oak_log": 4, "oak_leaves": 6, "cow": 1,
               "sheep": 1, "pig": 1},
    "desert": {"sand": 64, "dirt": 16, "cactus": 3},
    "river": {"sand": 32, "gravel": 16, "dirt": 32, "water": 64, "grass": 4, "clay": 6},
    "mountains": {"stone": 64, "coal_ore": 6, "iron_ore": 3, "grass_block": 32, "dirt": 32, "gravel": 8},
}
BIOME_WEIGHTS = {"forest": 4, "plains": 4, "desert": 1, "river": 2, "mountains": 2}
# Underground: (min y, max y, patch size, search ticks) -- vanilla 1.16 ore distribution.
UNDERGROUND: dict[str, tuple[int, int, int, int]] = {
    "stone": (BEDROCK_Y, 62, 64, 20),
    "dirt": (50, 63, 16, 60),
    "gravel": (BEDROCK_Y, 62, 8, 200),
    "coal_ore": (BEDROCK_Y, 127, 6, 300),
    "iron_ore": (BEDROCK_Y, 63, 4, 600),
    "gold_ore": (BEDROCK_Y, 31, 4, 1200),
    "lapis_ore": (BEDROCK_Y, 30, 5, 1500),
    "redstone_ore": (BEDROCK_Y, 15, 4, 1200),
    "diamond_ore": (BEDROCK_Y, 15, 2, 2500),
}
MOBS: dict[str, dict[str, float]] = {  # health, damage dealt to the player per hit exchange
    "zombie": {"health": 20, "damage": 3}, "skeleton": {"health": 20, "damage": 3},
    "spider": {"health": 16, "damage": 2}, "pig": {"health": 10, "damage": 0},
    "cow": {"health": 10, "damage": 0}, "sheep": {"health": 8, "damage": 0},
}
HOSTILE = ("zombie", "skeleton", "spider")
TOOL_SPEED = {"wooden": 2, "stone": 4, "iron": 6, "diamond": 8, "netherite": 9, "golden": 12}
SWORD_DAMAGE = {"wooden_sword": 4, "golden_sword": 4, "stone_sword": 5, "iron_sword": 6,
                "diamond_sword": 7, "netherite_sword": 8}
TOOL_FOR_MATERIAL = {"rock": "pickaxe", "wood": "axe", "dirt": "shovel", "plant": "axe"}
# apply(obj, tool) outcomes (vanilla interactions the tasks can use).
APPLY: dict[tuple[str, str], str] = {("sheep", "shears"): "white_wool", ("water", "bucket"): "water_bucket",
                                     ("grass", "shears"): "grass", ("oak_leaves", "shears"): "oak_leaves",
                                     ("cow", "bucket"): "milk_bucket"}
COST = {"approach": 40, "craft": 20, "equip": 5, "attack": 20, "apply": 20}  # game ticks per action


def deep_ores() -> dict[str, int]:
    """Ores found only below the surface -> the highest y they occur at (what the action help says)."""
    return {ore: band[1] for ore, band in UNDERGROUND.items() if ore.endswith("_ore") and band[1] < SURFACE_Y}
