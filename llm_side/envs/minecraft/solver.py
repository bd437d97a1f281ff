"""A planner over the real recipe graph plus the world's actions: from an inventory and a position,
the text actions that obtain an item. Used by tests (every task must be solvable) and as an oracle.

Why: it proves the world and the data agree (a task is only fair if some plan reaches it), and it
is the ground truth the verifier's learned rules can be checked against.
"""

from __future__ import annotations

import functools
import math
from collections import Counter

from llm_side.envs.minecraft.data import FUEL_TICKS, SMELT_TICKS, SMELTING, GameData, Recipe
from llm_side.envs.minecraft.tables import BIOMES, SURFACE_Y, UNDERGROUND
from llm_side.envs.minecraft.world import World

TOOL_TIERS = ("wooden", "stone", "iron", "diamond")


class Unsolvable(ValueError):
    """No plan in this world reaches the item."""


@functools.lru_cache(maxsize=4)
def _sources(data: GameData) -> dict[str, list[str]]:
    """item -> blocks of this world that drop it (with a non-zero chance)."""
    out: dict[str, list[str]] = {}
    for block in sorted({b for things in BIOMES.values() for b in things} | set(UNDERGROUND)):
        if block not in data.blocks:
            continue
        for loot in data.drops(block):
            if loot.chance > 0:
                out.setdefault(loot.item, []).append(block)
    return out


@functools.lru_cache(maxsize=4)
def reach_rank(data: GameData) -> dict[str, int]:
    """Item -> the round of the fixed point (drops, then smelting and recipes) that first reaches it
    from an empty inventory. Ways of making an item only from lower-ranked items form a DAG, so the
    planner never loops (iron_ingot <-> iron_nugget)."""
    rare = {lt.item for b in {b for bs in _sources(data).values() for b in bs} for lt in data.drops(b)
            if 0 < lt.chance < 0.25}
    reliable = {item for item, blocks in _sources(data).items()
                if any(lt.item == item and lt.chance >= 0.25 for b in blocks for lt in data.drops(b))}
    rank = {item: 0 for item in reliable}
    rnd = 0
    while True:
        rnd += 1
        new = {res for src, res in SMELTING.items() if src in rank and res not in rank}
        for item, recipes in data.recipes.items():
            if item not in rank and any(all(i in rank for i, _ in r.ingredients) for r in recipes):
                new.add(item)
        if not new:
            left = rare - set(rank)
            if not left:
                return rank
            new = left  # only a rare drop gives these (saplings, seeds, flint): last resort
        rank.update({item: rnd for item in new})


def reachable(data: GameData) -> set[str]:
    """Items obtainable in this world from an empty inventory."""
    return set(reach_rank(data))


class Planner:
    """Builds a plan by simulating the inventory while it expands needs depth-first."""

    def __init__(self, world: World):
        self.w = world
        self.data = world.data
        self.rank = reach_rank(self.data)
        self.inv: Counter = Counter(world.inventory)
        self.y = world.y
        self.fuel = world.fuel_ticks
        self.near = world.near
        self.visible = set(world.visible)
        self.plan: list[str] = []

    def obtain(self, item: str, n: int = 1, depth: int = 0) -> None:
        if depth > 40:
            raise Unsolvable(f"recipe recursion too deep at {item}")
        if self.inv[item] >= n:
            return
        need = n - self.inv[item]
        recipe = self._recipe(item)
        if recipe is not None:
            times = math.ceil(need / recipe.count)
            wants = [(ing, k * times) for ing, k in recipe.ingredients]
            if recipe.needs_table:
                wants.append(("crafting_table", 1))
            self._gather(wants, depth)
            for ing, k in recipe.ingredients:
                self.inv[ing] -= k * times
            self.inv[item] += recipe.count * times
            self.plan.append(f"craft {item}" + (f" x{times}" if times > 1 else ""))
            return
        src = next((s for s, r in SMELTING.items() if r == item and self._lower(s, item)), None)
        if src is not None:
            fuel_units = max(0, math.ceil((need * SMELT_TICKS - self.fuel) / FUEL_TICKS["oak_planks"]))
            wants = [("furnace", 1), (src, need)] + ([("oak_planks", fuel_units)] if fuel_units else [])
            self._gather(wants, depth)
            self.inv["oak_planks"] -= fuel_units
            self.fuel += fuel_units * FUEL_TICKS["oak_planks"] - need * SMELT_TICKS
            self.inv[src] -= need
            self.inv[item] += need
            self.plan.append(f"smelt {item}" + (f" x{need}" if need > 1 else ""))
            return
        blocks = _sources(self.data).get(item)
        if not blocks:
            raise Unsolvable(f"{item} cannot be obtained in this world")
        self._mine(self._best_block(item, blocks), item, need, depth)

    def _gather(self, wants: list[tuple[str, int]], depth: int) -> None:
        """Obtain several things so that all are in the inventory at once (they may share parts)."""
        for _ in range(8):
            for ing, k in wants:
                self.obtain(ing, k, depth + 1)
            if all(self.inv[ing] >= k for ing, k in wants):
                return
        raise Unsolvable(f"could not gather {wants}")

    def _recipe(self, item: str) -> Recipe | None:
        for r in self.data.recipes.get(item, []):
            if all(self._lower(i, item) for i, _ in r.ingredients):
                return r
        return None

    def _lower(self, part: str, item: str) -> bool:
        return part in self.rank and self.rank[part] < self.rank.get(item, 10**6)

    def _best_block(self, item: str, blocks: list[str]) -> str:
        """The block with the best drop chance; surface blocks first, ores underground."""
        if item == "cobblestone":
            return "stone"

        def key(b: str) -> tuple[int, float]:
            loot = next(lt for lt in self.data.drops(b) if lt.item == item)
            ore = b in UNDERGROUND and b.endswith("_ore")
            return (1 if ore else 0, -loot.chance)

        return min(blocks, key=key)

    def _tool_for(self, block: str) -> str | None:
        needs = self.data.harvest_tools(block)
        if not needs:
            return None
        have = [t for t in sorted(needs) if self.inv[t] > 0]
        if have:
            return have[0]
        for tier in TOOL_TIERS:
            if f"{tier}_pickaxe" in needs:
                return f"{tier}_pickaxe"
        return sorted(needs)[0]

    def _mine(self, block: str, item: str, need: int, depth: int) -> None:
        tool = self._tool_for(block)
        band = UNDERGROUND.get(block)
        on_surface = any(block in t for t in BIOMES.values())
        if tool:
            self.obtain(tool, 1, depth + 1)
        if on_surface and (not band or block == "stone" or self.y >= SURFACE_Y - 1):
            if self.y < SURFACE_Y and not (band and band[0] <= self.y <= band[1]):
                self._dig_up(depth)
        elif band and not band[0] <= self.y <= band[1]:
            if self.y < band[0]:
                self._dig_up(depth)
            pick = tool or self._tool_for("stone") or "wooden_pickaxe"
            self.obtain(pick, 1, depth + 1)
            target = max(min(band[1], SURFACE_Y - 10), band[0])
            self.plan.append(f"dig-down {target} with {pick}")
            self.y = target
            self.near, self.visible = None, set()
        loot = next(lt for lt in self.data.drops(block) if lt.item == item)
        per = max(loot.chance * (loot.count_range[0] + loot.count_range[1]) / 2, 1e-3)
        here = self.near == block
        for i in range(math.ceil(need / per)):
            if i == 0 and not here:
                if block not in self.visible:
                    self.plan.append(f"find {block}")
                self.plan.append(f"approach {block}")
            elif i and i % 4 == 0:
                self.plan += [f"find {block}", f"approach {block}"]
            self.plan.append(f"mine {block}" + (f" with {tool}" if tool else ""))
        self.near, self.visible = block, {block}
        self.inv[item] += need

    def _dig_up(self, depth: int) -> None:
        pick = self._tool_for("stone") or "wooden_pickaxe"
        self.obtain(pick, 1, depth + 1)
        self.plan.append(f"dig-up with {pick}")
        self.y = SURFACE_Y
        self.near, self.visible = None, set()


def solve(world: World, target: str, n: int = 1) -> list[str]:
    """Text actions that obtain `n` of `target` from the world's current state."""
    p = Planner(world)
    p.obtain(target, n)
    return p.plan


def run_oracle(world: World, target: str, n: int = 1, max_actions: int = 3000,
               tick_limit: int | None = None) -> tuple[bool, list[tuple[str, str]]]:
    """Re-plan after every action (so broken tools or empty patches are handled) until done."""
    log: list[tuple[str, str]] = []
    for _ in range(max_actions):
        if world.inventory[target] >= n:
            return True, log
        if world.dead or (tick_limit is not None and world.elapsed >= tick_limit):
            return False, log
        plan = solve(world, target, n)
        if not plan:
            break
        out = world.act(plan[0])
        log.append((plan[0], out.message))
    return world.inventory[target] >= n, log
