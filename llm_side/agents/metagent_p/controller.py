"""Action controller (paper 002, appendix C.2): turns each planned action into the env's command and
tells whether its execution failed. The paper uses MP5's controller over MineDojo; here the world's
actions are already high-level, so the controller is a translator plus a failure detector.
"""

from __future__ import annotations

import re
from typing import Any


class MinecraftController:
    """Plan actions (the paper's JSON form) -> `llm_side.envs.minecraft` text actions."""

    env_name = "minecraft"

    def to_command(self, action: dict[str, Any]) -> str | None:
        from llm_side.envs.minecraft.grammar import ActionError, action_from_dict, action_to_text

        if action.get("name") == "_raw":  # a step of a stored successful plan
            return str((action.get("args") or {}).get("command") or "") or None
        try:
            return action_to_text(action_from_dict(action))
        except (ActionError, TypeError, ValueError):
            return None

    def failed(self, observation: str) -> bool:
        return observation.lstrip().startswith("Failed")

    def inventory(self, observation: str, info: dict[str, Any] | None = None) -> dict[str, int]:
        if info and isinstance(info.get("inventory"), dict):
            return {str(k): int(v) for k, v in info["inventory"].items()}
        m = re.search(r"Inventory: (.*)", observation)
        inv: dict[str, int] = {}
        if m and m.group(1).strip() != "empty":
            for part in m.group(1).split(","):
                if ":" in part:
                    k, v = part.rsplit(":", 1)
                    if v.strip().isdigit():
                        inv[k.strip()] = int(v)
        return inv

    def scene(self, observation: str) -> str:
        """The scene-graph stand-in: position, time, health and what is nearby."""
        keep = [ln for ln in observation.splitlines() if ln.startswith(("Position", "Health", "Nearby", "Equipped"))]
        return " ".join(keep)[:300]


class PlancraftController:
    """Plan actions -> Plancraft's `move: from [I1] to [A1] with quantity 1` commands."""

    env_name = "plancraft"
    SLOT = re.compile(r"\[(0|[ABC][123]|I[1-9]|I[12][0-9]|I3[0-6])\]")

    def to_command(self, action: dict[str, Any]) -> str | None:
        name = str(action.get("name", "")).lower()
        args = action.get("args") or {}
        if name == "_raw":
            return str(args.get("command") or "") or None
        if name == "impossible":
            return f"impossible: {args.get('reason') or 'the target cannot be crafted'}"
        if name not in ("move", "smelt"):
            return None
        src = self._slot(args.get("from") or args.get("slot_from"))
        dst = self._slot(args.get("to") or args.get("slot_to"))
        try:
            q = max(1, min(64, int(args.get("quantity", 1))))
        except (TypeError, ValueError):
            q = 1
        if not src or not dst:
            return None
        return f"{name}: from {src} to {dst} with quantity {q}"

    def _slot(self, v: Any) -> str | None:
        if v is None:
            return None
        s = str(v).strip()
        if not s.startswith("["):
            s = f"[{s}]"
        return s if self.SLOT.fullmatch(s) else None

    def failed(self, observation: str) -> bool:
        return bool(re.search(r"Format Error|Only select actions|Invalid|not valid", observation))

    def inventory(self, observation: str, info: dict[str, Any] | None = None) -> dict[str, int]:
        """Item counts plus one key per filled slot ("[I19]": 1), for the verifier's slot rules."""
        inv: dict[str, int] = {}
        for item, slot, q in re.findall(r"- (\S+) \[(\w+)\] quantity (\d+)", observation):
            inv[item] = inv.get(item, 0) + int(q)
            inv[f"[{slot}]"] = int(q)
        return inv

    def scene(self, observation: str) -> str:
        return observation.replace("\n", " ")[:400]
