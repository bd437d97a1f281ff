"""Game rules of the text Minecraft world, read from the `minecraft-data` package (Java 1.16.5).

Why from data: planning is only meaningful when recipes, harvest tools and drops are the real ones.
What comes from `minecraft-data`: crafting recipes (shaped/shapeless; a recipe needs the 3x3 grid
of a crafting table when its shape is larger than 2x2 or it has more than 4 ingredients), which
tools can harvest a block (`blocks_name[b]["harvestTools"]`), what a block drops (`blockLoot`,
without silk touch: its `drops` field is wrong for stone), tool durability (`maxDurability`) and
entity loot. What is a small documented table here, because minecraft-data has none: smelting
(the vanilla 1.16 smelting recipes, `data/minecraft/recipes/*.json`), furnace fuel burn times and
the item tags the world needs (every wooden family collapses onto oak: the world grows oak only).

One task of paper 002 is from a later game version: Table 8's 50th task, "craft raw gold block", needs
the 1.17 items raw_gold and raw_gold_block. They are read from minecraft-data 1.17 (`LATER`): the
items, raw_gold_block's recipe (9 raw_gold, 3x3 grid) and gold_ore's 1.17 loot (raw_gold instead of
the ore itself); raw_gold smelts into gold_ingot as in 1.17's gold_ingot_from_smelting_raw_gold.json.
Everything else stays 1.16.5.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import Counter
from typing import Any

MC_VERSION = "1.16.5"
LATER = {"version": "1.17", "items": ("raw_gold", "raw_gold_block"), "recipes": ("raw_gold_block",),
         "loot": ("gold_ore",)}

# Vanilla 1.16 smelting recipes used by the tasks (ingredient -> result), as in
# data/minecraft/recipes/{iron_ingot,gold_ingot,glass,stone,charcoal}.json.
SMELTING: dict[str, str] = {
    "iron_ore": "iron_ingot",
    "gold_ore": "gold_ingot",
    "raw_gold": "gold_ingot",  # 1.17, see LATER
    "sand": "glass",
    "red_sand": "glass",
    "cobblestone": "stone",
    "oak_log": "charcoal",
    "beef": "cooked_beef",
    "porkchop": "cooked_porkchop",
}
# Vanilla fuel burn time in ticks (AbstractFurnaceTileEntity); one smelt takes 200 ticks.
FUEL_TICKS: dict[str, int] = {"coal": 1600, "charcoal": 1600, "oak_log": 300, "oak_planks": 300,
                              "crafting_table": 300, "oak_slab": 150, "stick": 100}
SMELT_TICKS = 200
# Where minecraft-data's flattened blockLoot loses a condition (shears, fortune-style chance tables),
# the vanilla 1.16 chance without tools is used: leaves drop saplings 5%, sticks 2%, apples 0.5%,
# themselves only with shears; gravel drops flint 10%.
LOOT_CHANCE_FIXES: dict[tuple[str, str], float] = {
    ("oak_leaves", "oak_leaves"): 0.0, ("oak_leaves", "oak_sapling"): 0.05, ("oak_leaves", "stick"): 0.02,
    ("oak_leaves", "apple"): 0.005, ("gravel", "flint"): 0.1,
}

_WOOD = ("oak", "spruce", "birch", "jungle", "acacia", "dark_oak", "crimson", "warped")
# Item tags the world needs: every wooden variant maps onto the oak item the world actually has.
TAGS: dict[str, str] = {}
for _w in _WOOD:
    for _suffix in ("planks", "slab", "log", "wood", "button", "pressure_plate", "boat", "sapling", "leaves"):
        TAGS[f"{_w}_{_suffix}"] = f"oak_{_suffix}"
    TAGS[f"{_w}_stem"] = "oak_log"
    TAGS[f"{_w}_hyphae"] = "oak_log"
    TAGS[f"stripped_{_w}_hyphae"] = "oak_log"
    TAGS[f"stripped_{_w}_log"] = "oak_log"
    TAGS[f"stripped_{_w}_wood"] = "oak_log"
    TAGS[f"stripped_{_w}_stem"] = "oak_log"

# What planners (and people) call things -> the game's item names.
ALIASES: dict[str, str] = {
    "log": "oak_log", "logs": "oak_log", "wood": "oak_log", "wood_log": "oak_log", "tree": "oak_log",
    "plank": "oak_planks", "planks": "oak_planks", "wooden_planks": "oak_planks",
    "wooden_slab": "oak_slab", "slab": "oak_slab", "boat": "oak_boat", "button": "oak_button",
    "wooden_button": "oak_button", "wooden_pressure_plate": "oak_pressure_plate",
    "pressure_plate": "oak_pressure_plate", "sapling": "oak_sapling", "leaves": "oak_leaves",
    "seeds": "wheat_seeds", "wheat_seed": "wheat_seeds", "carpentry_table": "smithing_table",
    "table": "crafting_table", "workbench": "crafting_table", "iron": "iron_ingot",
    "gold": "gold_ingot", "diamonds": "diamond", "redstone_dust": "redstone", "stone_block": "stone",
    "cobble": "cobblestone", "sticks": "stick", "iron_ores": "iron_ore", "tall_grass": "grass",
}


def canonical(name: str) -> str:
    """'Wooden Planks', 'planks', 'minecraft:oak_planks' -> 'oak_planks'."""
    n = name.strip().lower().removeprefix("minecraft:")
    n = re.sub(r"[\s\-]+", "_", n).strip("_")
    n = ALIASES.get(n, n)
    return TAGS.get(n, n)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One crafting recipe: what it makes, from what, and whether a crafting table is needed."""

    result: str
    count: int
    ingredients: tuple[tuple[str, int], ...]
    needs_table: bool

    def as_counter(self) -> Counter:
        return Counter(dict(self.ingredients))


@dataclasses.dataclass(frozen=True)
class Loot:
    item: str
    chance: float
    count_range: tuple[int, int]


class GameData:
    """The parsed rules. Build once with `load_game_data()` (cached)."""

    def __init__(self, md: Any):
        self._md = md
        self.items: dict[str, dict] = md.items_name
        self.blocks: dict[str, dict] = md.blocks_name
        self.recipes: dict[str, list[Recipe]] = _parse_recipes(md)
        self.loot: dict[str, list[Loot]] = _parse_loot(md.blockLoot_list)
        self.entity_loot: dict[str, list[Loot]] = _parse_loot(md.entityLoot_list, key="entity")

    def known(self, name: str) -> bool:
        return name in self.items or name in self.blocks

    def durability(self, item: str) -> int | None:
        return self.items.get(item, {}).get("maxDurability")

    def harvest_tools(self, block: str) -> set[str] | None:
        """Item names that can harvest `block`, or None when the hand is enough."""
        tools = self.blocks[block].get("harvestTools")
        if not tools:
            return None
        return {self._md.items[int(i)]["name"] for i in tools}

    def drops(self, block: str) -> list[Loot]:
        return self.loot.get(block, [])


def _names(md: Any, ids: Any) -> list[str]:
    out = []
    for v in ids:
        if v is None:
            continue
        if isinstance(v, dict):
            v = v["id"]
        out.append(canonical(md.items[v]["name"]))
    return out


def _parse_recipes(md: Any) -> dict[str, list[Recipe]]:
    out: dict[str, list[Recipe]] = {}
    for variants in md.recipes.values():
        for v in variants:
            result = canonical(md.items[v["result"]["id"]]["name"])
            if "inShape" in v:
                rows = v["inShape"]
                cells = [c for row in rows for c in row]
                needs_table = len(rows) > 2 or any(len(r) > 2 for r in rows)
            else:
                cells = v["ingredients"]
                needs_table = len(cells) > 4
            ingredients = tuple(sorted(Counter(_names(md, cells)).items()))
            recipe = Recipe(result, int(v["result"]["count"]), ingredients, needs_table)
            if recipe not in out.setdefault(result, []):
                out[result].append(recipe)
    return out


def _parse_loot(entries: list[dict], key: str = "block") -> dict[str, list[Loot]]:
    """Drops without silk touch. minecraft-data splits silk-touch alternatives as two 0.5 chances:
    the `noSilkTouch` branch is what a normal tool gets, always."""
    out: dict[str, list[Loot]] = {}
    for e in entries:
        drops = []
        for d in e["drops"]:
            if d.get("silkTouch"):
                continue
            chance = 1.0 if d.get("noSilkTouch") else float(d.get("dropChance", 1.0))
            chance = LOOT_CHANCE_FIXES.get((e[key], canonical(d["item"])), chance)
            rng = d.get("stackSizeRange") or [1, 1]
            lo = int(rng[0] or 1)
            hi = int(rng[-1] or lo)
            drops.append(Loot(canonical(d["item"]), chance, (lo, max(lo, hi))))
        out[e[key]] = drops
    return out


@functools.lru_cache(maxsize=1)
def load_game_data() -> GameData:
    """Parse minecraft-data once per process."""
    try:
        import minecraft_data
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError(
            "the Minecraft world needs the 'minecraft-data' package: "
            "pip install minecraft-data==3.20.0 (or the 'minecraft' extra)"
        ) from e
    data = GameData(minecraft_data(MC_VERSION))
    _add_later_items(data, minecraft_data(LATER["version"]))
    return data


def _add_later_items(data: GameData, md: Any) -> None:
    """The few 1.17 items, recipes and loot entries named in `LATER` (see the module docstring)."""
    for name in LATER["items"]:
        data.items[name] = md.items_name[name]
    later = _parse_recipes(md)
    for name in LATER["recipes"]:
        data.recipes[name] = later[name]
    loot = _parse_loot(md.blockLoot_list)
    for block in LATER["loot"]:
        data.loot[block] = loot[block]
