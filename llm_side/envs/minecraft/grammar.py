"""The action grammar of the text Minecraft world: Metagent-P's action space (paper 002, Table 5 /
appendix F.1) as text (`mine iron_ore with stone_pickaxe`) or as the paper's JSON form
(`{"name": "mine", "args": {"obj": "iron_ore", "tool": "stone_pickaxe"}}`).

`GRAMMAR` is the one statement of the actions and their arguments: the parser's action names, the
syntax quoted in error messages (`SYNTAX`) and the LLM's action help (`instructions()`) are all made
from it, so they cannot disagree. Parsing never guesses silently: what cannot be read raises
`ActionError` with the expected syntax, which the world turns into a `Failed: ...` observation.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from llm_side.envs.minecraft.data import canonical
from llm_side.envs.minecraft.tables import deep_ores


@dataclasses.dataclass(frozen=True)
class ActionForm:
    """One action of the grammar: its name, its argument syntax after the name, what its main argument
    is ("obj", "y" or none), and whether its `with`/`using` argument is a crafting platform (craft,
    smelt) rather than a tool."""

    name: str
    usage: str
    target: str | None = "obj"
    platform: bool = False


GRAMMAR: tuple[ActionForm, ...] = (
    ActionForm("find", "<obj>"),
    ActionForm("approach", "<obj>"),
    ActionForm("mine", "<obj> [with <tool>]"),
    ActionForm("craft", "<obj> [x<n>] [using <platform>]", platform=True),
    ActionForm("smelt", "<obj> [x<n>] [using furnace]", platform=True),
    ActionForm("attack", "<obj> [with <tool>]"),
    ActionForm("equip", "<obj>"),
    ActionForm("dig-down", "<y> [with <tool>]", target="y"),
    ActionForm("dig-up", "[with <tool>]", target=None),
    ActionForm("apply", "<obj> with <tool>"),
)
FORMS = {f.name: f for f in GRAMMAR}
ACTIONS = tuple(FORMS)
SYNTAX = (" | ".join(f"{f.name} {f.usage}" for f in GRAMMAR) + "; or the JSON form "
          '{"name": "mine", "args": {"obj": "log", "tool": null}}')
MAX_COUNT = 64  # a stack: `craft x<n>` / `smelt x<n>` is clipped to 1..64

# "dig-down" is also read as "dig_down", "dig down" and "digdown".
_NAME_RE = re.compile(r"(?i)^(" + "|".join(re.escape(n).replace(r"\-", "[-_ ]?") for n in ACTIONS) + r")\b\s*(.*)$")
_JOINED = {n.replace("-", ""): n for n in ACTIONS if "-" in n}


@dataclasses.dataclass
class Action:
    """A parsed action: name plus arguments (obj, tool, platform, y_level, count)."""

    name: str
    obj: str | None = None
    tool: str | None = None
    platform: str | None = None
    y_level: int | None = None
    count: int = 1


class ActionError(ValueError):
    """An action that cannot be parsed; the message says what syntax is expected."""


def _action_name(raw: str) -> str:
    """'Dig_Down', 'dig down', 'digdown' -> 'dig-down'."""
    name = re.sub(r"[_ ]", "-", raw.lower())
    return _JOINED.get(name, name)


def _count(n: Any) -> int:
    return max(1, min(int(n), MAX_COUNT))


def parse_action(text: str) -> Action:
    """Parse the text form or the paper's JSON form of an action."""
    text = text.strip().strip("`").strip()
    if text.startswith("{"):
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ActionError(f"could not parse JSON action ({e.msg}); expected {SYNTAX}") from e
        return action_from_dict(d)
    text = re.sub(r"^(action|act)\s*:\s*", "", text, flags=re.I).strip().rstrip(".")
    m = _NAME_RE.match(text)
    if not m:
        raise ActionError(f"unknown action '{text[:60]}'; expected {SYNTAX}")
    form = FORMS[_action_name(m.group(1))]
    name, rest = form.name, m.group(2)
    tool = platform = None
    count = 1
    tm = re.search(r"\s*\b(?:with|using the|using)\s+(.+)$", rest, flags=re.I)
    if tm:
        arg = tm.group(1)
        rest = rest[: tm.start()]
        if form.platform:
            platform = _clean_obj(arg)
        else:
            tool = _clean_obj(arg)
    cm = re.search(r"\s*(?:x\s*(\d+)|\*\s*(\d+))\s*$", rest)
    if cm:
        count = int(cm.group(1) or cm.group(2))
        rest = rest[: cm.start()]
    if form.target == "y":
        ym = re.search(r"-?\d+", rest)
        if not ym:
            raise ActionError(f"{name} needs a target y level, e.g. '{name} 12 with stone_pickaxe'")
        return Action(name, tool=tool, y_level=int(ym.group(0)))
    if form.target is None:
        return Action(name, tool=tool)
    obj = _clean_obj(rest)
    if not obj:
        raise ActionError(f"'{name}' needs an object, e.g. '{name} oak_log'; expected {SYNTAX}")
    return Action(name, obj=obj, tool=tool, platform=platform, count=_count(count))


def _clean_obj(s: str) -> str | None:
    s = re.sub(r"^(?:a|an|the|some|\d+)\s+", "", s.strip().strip("'\"()[]"), flags=re.I)
    if not s or s.lower() in ("none", "null", "hand", "nothing", "bare hand"):
        return None
    return canonical(s)


def action_from_dict(d: Any) -> Action:
    """{"name": "craft", "args": {"obj": {"stone pickaxe": 1}, "materials": ..., "platform": ...}}."""
    if not isinstance(d, dict) or "name" not in d:
        raise ActionError(f"a JSON action needs a 'name' and 'args'; expected {SYNTAX}")
    name = str(d["name"]).lower().replace("_", "-")
    name = _JOINED.get(name, name)
    if name not in FORMS:
        raise ActionError(f"unknown action '{name}'; choose one of {', '.join(ACTIONS)}")
    form = FORMS[name]
    args = d.get("args") or {}
    if not isinstance(args, dict):
        raise ActionError("'args' must be an object")
    obj, count = args.get("obj"), 1
    if isinstance(obj, dict) and obj:
        (obj, count), = list(obj.items())[:1]
        try:
            count = int(count)
        except (TypeError, ValueError):
            count = 1
    y = args.get("y_level")
    try:
        y = int(y) if y is not None else None
    except (TypeError, ValueError) as e:
        raise ActionError("y_level must be a number") from e
    if form.target == "y" and y is None:
        raise ActionError(f"{name} needs 'y_level'")
    if form.target == "obj" and not obj:
        raise ActionError(f"'{name}' needs args.obj")
    return Action(name, obj=_clean_obj(str(obj)) if obj else None,
                  tool=_clean_obj(str(args["tool"])) if args.get("tool") else None,
                  platform=_clean_obj(str(args["platform"])) if args.get("platform") else None,
                  y_level=y, count=_count(count))


def action_to_text(a: Action) -> str:
    """The canonical text form (what the planner's workflow becomes)."""
    if a.name == "dig-down":
        return f"dig-down {a.y_level}" + (f" with {a.tool}" if a.tool else "")
    if a.name == "dig-up":
        return "dig-up" + (f" with {a.tool}" if a.tool else "")
    s = f"{a.name} {a.obj}" + (f" x{a.count}" if a.count > 1 else "")
    if a.platform:
        s += f" using {a.platform}"
    if a.tool:
        s += f" with {a.tool}"
    return s


def instructions() -> str:
    """The env's action help for an LLM (`MinecraftEnv.instructions()`): every action of `GRAMMAR` with
    its syntax, then the world's rules a player must know (the ore depths come from `tables`)."""
    by_depth: dict[int, list[str]] = {}
    for ore, top in deep_ores().items():
        by_depth.setdefault(top, []).append(ore)
    depths = ", ".join(f"{' and '.join(ores)} y<={top}" for top, ores in sorted(by_depth.items(), reverse=True))
    return ("Actions (one per step): " + " | ".join(f"{f.name} {f.usage}".rstrip() for f in GRAMMAR) + ". "
            "Use game item names (oak_log, oak_planks, cobblestone, iron_ore). "
            "Mine a block only after 'find' and 'approach' it. Digging through stone needs a pickaxe. "
            "A crafting_table must be in the inventory for 3x3 recipes and a furnace (with fuel) for "
            f"smelting. Ores lie deeper: {depths}.")
