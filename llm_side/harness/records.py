"""The on-disk record of a run: one JSON line per finished episode in `episodes.jsonl`.

Resume works off this file alone: a (task, episode) pair that has a line is done, and the line's
`memory` is what the agent carried into the task's next episode.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

EPISODES_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"

# Keys the runner writes itself; agent extras never overwrite them.
RESERVED_KEYS = frozenset(
    {
        "env",
        "task",
        "agent",
        "episode",
        "success",
        "steps",
        "score",
        "actions",
        "observations",
        "competence",
        "reason",
        "memory",
        "task_text",
        "first_observation",
        "step_info",
        "seed",
        "time_s",
    }
)


def episodes_path(out_dir: str | Path) -> Path:
    return Path(out_dir) / EPISODES_FILE


def repair_torn_tail(path: str | Path) -> bool:
    """Cut a torn last line (a kill mid-write) so the next append starts on a fresh line.
    Returns True when something was cut."""
    from muse_common.files import open_nofollow

    path = Path(path)
    if not path.is_symlink() and (not path.exists() or path.stat().st_size == 0):
        return False
    with os.fdopen(open_nofollow(path, os.O_RDWR), "rb+") as f:  # a link is refused, never cut through
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return False
        f.seek(0)
        data = f.read()
        keep = data.rfind(b"\n") + 1
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return True


RECORD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "env": str, "task": str, "agent": str, "episode": int, "success": bool, "steps": int,
}
"""Fields (and types) every episode record has; resume and `report` rely on them."""


def record_problem(record: Any) -> str | None:
    """Why a parsed JSON line is not an episode record, or None."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an episode record"
    missing = [k for k in RECORD_FIELDS if k not in record]
    if missing:
        return f"not an episode record (no {', '.join(missing)})"
    for key, tp in RECORD_FIELDS.items():
        value = record[key]
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            return f"not an episode record ('{key}' is {value!r})"
    if record["episode"] < 0 or record["steps"] < 0:
        key = "episode" if record["episode"] < 0 else "steps"
        return f"not an episode record ('{key}' is {record[key]}, below 0)"
    memory = record.get("memory")
    if memory is not None and not isinstance(memory, dict):
        return f"not an episode record ('memory' is {memory!r}, not a mapping)"
    competence = record.get("competence")
    if competence is not None and not (isinstance(competence, list) and all(
            c is None or (isinstance(c, int | float) and not isinstance(c, bool)) for c in competence)):
        return f"not an episode record ('competence' is {competence!r}, not a list of numbers)"
    return None


def _warn(message: str) -> None:
    print(f"muse-llm: warning: {message}", file=sys.stderr)


def load_records(out_dir: str | Path, warn: Callable[[str], None] = _warn) -> list[dict[str, Any]]:
    """All finished-episode records of a run folder (empty when none yet), one per (task, episode).

    Every line is checked against one schema (`record_problem`). A line that is not a record (invalid
    JSON, `42`, `{"foo": 1}`, `steps: -7`, `memory: 5`) and a second record of a (task, episode) already
    read are skipped; one warning line counts them and names their line numbers; the file is left as it
    is. A torn last line (a kill mid-write) is skipped quietly.
    """
    path = episodes_path(out_dir)
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    torn_tail = not data.endswith(b"\n")
    out = []
    seen: set[tuple[str, int]] = set()
    skipped: list[str] = []
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            if not (torn_tail and n == len(lines)):
                skipped.append(f"line {n} is not valid JSON")
            continue
        problem = record_problem(record)
        if problem:
            skipped.append(f"line {n} is {problem}")
            continue
        key = (record["task"], record["episode"])
        if key in seen:
            skipped.append(f"line {n} repeats task {key[0]!r} episode {key[1]} (the first record is kept)")
            continue
        seen.add(key)
        out.append(record)
    if skipped:
        warn(f"{path}: {len(skipped)} line(s) skipped, {'; '.join(skipped)} (the file is left as it is)")
    return out


def done_pairs(records: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """(task, episode) pairs that already have a record."""
    return {(str(r["task"]), int(r["episode"])) for r in records}


def memory_before(records: list[dict[str, Any]], task: str, episode: int) -> dict[str, Any]:
    """The agent memory to load before `episode` of `task`: the `memory` of that task's latest
    recorded episode before it, or {} for a fresh task."""
    prior = [r for r in records if str(r["task"]) == task and int(r["episode"]) < episode]
    if not prior:
        return {}
    last = max(prior, key=lambda r: int(r["episode"]))
    return dict(last.get("memory") or {})


def check_same_run(records: list[dict[str, Any]], env_name: str, agent_name: str, out_dir: str | Path) -> None:
    """Refuse to mix two different runs in one folder (resume must continue the same run)."""
    for r in records:
        if r.get("env") != env_name or r.get("agent") != agent_name:
            raise ValueError(
                f"{episodes_path(out_dir)} holds a run of env '{r.get('env')}' / agent '{r.get('agent')}', "
                f"not '{env_name}' / '{agent_name}'; pass a different --out folder to start a new run."
            )


def merge_extras(record: dict[str, Any], extras: dict[str, Any] | None) -> dict[str, Any]:
    """Add an agent's `episode_extras()` to a record; keys that clash with the runner's own go under
    `extras` instead of overwriting them."""
    if not extras:
        return record
    clashes = {k: v for k, v in extras.items() if k in RESERVED_KEYS}
    record.update({k: v for k, v in extras.items() if k not in RESERVED_KEYS})
    if clashes:
        record.setdefault("extras", {}).update(clashes)
    return record
