"""Symbolic reasoning-driven verifier (paper 002, section 2.3): explicit if-then rules checked first,
the LLM for actions no rule covers, and bottom-up rule learning from the LLM's answers (appendix
F.2) with rule scoring (eq. 5, appendix F.3): eval(r) = 0.3 s_c + 0.3 s_p + 0.4 s_a, kept when
eval(r) > 0.85. Top-down guidance: `guidance()` turns the pool into prompt text for the planner.

A rule is keyed by "<action>, <object>" (e.g. "craft, stone_pickaxe") and holds conditions that
can be checked against the inventory: `has item n` ("Check if inventory contains 3 cobblestone and
2 stick") or `slot` (the action's source slot is not empty, for Plancraft).

The paper's behaviour is the default: a rule in the pool (eq. 5 score above 0.85) is checked before
execution and vetoes the action whenever its condition is false (`min_evidence=0`, `veto_limit=None`).

Options that are not the paper's (off by default), so that a small LLM's wrong rules cannot block the
agent for a whole episode:
- Evidence before veto (`min_evidence=N`, agent option rule_evidence=N): a rule may veto only once the
  environment has confirmed it N times (the action ran while the rule's condition was false, and it
  failed). Until then the rule is a candidate: it is guidance in prompts, and the action runs so that
  the outcome is evidence.
- `veto_limit=N` (rule_veto_limit=N): after N vetoes of one action in an episode the rules let it run
  for the rest of the episode, so a wrong rule meets the environment's test.
Always: a rule is dropped when the action it forbids runs with its condition false and succeeds (with
the paper's default this happens only for actions the rule could not veto, e.g. `_raw` steps).
- The LLM's own verdict (no rule covers the action) vetoes an action at most once per episode; the
  next time the environment decides.
- Feedback never names the component ("verifier: ..."): it says which step cannot run and why.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from llm_side.agents.metagent_p.parsing import parse_scores, parse_verdict

W_C, W_P, W_A = 0.3, 0.3, 0.4
ACCEPT = 0.85

GENERATE_RULE_PROMPT = """You are well-versed in all the rules of Minecraft. Please complete the following two tasks:
Given the inputs of action and inventory, determine whether the action satisfies the execution constraints.
If it satisfies the constraints, return: {"return": {"success": true, "suggestion": ""}}
Otherwise return: {"return": {"success": false, "suggestion": "Your suggestion here"}}
Also list the rules you used under the key "<action name>, <object>".
Example:
USER:
action: {"name": "craft", "args": {"obj": {"stone pickaxe": 1}, "materials": {"cobblestone": 3, "stick": \
2}, "platform": "crafting table"}}
inventory: {"crafting table": 1, "stick": 2}
SYSTEM:
{"return": {"success": false, "suggestion": "Mine or Craft enough cobblestone first."}, "craft, stone \
pickaxe": ["Rule1: Check if inventory contains crafting table", "Rule2: Check if inventory contains 3 \
cobblestone and 2 stick"]}
USER:
action: {action}
inventory: {inventory}
SYSTEM:
"""

EVALUATE_RULE_PROMPT = """Please evaluate this rule across three dimensions, providing a score from 0 to 1 for each:
1. Common-Sense Consistency: Does this rule align with Minecraft's mechanics and logic?
2. Condition Clarity: Is the trigger condition-specific and unambiguous?
3. Action Feasibility: Is the action executable, considering any prerequisites?
Answer in JSON, e.g. {"common_sense_consistency": 0.9, "condition_clarity": 0.8, "action_feasibility": 0.9}
Rule: {rule}
Scores:"""


def rule_score(s_c: float, s_p: float, s_a: float) -> float:
    """Eq. 5 with the paper's weights."""
    return W_C * s_c + W_P * s_p + W_A * s_a


def norm_item(s: str) -> str:
    s = s.strip().lower().strip(".,;:'\"")
    s = re.sub(r"^(a|an|the|some|enough)\s+", "", s)
    return re.sub(r"[\s\-]+", "_", s)


@dataclasses.dataclass
class Condition:
    kind: str  # "has" | "slot"
    item: str = ""
    count: int = 1

    def holds(self, inventory: dict[str, int], args: dict[str, Any], canon: Any) -> bool:
        if self.kind == "has":
            return inventory.get(canon(self.item), 0) >= self.count
        if self.kind == "slot":  # slot-based envs list slots as inventory keys, e.g. "[I19]": 1
            src = str(args.get("from") or args.get("slot_from") or "").strip().strip("[]")
            return inventory.get(f"[{src}]", 0) > 0
        return True

    def describe(self) -> str:
        return f"{self.count} {self.item}" if self.kind == "has" else "an item in the source slot"


@dataclasses.dataclass
class Rule:
    key: str
    text: str
    conditions: list[Condition]
    score: float
    confirmed: int = 0  # times the action ran with the condition false and failed

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "text": self.text, "score": self.score, "confirmed": self.confirmed,
                "conditions": [dataclasses.asdict(c) for c in self.conditions]}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Rule:
        return Rule(str(d["key"]), str(d.get("text", "")),
                    [Condition(**c) for c in d.get("conditions", [])], float(d.get("score", 0.0)),
                    int(d.get("confirmed", 0)))

    def missing(self, inventory: dict[str, int], args: dict[str, Any], canon: Any) -> list[Condition]:
        return [c for c in self.conditions if not c.holds(inventory, args, canon)]

    def describe(self) -> str:
        action, _, obj = self.key.partition(", ")
        return f"{action} {obj}".strip() + ": " + re.sub(r"^\s*rule\s*\d*\s*[:.)-]\s*", "", self.text, flags=re.I)


def parse_rule_text(text: str) -> list[Condition]:
    """'Rule2: Check if inventory contains 3 cobblestone and 2 stick' -> [has cobblestone 3, has stick 2].
    Rules whose condition cannot be made symbolic return []: they are not learned."""
    t = re.sub(r"^\s*rule\s*\d*\s*[:.)-]\s*", "", text.strip(), flags=re.I).lower()
    if re.search(r"source slot|slot .*not empty|slot contains", t):
        return [Condition("slot")]
    m = re.search(r"(?:contains?|has|have|holds?)\s+(?:at least\s+)?(.+)$", t)
    if not m:
        return []
    conds = []
    for part in re.split(r",|\band\b", m.group(1)):
        part = part.strip()
        if not part or re.search(r"\bor\b|\bnot\b|\bif\b", part):
            continue
        pm = re.match(r"(\d+)\s*x?\s*(.+)$", part)
        count, item = (int(pm.group(1)), pm.group(2)) if pm else (1, part)
        item = re.sub(r"\s+in (the )?inventory$", "", item)
        if 0 < count <= 64 and 0 < len(item) <= 40:
            conds.append(Condition("has", norm_item(item), count))
    return conds


def action_key(action: dict[str, Any], canon: Any = None) -> str:
    """'craft, stone_pickaxe' for {"name": "craft", "args": {"obj": {"stone pickaxe": 1}}}."""
    args = action.get("args") or {}
    obj = args.get("obj")
    if isinstance(obj, dict) and obj:
        obj = next(iter(obj))
    name = str(action.get("name", "")).lower()
    return f"{name}, {(canon or norm_item)(str(obj))}" if obj else name


@dataclasses.dataclass
class Feedback:
    ok: bool
    suggestion: str
    source: str  # "rule" | "llm" | "none"


class Verifier:
    """Checks an action's prerequisites against the inventory; learns rules from the LLM and keeps or
    drops them on the environment's evidence (see the module docstring)."""

    def __init__(self, llm: Any, canon: Any = norm_item, use_llm: bool = True, accept: float = ACCEPT,
                 max_tokens: int = 96, retries: int = 1, min_evidence: int = 0, veto_limit: int | None = None):
        self.llm = llm
        self.canon = canon
        self.use_llm = use_llm
        self.accept = accept
        self.max_tokens = max_tokens
        self.retries = retries
        self.min_evidence = min_evidence
        self.veto_limit = veto_limit
        self.rules: dict[str, list[Rule]] = {}
        self.rejected = 0
        self.dropped = 0
        self.llm_calls = 0
        self.begin_episode()

    def begin_episode(self) -> None:
        self.llm_vetoed: set[str] = set()
        self.vetoes: dict[str, int] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self.rules.values())

    def trusted(self, rule: Rule) -> bool:
        """May veto: scored above the threshold (to be in the pool) and confirmed by the environment."""
        return rule.confirmed >= self.min_evidence

    def check(self, action: dict[str, Any], inventory: dict[str, int]) -> Feedback:
        key = action_key(action, self.canon)
        rules = self.rules.get(key)
        if rules:
            args = action.get("args") or {}
            for rule in rules:
                missing = rule.missing(inventory, args, self.canon)
                under_limit = self.veto_limit is None or self.vetoes.get(key, 0) < self.veto_limit
                if missing and self.trusted(rule) and under_limit:
                    self.vetoes[key] = self.vetoes.get(key, 0) + 1
                    need = ", ".join(c.describe() for c in missing)
                    return Feedback(False, f"the step '{_step(key)}' cannot run yet: it needs {need} in the "
                                           f"inventory; obtain that first.", "rule")
            return Feedback(True, "", "rule")  # conditions hold (or, with min_evidence, rules are candidates)
        if not self.use_llm or key in self.llm_vetoed:
            return Feedback(True, "", "none")
        fb = self._ask_llm(action, inventory, key)
        if not fb.ok:
            self.llm_vetoed.add(key)
            fb.suggestion = f"the step '{_step(key)}' may not work yet: {fb.suggestion or 'check what it needs'}"
        return fb

    def observe(self, action: dict[str, Any], inventory_before: dict[str, int], failed: bool) -> None:
        """Evidence from an executed action: a rule whose condition was false is confirmed when the
        action failed and dropped when it succeeded."""
        key = action_key(action, self.canon)
        args = action.get("args") or {}
        keep = []
        for rule in self.rules.get(key, []):
            if rule.missing(inventory_before, args, self.canon):
                if not failed:
                    self.dropped += 1
                    continue
                rule.confirmed += 1
            keep.append(rule)
        if key in self.rules:
            if keep:
                self.rules[key] = keep
            else:
                del self.rules[key]

    def guidance(self, text: str, limit: int = 6) -> list[str]:
        """Top-down guidance: pool rules as prompt lines, those about objects named in `text` first,
        confirmed ones before candidates."""
        words = set(re.findall(r"[a-z_]+", self.canon(text) + " " + text.lower()))
        rules = [r for rs in self.rules.values() for r in rs]
        rules.sort(key=lambda r: (r.key.partition(", ")[2] not in words, not self.trusted(r), -r.score))
        return [r.describe() for r in rules[:limit]]

    def _ask_llm(self, action: dict[str, Any], inventory: dict[str, int], key: str) -> Feedback:
        prompt = (GENERATE_RULE_PROMPT.replace("{action}", json.dumps(action))
                  .replace("{inventory}", json.dumps({k: v for k, v in inventory.items() if v > 0})))
        for attempt in range(self.retries + 1):
            self.llm_calls += 1
            reply = self.llm.complete(prompt, max_tokens=self.max_tokens, temperature=0.0 if attempt == 0 else 0.7,
                                      seed=attempt, stop=["\nUSER:"])[0]
            verdict = parse_verdict(reply)
            if verdict is None:
                continue
            ok, suggestion, rules = verdict
            for rkey, texts in rules.items():
                for text in texts[:4]:
                    self.learn(action_key_from_text(rkey, self.canon) or key, text)
            return Feedback(ok, suggestion, "llm")
        return Feedback(True, "", "none")  # unparseable: do not block the plan on the LLM's noise

    def learn(self, key: str, text: str) -> Rule | None:
        """Bottom-up rule learning: parse, score with the F.3 prompt, keep above the threshold."""
        conds = parse_rule_text(text)
        if not conds:
            return None
        if any(r.text == text for r in self.rules.get(key, [])):
            return None
        self.llm_calls += 1
        reply = self.llm.complete(EVALUATE_RULE_PROMPT.replace("{rule}", text), max_tokens=60, temperature=0.0)[0]
        scores = parse_scores(reply)
        score = rule_score(*scores) if scores else 0.0
        if round(score, 9) <= self.accept:  # "above 0.85", robust to float rounding
            self.rejected += 1
            return None
        rule = Rule(key, text, conds, round(score, 4))
        self.rules.setdefault(key, []).append(rule)
        return rule

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for rs in self.rules.values() for r in rs]

    def load_json(self, items: list[dict[str, Any]]) -> None:
        self.rules = {}
        for d in items:
            try:
                r = Rule.from_json(d)
            except (KeyError, TypeError, ValueError):
                continue
            self.rules.setdefault(r.key, []).append(r)


def _step(key: str) -> str:
    """'craft, stone_pickaxe' -> 'craft stone_pickaxe'."""
    return " ".join(p.strip() for p in key.split(",", 1))


def action_key_from_text(k: str, canon: Any = None) -> str | None:
    """'craft, stone pickaxe' -> 'craft, stone_pickaxe'."""
    parts = [p.strip() for p in k.split(",", 1)]
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return f"{parts[0].lower()}, {(canon or norm_item)(parts[1])}"
