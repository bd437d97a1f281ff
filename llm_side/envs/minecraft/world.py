"""The text Minecraft world's simulation: one survival episode's state and what each action does to
it, each action costing game ticks. The action grammar is `grammar.py`, the world's tables (terrain,
ore depths, mobs, costs) `tables.py`, the game rules read from minecraft-data `data.py`.

Why a world of our own: no real Minecraft runs offline. It is faithful where planning is concerned
(recipes, harvest tools, drops and durability come from `data.py`), and it has the "environmental
disruptions" of Figure 6: night with hostile mobs, mobs in dark caves, health, tools that wear and
break, furnaces that need fuel. Invalid actions return a `Failed: ...` message that says why and
what would fix it; they never raise.

Modelling choices (documented, not from the paper; the tables' own are in `tables.py`): `find`
reveals a patch (a tree, a vein) of a few units; `mine` needs the target approached. Break time
follows vanilla: 30 * hardness / tool speed ticks with the right tool, 5/1.5 times that without it.
Loot is one roll of a loot table (`roll_loot`), whether a block is mined, a creature is killed by
`attack` or a hostile mob dies in a hazard fight. Digging (`dig-down`, `dig-up`) breaks one stone
block per y level with a pickaxe, collects its cobblestone, and wears the pickaxe one use per block,
in either direction.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter

from llm_side.envs.minecraft.data import FUEL_TICKS, SMELT_TICKS, SMELTING, GameData, Loot
from llm_side.envs.minecraft.grammar import Action, ActionError, parse_action
from llm_side.envs.minecraft.tables import (
    APPLY,
    BEDROCK_Y,
    BIOME_WEIGHTS,
    BIOMES,
    COST,
    DAY_TICKS,
    HOSTILE,
    MAX_HEALTH,
    MOBS,
    NIGHT,
    SEARCH_CHUNKS,
    SURFACE_Y,
    SWORD_DAMAGE,
    TOOL_FOR_MATERIAL,
    TOOL_SPEED,
    UNDERGROUND,
    WALK_TICKS_PER_BLOCK,
)


def roll_loot(rng: random.Random, table: list[Loot]) -> Counter:
    """One roll of a loot table: each entry drops with its chance, in a count from its range."""
    got: Counter = Counter()
    for loot in table:
        if rng.random() < loot.chance:
            got[loot.item] += rng.randint(*loot.count_range)
    return got


@dataclasses.dataclass
class Outcome:
    """What one action did: whether it worked, the observation text, and the game ticks it took."""

    ok: bool
    message: str
    ticks: int


class World:
    """One survival episode's world state. `act(text)` applies an action and returns its `Outcome`."""

    def __init__(self, data: GameData, seed: int = 0, hazards: bool = True):
        self.data = data
        self.rng = random.Random(seed)
        self.hazards = hazards
        weights = list(BIOME_WEIGHTS.values())
        self.chunks = [self.rng.choices(list(BIOME_WEIGHTS), weights)[0] for _ in range(2 * SEARCH_CHUNKS + 1)]
        self.chunks[SEARCH_CHUNKS] = self.rng.choice(["forest", "plains"])  # spawn like vanilla
        self.x = SEARCH_CHUNKS * 16 + 8
        self.y = SURFACE_Y
        self.tick = self.rng.randrange(0, 6000)  # start in the morning
        self.elapsed = 0
        self.health = MAX_HEALTH
        self.inventory: Counter = Counter()
        self.equipped: str | None = None
        self.wear: dict[str, int] = {}  # damage taken by the tool in use of each kind
        self.visible: dict[str, int] = {}  # thing -> units left in the found patch
        self.near: str | None = None
        self.fuel_ticks = 0
        self.dead = False
        self.events: list[str] = []

    # ---- observations -------------------------------------------------------------------------
    @property
    def biome(self) -> str:
        if self.y < SURFACE_Y - 1:
            return "underground"
        return self.chunks[min(max(self.x // 16, 0), len(self.chunks) - 1)]

    def is_night(self) -> bool:
        t = self.tick % DAY_TICKS
        return NIGHT[0] <= t < NIGHT[1]

    def describe(self) -> str:
        t = self.tick % DAY_TICKS
        inv = ", ".join(f"{k}: {v}" for k, v in sorted(self.inventory.items()) if v > 0) or "empty"
        eq = self.equipped or "nothing"
        if self.equipped and self.data.durability(self.equipped):
            d = self.data.durability(self.equipped)
            eq += f" (durability {d - self.wear.get(self.equipped, 0)}/{d})"
        near = ", ".join(f"{k}{' (next to you)' if k == self.near else ''}" for k in self.visible)
        near = near or "nothing found yet"
        return (f"Position: y={self.y} ({self.biome}); time: {'night' if self.is_night() else 'day'} "
                f"(tick {t}/24000; {self.elapsed} ticks used)\nHealth: {self.health:.0f}/{MAX_HEALTH:.0f}\n"
                f"Equipped: {eq}\nInventory: {inv}\nNearby: {near}")

    # ---- the step -----------------------------------------------------------------------------
    def act(self, text: str) -> Outcome:
        """Apply one action; never raises for bad input."""
        if self.dead:
            return Outcome(False, "Failed: you are dead.", 0)
        try:
            a = parse_action(text)
        except ActionError as e:
            return self._spend(Outcome(False, f"Failed: {e}", 1))
        handler = getattr(self, "_" + a.name.replace("-", "_"))
        out: Outcome = handler(a)
        return self._spend(out)

    def _spend(self, out: Outcome) -> Outcome:
        self.tick += out.ticks
        self.elapsed += out.ticks
        msg = out.message
        if self.hazards and out.ticks > 0:
            msg += self._hazards(out.ticks)
        return Outcome(out.ok and not self.dead, msg, out.ticks)

    def _hazards(self, ticks: int) -> str:
        rate = 0.0
        if self.y < SURFACE_Y - 8:
            rate = 1 / 6000  # dark caves spawn mobs at any time
        elif self.is_night():
            rate = 1 / 2500
        notes = ""
        if rate and self.rng.random() < 1 - math.exp(-ticks * rate):
            mob = self.rng.choice(HOSTILE)
            sword = self.equipped if self.equipped in SWORD_DAMAGE else None
            hits = math.ceil(MOBS[mob]["health"] / SWORD_DAMAGE.get(sword, 1))
            damage = min(MOBS[mob]["damage"] * hits / 4, 8.0)
            self.health -= damage
            notes += f" A {mob} attacked you (-{damage:.0f} health)."
            if sword:
                self._wear(sword, hits)
            if self.health <= 0:
                self.dead = True
                return notes + " You died."
            self.inventory.update(roll_loot(self.rng, self.data.entity_loot.get(mob, [])))
        self.health = min(MAX_HEALTH, self.health + ticks / 400)  # natural regeneration on a full stomach
        return notes

    # ---- tools --------------------------------------------------------------------------------
    def _tool(self, a: Action) -> tuple[str | None, str | None]:
        """The tool an action uses: the named one (equipping it) or the equipped one."""
        tool = a.tool or self.equipped
        if tool and self.inventory[tool] <= 0:
            return None, f"Failed: you have no {tool}; craft it first (inventory: {self._inv_short()})."
        if a.tool and a.tool != self.equipped:
            self.equipped = a.tool
        return tool, None

    def _wear(self, tool: str, uses: int = 1) -> str:
        maxd = self.data.durability(tool)
        if not maxd or self.inventory[tool] <= 0:
            return ""
        self.wear[tool] = self.wear.get(tool, 0) + uses
        if self.wear[tool] >= maxd:
            self.inventory[tool] -= 1
            self.wear[tool] = 0
            if self.inventory[tool] <= 0:
                del self.inventory[tool]
                if self.equipped == tool:
                    self.equipped = None
            self.events.append(f"broke:{tool}")
            return f" Your {tool} broke!"
        return ""

    def _inv_short(self) -> str:
        return ", ".join(f"{k}: {v}" for k, v in sorted(self.inventory.items()) if v > 0) or "empty"

    def break_ticks(self, block: str, tool: str | None) -> int:
        info = self.data.blocks.get(block, {})
        hardness = max(float(info.get("hardness") or 0.0), 0.05)
        speed, right = 1.0, True
        kind = TOOL_FOR_MATERIAL.get(info.get("material", ""))
        if tool and kind and tool.endswith("_" + kind):
            speed = TOOL_SPEED.get(tool.split("_")[0], 1)
        needs = self.data.harvest_tools(block)
        if needs and tool not in needs:
            right = False
        return max(1, math.ceil(30 * hardness / speed * (1 if right else 5 / 1.5)))

    # ---- actions ------------------------------------------------------------------------------
    def _where(self, obj: str) -> str:
        places = [b for b, things in BIOMES.items() if obj in things]
        under = UNDERGROUND.get(obj)
        parts = []
        if places:
            parts.append("on the surface in " + "/".join(places))
        if under:
            parts.append(f"underground at y {under[0]}..{under[1]} (dig-down there)")
        return " or ".join(parts) or "nowhere in this world"

    def _find(self, a: Action) -> Outcome:
        obj = a.obj
        assert obj is not None
        if obj in self.visible:
            return Outcome(True, f"OK: {obj} is already in sight.", 1)
        if obj in HOSTILE:
            if self.is_night() or self.y < SURFACE_Y - 8:
                self.visible[obj] = 1
                return Outcome(True, f"OK: found a {obj}.", 100)
            return Outcome(False, f"Failed: no {obj} around; hostile mobs appear at night or in caves.", 200)
        if self.y < SURFACE_Y - 1:
            band = UNDERGROUND.get(obj)
            if not band or not band[0] <= self.y <= band[1]:
                return Outcome(False, f"Failed: no {obj} at y={self.y}; {obj} is found {self._where(obj)}.", 300)
            ticks = int(self.rng.expovariate(1 / band[3])) + 20
            self.visible = {obj: band[2]}
            self.near = None
            return Outcome(True, f"OK: found {obj} after {ticks} ticks of tunnelling.", ticks)
        for dist in range(0, SEARCH_CHUNKS):
            for c in {SEARCH_CHUNKS + dist, SEARCH_CHUNKS - dist} if dist else {SEARCH_CHUNKS}:
                cx = self.x // 16 + (c - SEARCH_CHUNKS)
                if 0 <= cx < len(self.chunks) and obj in BIOMES[self.chunks[cx]]:
                    blocks = abs(cx * 16 + 8 - self.x)
                    self.x = cx * 16 + 8
                    self.visible = {obj: BIOMES[self.chunks[cx]][obj]}
                    self.near = None
                    ticks = blocks * WALK_TICKS_PER_BLOCK + 40
                    return Outcome(True, f"OK: found {obj} in a {self.chunks[cx]} biome {blocks} blocks away.",
                                   ticks)
        return Outcome(False, f"Failed: no {obj} on the surface nearby; {obj} is found {self._where(obj)}.",
                       SEARCH_CHUNKS * 16 * WALK_TICKS_PER_BLOCK // 4)

    def _approach(self, a: Action) -> Outcome:
        if a.obj not in self.visible:
            return Outcome(False, f"Failed: no {a.obj} in sight; use 'find {a.obj}' first.", 5)
        self.near = a.obj
        return Outcome(True, f"OK: you are next to the {a.obj}.", COST["approach"])

    def _mine(self, a: Action) -> Outcome:
        obj = a.obj
        assert obj is not None
        if obj not in self.data.blocks:
            hint = " (it is an item: craft or smelt it)" if obj in self.data.items else ""
            return Outcome(False, f"Failed: '{obj}' is not a block that can be mined{hint}.", 1)
        if obj not in self.visible:
            return Outcome(False, f"Failed: no {obj} in sight; use 'find {obj}' then 'approach {obj}'.", 5)
        if self.near != obj:
            return Outcome(False, f"Failed: {obj} is too far away; use 'approach {obj}' first.", 5)
        tool, err = self._tool(a)
        if err:
            return Outcome(False, err, 1)
        ticks = self.break_ticks(obj, tool)
        needs = self.data.harvest_tools(obj)
        broke = self._wear(tool) if tool else ""
        self._use_patch(obj)
        if needs and tool not in needs:
            return Outcome(False, f"Failed: the {obj} broke but dropped nothing: {obj} needs one of "
                           f"{', '.join(sorted(needs))} (you used {tool or 'your hand'}).{broke}", ticks)
        got = roll_loot(self.rng, self.data.drops(obj))
        self.inventory.update(got)
        what = ", ".join(f"{v} {k}" for k, v in got.items()) or "nothing this time (drops are random; try again)"
        return Outcome(True, f"OK: mined {obj}, got {what}.{broke}", ticks)

    def _use_patch(self, obj: str) -> None:
        self.visible[obj] -= 1
        if self.visible[obj] <= 0:
            del self.visible[obj]
            self.near = None

    def _craft(self, a: Action) -> Outcome:
        obj = a.obj
        assert obj is not None
        if obj in SMELTING.values() and obj not in self.data.recipes:
            return Outcome(False, f"Failed: {obj} is smelted, not crafted; use 'smelt {obj} using furnace'.", 1)
        recipes = self.data.recipes.get(obj)
        if not recipes:
            return Outcome(False, f"Failed: there is no crafting recipe for '{obj}'.", 1)
        made = 0
        for _ in range(a.count):
            have = [r for r in recipes if all(self.inventory[i] >= n for i, n in r.ingredients)]
            if not have:
                break
            r = have[0]
            if r.needs_table and self.inventory["crafting_table"] <= 0:
                return Outcome(made > 0, f"Failed: {obj} needs the 3x3 grid of a crafting table; craft a "
                               "crafting_table (4 oak_planks) first." + (f" Crafted {made} before." if made else ""),
                               COST["craft"])
            self.inventory.subtract(dict(r.ingredients))
            self.inventory[obj] += r.count
            made += r.count
        self.inventory = +self.inventory
        if not made:
            need = " or ".join(", ".join(f"{n} {i}" for i, n in r.ingredients) for r in recipes[:3])
            return Outcome(False, f"Failed: not enough materials for {obj}; it needs {need} "
                           f"(inventory: {self._inv_short()}).", COST["craft"])
        return Outcome(True, f"OK: crafted {made} {obj}.", COST["craft"] * a.count)

    def _smelt(self, a: Action) -> Outcome:
        obj = a.obj
        sources = [s for s, r in SMELTING.items() if r == obj]
        if not sources:
            return Outcome(False, f"Failed: nothing smelts into '{obj}'.", 1)
        if self.inventory["furnace"] <= 0:
            return Outcome(False, "Failed: smelting needs a furnace in your inventory (craft one from 8 "
                           "cobblestone at a crafting table).", 1)
        made, ticks = 0, 0
        for _ in range(a.count):
            src = next((s for s in sources if self.inventory[s] > 0), None)
            if src is None:
                break
            while self.fuel_ticks < SMELT_TICKS:
                fuel = next((f for f in FUEL_TICKS if self.inventory[f] > 0 and f != src), None)
                if fuel is None:
                    break
                self.inventory[fuel] -= 1
                self.fuel_ticks += FUEL_TICKS[fuel]
            if self.fuel_ticks < SMELT_TICKS:
                self.inventory = +self.inventory
                msg = ("Failed: the furnace has no fuel; get coal, charcoal, logs or planks."
                       + (f" Smelted {made} {obj} before." if made else ""))
                return Outcome(made > 0, msg, ticks + 1)
            self.fuel_ticks -= SMELT_TICKS
            self.inventory[src] -= 1
            self.inventory[obj] += 1
            made += 1
            ticks += SMELT_TICKS
        self.inventory = +self.inventory
        if not made:
            return Outcome(False, f"Failed: smelting {obj} needs one of {', '.join(sources)} in the inventory.", 1)
        return Outcome(True, f"OK: smelted {made} {obj}.", ticks)

    def _attack(self, a: Action) -> Outcome:
        obj = a.obj
        assert obj is not None
        if obj not in MOBS:
            return Outcome(False, f"Failed: '{obj}' is not a creature you can attack.", 1)
        if obj not in self.visible:
            return Outcome(False, f"Failed: no {obj} in sight; use 'find {obj}' first.", 5)
        tool, err = self._tool(a)
        if err:
            return Outcome(False, err, 1)
        hits = math.ceil(MOBS[obj]["health"] / SWORD_DAMAGE.get(tool or "", 1))
        self.health -= MOBS[obj]["damage"] * hits / 3
        broke = self._wear(tool, hits) if tool else ""
        if self.health <= 0:
            self.dead = True
            return Outcome(False, f"Failed: the {obj} killed you.", hits * 10)
        self._use_patch(obj)
        got = roll_loot(self.rng, self.data.entity_loot.get(obj, []))
        self.inventory.update(got)
        return Outcome(True, f"OK: killed the {obj}, got {', '.join(got) or 'nothing'}.{broke}", hits * 10)

    def _equip(self, a: Action) -> Outcome:
        if self.inventory[a.obj] <= 0:
            return Outcome(False, f"Failed: no {a.obj} in your inventory to equip.", 1)
        self.equipped = a.obj
        return Outcome(True, f"OK: equipped {a.obj}.", COST["equip"])

    def _dig_down(self, a: Action) -> Outcome:
        target = max(BEDROCK_Y, int(a.y_level or 0))
        if target >= self.y:
            return Outcome(False, f"Failed: you are at y={self.y}; dig-down needs a lower y level.", 1)
        return self._dig(a, target)

    def _dig_up(self, a: Action) -> Outcome:
        if self.y >= SURFACE_Y:
            return Outcome(False, "Failed: you are already on the surface.", 1)
        return self._dig(a, SURFACE_Y)

    def _dig(self, a: Action, target: int) -> Outcome:
        """Break one stone block per y level towards `target` with a pickaxe; stops where it breaks."""
        way = "down" if target < self.y else "up"
        tool, err = self._tool(a)
        if err:
            return Outcome(False, err, 1)
        needs = self.data.harvest_tools("stone") or set()
        if tool not in needs:
            return Outcome(False, "Failed: digging through stone needs a pickaxe "
                           f"({', '.join(sorted(needs))}); you have {tool or 'your hand'} equipped.", 20)
        ticks, msg = 0, ""
        while self.y != target:
            self.y += 1 if way == "up" else -1
            ticks += self.break_ticks("stone", tool)
            self.inventory["cobblestone"] += 1
            msg = self._wear(tool)
            if msg:
                break
        self.visible, self.near = {}, None
        return Outcome(True, f"OK: dug {way} to y={self.y}.{msg}", ticks)

    def _apply(self, a: Action) -> Outcome:
        tool, err = self._tool(a)
        if err:
            return Outcome(False, err, 1)
        result = APPLY.get((a.obj or "", tool or ""))
        if result is None:
            return Outcome(False, f"Failed: applying {tool or 'your hand'} to {a.obj} does nothing.", 5)
        if a.obj not in self.visible:
            return Outcome(False, f"Failed: no {a.obj} in sight; use 'find {a.obj}' first.", 5)
        self.inventory[result] += 1
        if result.endswith("_bucket"):
            self.inventory["bucket"] -= 1
        self.inventory = +self.inventory
        return Outcome(True, f"OK: got {result}.{self._wear(tool) if tool else ''}", COST["apply"])
