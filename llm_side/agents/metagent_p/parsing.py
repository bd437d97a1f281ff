"""Tolerant parsers for the JSON the LLM writes (plans, verifier verdicts, rule scores, confidence).

Why: small models wrap JSON in prose, use single quotes, leave trailing commas or stop mid-object.
Every parser here returns None (or an empty result) on garbage and never raises, so the caller can
retry a bounded number of times and then fall back.

Template placeholders are refused as content (`is_placeholder`): a small model often copies the prompt's
response format literally (a held-out Minecraft run's evaluator "suggested" `...`, its sub-goals were
"sub-goal"); such a value is treated as missing, so the caller re-asks (reflector evaluation, planner)
or falls back, and the placeholder never reaches the agent or the next prompt.
"""

from __future__ import annotations

import json
import re
from typing import Any

PLACEHOLDERS = frozenset({
    "...", "…", "your suggestion here", "suggestion", "what to change", "sub-goal", "subgoal", "sub goal",
    "action name", "arg name",
})
"""The placeholder words of the Metagent-P prompts' response formats (planner, verifier, reflector)."""


def is_placeholder(value: Any) -> bool:
    """True for an empty value, one made only of dots/ellipses, or a response-format placeholder."""
    text = " ".join(str(value).split()).strip().strip("\"'`").strip().lower()
    if not text or not text.strip(".… "):
        return True
    return text.rstrip(". ") in PLACEHOLDERS or text in PLACEHOLDERS


def _candidates(text: str) -> list[str]:
    """Balanced {...} / [...] spans of `text`, outermost first, in order of appearance."""
    out, stack, start = [], [], None
    pairs = {"{": "}", "[": "]"}
    in_str, esc = False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and stack:
            in_str = True
        elif ch in pairs:
            if not stack:
                start = i
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack and start is not None:
                out.append(text[start : i + 1])
                start = None
        elif stack and ch in "}]":
            stack, start = [], None  # mismatched bracket: drop this span
    return out


def _repair(s: str) -> str:
    s = re.sub(r",\s*([}\]])", r"\1", s)  # trailing commas
    s = re.sub(r"\bTrue\b", "true", s)
    s = re.sub(r"\bFalse\b", "false", s)
    s = re.sub(r"\bNone\b", "null", s)
    if '"' not in s and "'" in s:
        s = s.replace("'", '"')
    return s


def extract_json(text: Any) -> Any | None:
    """The first JSON object or array in `text` (lightly repaired), or None."""
    if not isinstance(text, str):
        return None
    for cand in _candidates(text):
        for s in (cand, _repair(cand)):
            try:
                return json.loads(s)
            except (json.JSONDecodeError, ValueError, RecursionError):
                continue
    return None


def parse_workflow(text: Any) -> list[dict[str, Any]] | None:
    """Table 9's response -> flat list of {"name", "args"} actions with `times` expanded.

    Accepts {"workflow": [{"times": n, "actions": [...]}, ...]}, a bare list of such groups, or a
    bare list of actions. Returns None when nothing usable is found."""
    obj = extract_json(text)
    if isinstance(obj, dict):
        obj = obj.get("workflow", obj.get("plan", obj.get("actions")))
    if not isinstance(obj, list):
        return None
    out: list[dict[str, Any]] = []
    for group in obj:
        if not isinstance(group, dict):
            continue
        if "actions" in group and isinstance(group["actions"], list):
            times = _int(group.get("times"), 1, lo=1, hi=16)
            acts = [a for a in group["actions"] if _is_action(a)]
            for _ in range(times):
                out.extend(_norm(a) for a in acts)
        elif _is_action(group):
            out.append(_norm(group))
        if len(out) > 200:
            break
    return out or None


def _is_action(a: Any) -> bool:
    if not (isinstance(a, dict) and isinstance(a.get("name"), str) and a["name"].strip()):
        return False
    args = a.get("args") if isinstance(a.get("args"), dict) else {}
    return not is_placeholder(a["name"]) and not any(is_placeholder(k) for k in args)


def _norm(a: dict[str, Any]) -> dict[str, Any]:
    args = a.get("args")
    return {"name": a["name"].strip().lower(), "args": args if isinstance(args, dict) else {}}


def _int(v: Any, default: int, lo: int, hi: int) -> int:
    try:
        return max(lo, min(hi, int(float(v))))
    except (TypeError, ValueError, OverflowError):
        return default


def _unit(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    if x != x:  # NaN
        return None
    if 1 < x <= 100:
        x /= 100.0 if x > 10 else 10.0
    return max(0.0, min(1.0, x))


def parse_verdict(text: Any) -> tuple[bool, str, dict[str, list[str]]] | None:
    """Appendix F.2 response -> (success, suggestion, {"craft, stone pickaxe": [rule texts]})."""
    obj = extract_json(text)
    if not isinstance(obj, dict):
        return None
    ret = obj.get("return", obj)
    if not isinstance(ret, dict) or "success" not in ret:
        return None
    ok = ret["success"]
    if isinstance(ok, str):
        ok = ok.strip().lower() in ("true", "yes", "1")
    rules = {str(k): [str(r) for r in v if isinstance(r, str | int | float) and not is_placeholder(r)]
             for k, v in obj.items() if k != "return" and isinstance(v, list)}
    suggestion = str(ret.get("suggestion") or "")
    return bool(ok), "" if is_placeholder(suggestion) else suggestion, rules


SCORE_KEYS = (("common", "consistency"), ("clarity", "condition"), ("feasibility", "action"))


def parse_scores(text: Any) -> tuple[float, float, float] | None:
    """Appendix F.3 response -> (s_c, s_p, s_a) in [0, 1], from JSON or 'Name: 0.9' lines."""
    obj = extract_json(text)
    vals: list[float | None] = [None, None, None]
    if isinstance(obj, dict):
        for k, v in obj.items():
            kl = str(k).lower()
            for i, keys in enumerate(SCORE_KEYS):
                if vals[i] is None and any(w in kl for w in keys):
                    vals[i] = _unit(v.get("score") if isinstance(v, dict) else v)
    if any(v is None for v in vals) and isinstance(text, str):
        for line in text.splitlines():
            ll = line.lower()
            m = re.findall(r"(\d+(?:\.\d+)?)", line.split(":", 1)[-1]) if ":" in line else []
            if not m:
                continue
            for i, keys in enumerate(SCORE_KEYS):
                if vals[i] is None and any(w in ll for w in keys):
                    vals[i] = _unit(m[-1] if "w_" in ll and len(m) > 1 else m[0])
                    break
    if any(v is None for v in vals):
        return None
    return vals[0], vals[1], vals[2]  # type: ignore[return-value]


def parse_reflection(text: Any) -> tuple[bool, str, float] | None:
    """Reflector evaluation -> (rational, suggestion, verbalised confidence in [0, 1]). An answer whose
    suggestion is a template placeholder (the example's "...") is refused (None): the caller re-asks."""
    obj = extract_json(text)
    if isinstance(obj, dict) and str(obj.get("suggestion") or "").strip() and is_placeholder(obj["suggestion"]):
        return None
    if isinstance(obj, dict) and ("confidence" in obj or "rational" in obj or "suggestion" in obj):
        rational = obj.get("rational", obj.get("success", False))
        if isinstance(rational, str):
            rational = rational.strip().lower() in ("true", "yes", "1")
        conf = _unit(obj.get("confidence"))
        return bool(rational), str(obj.get("suggestion") or ""), 0.0 if conf is None else conf
    if isinstance(text, str):
        m = re.search(r"confidence\W+(\d+(?:\.\d+)?)", text, flags=re.I)
        if m:
            s = re.search(r"suggestion\W+(.+)", text, flags=re.I)
            suggestion = s.group(1).strip() if s else ""
            return False, "" if is_placeholder(suggestion) else suggestion, _unit(m.group(1)) or 0.0
    return None


def parse_subgoals(text: Any, limit: int = 16) -> list[str] | None:
    """Decomposition / regulation response -> sub-goal strings, from {"subgoals": [...]} or a bare
    list (items may be strings or {"subgoal": ...} objects). None when nothing usable is found."""
    obj = extract_json(text)
    if isinstance(obj, dict):
        obj = next((obj[k] for k in ("subgoals", "sub_goals", "sub-goals", "goals", "plan") if k in obj), None)
    if not isinstance(obj, list):
        return None
    out: list[str] = []
    for g in obj:
        if isinstance(g, dict):
            g = next((v for k, v in g.items() if "goal" in str(k).lower() or k in ("name", "task")), None)
        if isinstance(g, str | int | float) and str(g).strip() and not is_placeholder(g):
            out.append(" ".join(str(g).split())[:120])
    return out[:limit] or None
