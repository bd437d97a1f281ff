"""Prompt and parse helpers shared by the LLM agents (env-generic: nothing here knows ALFWorld).

Why one module: every agent must turn free LLM text into one env action the same robust way
(empty, overlong or chatty output becomes an *invalid* action, never a crash), and must fit a growing
trajectory into a bounded prompt the same way.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

MAX_ACTION_CHARS = 200
"""Longer env commands are the model rambling, not a command; they are recorded as invalid. Thoughts
(`think: ...`) are never held to it: 19 of the 91 thoughts in the ReAct ALFWorld few-shot examples are
longer (the longest, react_puttwo_1's, has 312 characters), the model imitates them, and a thought costs
nothing in the game. A thought is bounded only by the generation's token limit (`THOUGHT_TOKENS`)."""

THOUGHT_TOKENS = 160
"""Token limit of one ReAct line, sized to the few-shot examples: the longest thought in
react_alfworld_3prompts.json (312 characters, `longest_example_thought`) is 86 tokens with the Qwen2.5
tokenizer and 92 with SmolLM2's (these prompts run 2.7-2.9 characters a token); 160 leaves room for a
model that writes a little more than the examples, so no imitated thought is cut mid-sentence."""

THINK_PREFIX = "think:"

_LEAD_RE = re.compile(r"^\s*(?:>+\s*|(?:action|act|next action|command)\s*[:=]\s*|[-*]\s+|\d+[.)]\s+)", re.I)
_QUOTES = "\"'`"


@dataclasses.dataclass(frozen=True)
class ParsedAction:
    """An action parsed from LLM text. `action` is '' when `invalid` names why the text was unusable."""

    action: str
    is_think: bool = False
    invalid: str | None = None


def _strip_lead(line: str) -> str:
    prev = None
    while prev != line:
        prev = line
        line = _LEAD_RE.sub("", line, count=1)
    return line.strip().strip(_QUOTES).strip()


def parse_action(text: str | None, *, max_chars: int = MAX_ACTION_CHARS) -> ParsedAction:
    """First non-empty line of `text`, without a leading '>' / 'Action:' / bullet / quotes.

    `think: ...` lines are thoughts (the env answers 'OK.') and are kept whatever their length. Empty
    text, text with no letters and command lines over `max_chars` are invalid. Never raises.
    """
    if not isinstance(text, str):
        return ParsedAction("", invalid="no text")
    for raw in text.splitlines():
        line = _strip_lead(raw)
        if not line:
            continue
        if not re.search(r"[A-Za-z]", line):
            return ParsedAction("", invalid="no words")
        if line.lower().startswith(THINK_PREFIX):
            thought = line[len(THINK_PREFIX):].strip()
            return ParsedAction(f"{THINK_PREFIX} {thought}".rstrip(), is_think=True)
        if len(line) > max_chars:
            return ParsedAction("", invalid=f"overlong ({len(line)} chars > {max_chars})")
        return ParsedAction(line)
    return ParsedAction("", invalid="empty")


def longest_example_thought(examples: str) -> str:
    """The longest `think:` line of a few-shot prompt (sizes the ReAct token limit, see THOUGHT_TOKENS)."""
    thoughts = [p.action for p in map(parse_action, examples.splitlines()) if p.is_think]
    return max(thoughts, key=len, default="")


def match_admissible(action: str, admissible: Sequence[str] | None) -> str | None:
    """The admissible action equal to `action` up to case/spacing, or None."""
    if not admissible:
        return None
    key = " ".join(action.lower().split())
    for a in admissible:
        if " ".join(a.lower().split()) == key:
            return a
    return None


def parse_rollout(text: str, *, max_pairs: int = 8) -> list[tuple[str, str]]:
    """(action, predicted observation) pairs from a world-model continuation of a ReAct prompt.

    The continuation looks like ' go to desk 1\\nOn the desk 1, you see ...\\n> open drawer 1\\n...':
    lines starting with '>' (and the very first line) are actions, the following lines observations.
    """
    pairs: list[tuple[str, str]] = []
    action: str | None = None
    obs: list[str] = []
    for i, line in enumerate((text or "").splitlines()):
        s = line.strip()
        if i == 0 or s.startswith(">"):
            if action is not None:
                pairs.append((action, " ".join(obs).strip()))
                if len(pairs) >= max_pairs:
                    return pairs
            parsed = parse_action(s)
            action, obs = (parsed.action or s.lstrip("> ").strip()), []
        elif s:
            obs.append(s)
    if action:
        pairs.append((action, " ".join(obs).strip()))
    return pairs[:max_pairs]


def format_steps(steps: Sequence[tuple[str, str]], *, prefix: str = "> ") -> str:
    """ReAct transcript lines: '> action\\nobservation\\n' per step."""
    return "".join(f"{prefix}{a}\n{o}\n" for a, o in steps)


def approx_tokens(text: str) -> int:
    """Cheap token estimate (about 4 characters a token for English), used when no tokenizer is at hand."""
    return (len(text) + 3) // 4


def fit_to_budget(head: str, items: Sequence[str], tail: str, budget: int,
                  count: Callable[[str], int] = approx_tokens) -> str:
    """`head` + the most recent `items` that fit + `tail`, keeping within `budget` tokens.

    Older items are dropped first (a marker line says so): the task and few-shot head and the current
    step matter most. If even head + tail exceed the budget, they are returned unchanged (the backend
    truncates), since cutting a few-shot example in half helps nobody.
    """
    used = count(head) + count(tail)
    kept: list[str] = []
    for item in reversed(items):
        c = count(item)
        if used + c > budget:
            break
        kept.append(item)
        used += c
    kept.reverse()
    dropped = len(items) - len(kept)
    marker = f"[... {dropped} earlier steps omitted ...]\n" if dropped else ""
    return head + marker + "".join(kept) + tail


def generic_instructions() -> str:
    """Fallback instructions when an env offers neither examples nor its own action help."""
    return ("Interact with the environment to solve the task. Reply with exactly one action per line, "
            "prefixed by '> '. You may think first with '> think: ...'.\n")
