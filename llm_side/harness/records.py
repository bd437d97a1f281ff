"""The on-disk record of a run: one JSON line per finished episode in `episodes.jsonl`.

Resume works off this file alone: a (task, episode) pair that has a line is done, and the line's
`memory` is what the agent carried into the task's next episode.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from muse_common.records import RecordError as RecordError  # what load_records raises: one line, exit 2
from muse_common.records import RecordKind, cut_torn_tail, nonneg_int, read_records

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
        "finished",
        "cpu_model",
        "server",
    }
)


def episodes_path(out_dir: str | Path) -> Path:
    return Path(out_dir) / EPISODES_FILE


def repair_torn_tail(path: str | Path) -> bool:
    """Cut a torn last line (a kill mid-write) so the next append starts on a fresh line, quietly
    (`load_records(..., resume=True)` cuts it and says so). Never through a link. True when something was cut."""
    return cut_torn_tail(path, say=lambda _message: None)


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _competence(v: Any) -> bool:
    """None, or a list of numbers or nulls; a NaN is a record (the writers keep it), but no prediction."""
    return v is None or (isinstance(v, list) and all(
        c is None or (isinstance(c, int | float) and not isinstance(c, bool)) for c in v))


EPISODE = RecordKind(
    "episode record",
    required={"env": (_text, "an env name"), "task": (_text, "a task id"), "agent": (_text, "an agent name"),
              "episode": (nonneg_int, "an integer >= 0"), "success": (lambda v: isinstance(v, bool), "true or false"),
              "steps": (nonneg_int, "an integer >= 0")},
    optional={"memory": (lambda v: v is None or isinstance(v, dict), "a mapping"),
              "competence": (_competence, "a list of numbers")},
    key=lambda r: (r["task"], r["episode"]))
"""The schema of a `muse-llm` episodes.jsonl line (the fields resume and `report` rely on), read by
`muse_common.records.read_records` like every other record kind."""


def record_problem(record: Any) -> str | None:
    """Why a parsed JSON line is not an episode record (`is not an episode record ('steps' is -7, ...)`), or None."""
    return EPISODE.problem(record)


def _warn(message: str) -> None:
    print(f"muse-llm: warning: {message}", file=sys.stderr)


def load_records(out_dir: str | Path, warn: Callable[[str], None] = _warn, *,
                 resume: bool = False) -> list[dict[str, Any]]:
    """All finished-episode records of a run folder (empty when none yet), one per (task, episode).

    The project's one reader of record files (`muse_common.records.read_records`, docs/reliability.md):

    * a torn last line (a kill mid-append) is ignored; with `resume=True` it is cut from the file and one
      warning line says so: that episode is redone;
    * any other line that is not JSON or not an episode record (`42`, `{"foo": 1}`, `steps: -7`, `memory: 5`)
      raises `RecordError`, one line naming the file, the line number and the field, and the file is left
      as it is: a malformed record is never counted, and a resume never silently redoes or drops its episode;
    * a second record of a (task, episode) already read is dropped (the first is kept) and said in one
      warning line; with `resume=True` the file is rewritten without it, atomically.
    """
    return read_records(episodes_path(out_dir), EPISODE, resume=resume, say=warn)


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
