"""The text Minecraft world against the real game data (minecraft-data 1.16.5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_side.envs.minecraft import INSTRUCTIONS, make_env
from llm_side.envs.minecraft.data import LATER, SMELT_TICKS, SMELTING, canonical, load_game_data
from llm_side.envs.minecraft.grammar import ACTIONS, GRAMMAR, SYNTAX, ActionError, parse_action
from llm_side.envs.minecraft.tables import NIGHT, UNDERGROUND
from llm_side.envs.minecraft.world import World


@pytest.fixture(scope="module")
def data():
    return load_game_data()


def world_with(data, seed=0, hazards=False, **items) -> World:
    w = World(data, seed=seed, hazards=hazards)
    w.inventory.update(items)
    return w


def test_data_recipes_tools_and_drops_are_the_real_ones(data):
    (pick,) = [r for r in data.recipes["wooden_pickaxe"]]
    assert dict(pick.ingredients) == {"oak_planks": 3, "stick": 2} and pick.needs_table
    assert not data.recipes["crafting_table"][0].needs_table  # 2x2 fits the inventory grid
    assert data.recipes["oak_planks"][0].count == 4
    assert "wooden_pickaxe" not in data.harvest_tools("iron_ore")
    assert "stone_pickaxe" in data.harvest_tools("iron_ore")
    assert data.harvest_tools("diamond_ore") == {"iron_pickaxe", "diamond_pickaxe", "netherite_pickaxe"}
    assert [d.item for d in data.drops("stone")] == ["cobblestone"]  # not the wrong `drops` field
    assert [d.item for d in data.drops("diamond_ore")] == ["diamond"]
    assert data.durability("wooden_pickaxe") == 59 and data.durability("iron_pickaxe") == 250
    assert canonical("Wooden Planks") == "oak_planks" and canonical("carpentry table") == "smithing_table"


def test_wooden_pickaxe_cannot_mine_iron_ore(data):
    w = world_with(data, wooden_pickaxe=1, stone_pickaxe=1)
    w.y = 40
    assert w.act("find iron_ore").ok
    assert w.act("approach iron_ore").ok
    out = w.act("mine iron_ore with wooden_pickaxe")
    assert not out.ok and "needs one of" in out.message and w.inventory["iron_ore"] == 0
    w.act("find iron_ore")
    w.act("approach iron_ore")
    out = w.act("mine iron_ore with stone_pickaxe")
    assert out.ok and w.inventory["iron_ore"] == 1


def test_tools_break_after_their_durability(data):
    w = world_with(data, wooden_pickaxe=1)
    w.y = 40
    broke_at = None
    for i in range(1, 80):
        if "stone" not in w.visible:
            w.act("find stone")
        if w.near != "stone":
            w.act("approach stone")
        out = w.act("mine stone with wooden_pickaxe")
        if "broke" in out.message:
            broke_at = i
            break
    assert broke_at == data.durability("wooden_pickaxe")
    assert w.inventory["wooden_pickaxe"] == 0 and w.equipped is None
    assert w.inventory["cobblestone"] == broke_at
    assert "no wooden_pickaxe" in w.act("mine stone with wooden_pickaxe").message


def test_crafting_table_and_furnace_rules(data):
    w = world_with(data, oak_planks=3, stick=2)
    out = w.act("craft wooden_pickaxe")
    assert not out.ok and "crafting table" in out.message
    w.inventory["crafting_table"] = 1
    assert w.act("craft wooden pickaxe using crafting table").ok and w.inventory["wooden_pickaxe"] == 1
    w = world_with(data, iron_ore=2)
    assert "furnace" in w.act("smelt iron_ingot").message
    w.inventory["furnace"] = 1
    out = w.act("smelt iron_ingot x2")
    assert not out.ok and "fuel" in out.message
    w.inventory["oak_planks"] = 2  # 2 x 300 ticks of fuel = 3 smelts
    assert w.act("smelt iron_ingot x2").ok and w.inventory["iron_ingot"] == 2 and w.inventory["oak_planks"] == 0


def test_ore_depth_bands_and_digging(data):
    w = world_with(data, iron_pickaxe=1)
    out = w.act("find diamond_ore")
    assert not out.ok and "underground at y 5..15" in out.message
    out = w.act("dig-down 12")  # nothing equipped: the bare hand cannot dig stone
    assert not out.ok and "needs a pickaxe" in out.message and w.y == 64
    out = w.act("dig-down 12 with iron_pickaxe")
    assert out.ok and w.y == 12 and w.inventory["cobblestone"] == 52
    assert w.act("find diamond_ore").ok
    w.act("approach diamond_ore")
    assert w.act("mine diamond_ore with iron_pickaxe").ok and w.inventory["diamond"] >= 1
    assert w.act("dig-up with iron_pickaxe").ok and w.y == 64
    assert w.inventory["cobblestone"] == 52 + 52  # the stone broken on the way up drops too


def test_digging_stops_where_the_pickaxe_breaks(data):
    w = world_with(data, wooden_pickaxe=1)  # 59 uses
    out = w.act("dig-down 30 with wooden_pickaxe")
    assert out.ok and "broke" not in out.message and w.y == 30 and w.wear["wooden_pickaxe"] == 34
    out = w.act("dig-up with wooden_pickaxe")  # the 25th block up is the pickaxe's 59th use
    assert out.ok and "broke" in out.message and w.y == 55 and w.inventory["wooden_pickaxe"] == 0
    assert w.inventory["cobblestone"] == 59
    assert "needs a pickaxe" in w.act("dig-up").message
    w.y = 64
    assert "already on the surface" in w.act("dig-up").message


def test_invalid_actions_explain_and_never_raise(data):
    w = world_with(data)
    for bad in ["", "fly to the moon", "craft", "dig-down deep", "{not json", '{"name": "teleport"}',
                "mine diamond_ore", "craft unobtainium", "smelt oak_planks", "attack oak_log", "equip diamond"]:
        out = w.act(bad)
        assert not out.ok and out.message.startswith("Failed")
    assert parse_action('{"name": "craft", "args": {"obj": {"stone pickaxe": 1}, "platform": "crafting table"}}') \
        .obj == "stone_pickaxe"
    a = parse_action("digdown 12 with stone pickaxe")
    assert (a.name, a.y_level, a.tool) == ("dig-down", 12, "stone_pickaxe")


def test_night_mobs_hurt_and_ticks_advance(data):
    w = World(data, seed=3, hazards=True)
    w.tick = NIGHT[0]
    start = w.elapsed
    low = w.health
    for _ in range(60):
        w.act("find sand")  # a long walk at night
        w.visible.clear()
        low = min(low, w.health)
        if w.dead:
            break
    assert w.elapsed > start and low < 20


def test_smelting_table_matches_vanilla_recipe_json():
    import plancraft

    folder = Path(plancraft.__file__).parent / "environment" / "recipes"
    for src, result in SMELTING.items():
        if src in LATER["items"]:  # 1.17 (raw gold): plancraft ships 1.16 recipe files
            continue
        if result in ("glass", "iron_ingot", "gold_ingot", "stone", "charcoal"):
            recipe = json.loads((folder / f"{result}.json").read_text())
            assert recipe["type"] == "minecraft:smelting" and recipe["cookingtime"] == SMELT_TICKS
            ing = recipe["ingredient"]
            names = {i.get("item", i.get("tag")) for i in (ing if isinstance(ing, list) else [ing])}
            assert any(src in n or (result == "charcoal" and "logs" in n) or (src == "red_sand" and "sand" in n)
                       for n in names), (src, result, names)


def test_attack_equip_and_apply(data):
    w = world_with(data, wooden_sword=1, shears=1, bucket=1)
    assert not w.act("attack zombie").ok  # daytime, on the surface: no hostile mob around
    w.tick = NIGHT[0] + 10
    assert w.act("find zombie").ok
    assert w.act("equip wooden_sword").ok and w.equipped == "wooden_sword"
    out = w.act("attack zombie with wooden_sword")
    assert out.ok and w.inventory["rotten_flesh"] == 1 and w.wear["wooden_sword"] == 5  # 20 hp / 4 dmg
    assert w.health < 20
    assert w.act("find sheep").ok and w.act("apply sheep with shears").ok and w.inventory["white_wool"] == 1
    assert not w.act("apply oak_log with shears").ok


def test_instructions_list_every_action_of_the_grammar():
    """The LLM's action help is made from the grammar: every action, with its syntax, is in it, and
    every usage in it parses back to its action."""
    assert make_env().instructions() == INSTRUCTIONS
    for form in GRAMMAR:
        usage = f"{form.name} {form.usage}".rstrip()
        assert usage in INSTRUCTIONS and usage in SYNTAX, usage
        filled = (usage.replace("<obj>", "oak_log").replace("<tool>", "stone_pickaxe").replace("<y>", "12")
                  .replace("<platform>", "crafting_table").replace("<n>", "2").replace("[", "").replace("]", ""))
        assert parse_action(filled).name == form.name, filled
    assert ACTIONS == tuple(f.name for f in GRAMMAR)
    for ore, (_, top, _, _) in UNDERGROUND.items():  # ore depths come from the world's table
        if ore.endswith("_ore") and top < 64:
            assert f"{ore}" in INSTRUCTIONS and f"y<={top}" in INSTRUCTIONS
    with pytest.raises(ActionError, match="expected find <obj> \\| approach <obj>"):
        parse_action("fly to the moon")
