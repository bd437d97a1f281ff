"""One reader per record kind of the JSONL files the project writes and reads back (a run folder may come from
someone else, or from a run killed mid-write, so every line is checked before it counts).

Every command that reads a kind reads it through `read_records(path, KIND, ...)`:

* a torn last line (a kill mid-write: no newline at the end) is ignored; on resume it is cut from the file,
  and one line says so;
* a complete line that is not JSON or fails the kind's schema (`step: "abc"`, `success: "yes"`, a NaN
  where a number must be finite) stops the reader with `RecordError`, one line naming the file, the line
  number and the field, and the file is left as it is (a wrong record is never counted, nor silently lost);
* a second record of a key already read (a duplicate) is dropped and said; with `upto`, records past the
  checkpoint's step are dropped too (they will be logged again); with `resume=True` the file is rewritten
  without them, atomically, so the next append starts after a whole, consistent file;
* with an ordered kind, a record whose order field goes backwards stops the reader (a row out of order).

Kinds: `PRETRAIN_METRICS` / `METRICS` (metrics.jsonl), `ADAPT_EPISODE` (adapt's episodes.jsonl) and
`CURVE_LINE` (benchmarks/learning_curve.py and the official runner's output); the LLM side's episodes.jsonl is
read the same way with its own kind (llm_side/harness/records.py, `EPISODE`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

from muse_common.files import atomic_write_jsonl, open_nofollow

RECORD_LINE_MAX_BYTES = 64 << 20
"""The longest line read (64 MiB): a record the project writes is some KiB; a bigger line is not one."""
RECORD_FILE_MAX_BYTES = 4 << 30
"""The biggest record file read (4 GiB): a million-episode run stays far below; a bigger file is not ours."""


class RecordError(ValueError):
    """A record file with a line that fails its kind's schema; the message is one line naming file and line."""


Check = Callable[[Any], bool]


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def nonneg_int(v: Any) -> bool:
    """An integer >= 0 (not a bool, not a float)."""
    return _int(v) and v >= 0


def finite_number(v: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def number_or_null(v: Any) -> bool:
    """A finite number or null (JSON has no NaN; the writers write null for one)."""
    return v is None or finite_number(v)


def nonempty_str(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def list_of_numbers(v: Any) -> bool:
    return isinstance(v, list) and all(number_or_null(x) for x in v)


@dataclasses.dataclass(frozen=True)
class RecordKind:
    """The schema of one record kind: required and optional fields with their checks (and what the check
    wants, for the error line), the key a duplicate shares, and the field that must not go backwards."""

    name: str
    required: Mapping[str, tuple[Check, str]]
    optional: Mapping[str, tuple[Check, str]] = dataclasses.field(default_factory=dict)
    key: Callable[[dict[str, Any]], Hashable] | None = None
    order: str | None = None

    def problem(self, record: Any) -> str | None:
        """Why a parsed line is not a record of this kind, or None."""
        a = "an" if self.name[0] in "aeiou" else "a"
        if not isinstance(record, dict):
            return f"is a JSON {type(record).__name__}, not {a} {self.name}"
        missing = [k for k in self.required if k not in record]
        if missing:
            return f"is not {a} {self.name} (no {', '.join(missing)})"
        for table, present_only in ((self.required, False), (self.optional, True)):
            for k, (check, wants) in table.items():
                if present_only and k not in record:
                    continue
                if not check(record[k]):
                    return f"is not {a} {self.name} ('{k}' is {_short(record[k])}, not {wants})"
        return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_COUNTER = (nonneg_int, "an integer >= 0")
METRICS = RecordKind("metrics row", required={"step": _COUNTER},
                     optional={"env_steps": _COUNTER, "train_steps": _COUNTER, "episodes": _COUNTER})
"""A metrics.jsonl row of any run (adapt restarts `step` per task group, so no order or key)."""
PRETRAIN_METRICS = dataclasses.replace(METRICS, required={"step": _COUNTER, "env_steps": _COUNTER},
                                       key=lambda r: r["step"], order="env_steps")
"""A pre-training metrics.jsonl row: one per logged env step, in order of env steps (the checkpoint's counter,
which a resume drops rows past; pre-training writes `step` = `env_steps`)."""
ADAPT_EPISODE = RecordKind(
    "episode record",
    required={"task": (nonempty_str, "a task name"), "episode": _COUNTER, "success": (
        lambda v: isinstance(v, bool), "true or false")},
    optional={"length": _COUNTER, "score": (number_or_null, "a finite number or null"),
              "time_to_success": (lambda v: _int(v) and v >= -1, "an integer >= -1"),
              "signal": (list_of_numbers, "a list of numbers"), "psi1": (list_of_numbers, "a list of numbers"),
              "value": (list_of_numbers, "a list of numbers"), "quantile": (
                  lambda v: isinstance(v, list) and all(_int(x) for x in v), "a list of integers"),
              "env_step_start": _COUNTER, "env_step_end": _COUNTER, "train_step_start": _COUNTER,
              "train_step_end": _COUNTER},
    key=lambda r: (r["task"], r["episode"]))
"""A `muse-wm adapt` episodes.jsonl record (muse_jax/loops/adapt.py `episode_record`)."""
CURVE_LINE = RecordKind(
    "learning-curve line", required={"impl": (nonempty_str, "an implementation name"), "env_steps": _COUNTER},
    optional={"seed": _COUNTER, "episodes": _COUNTER, "score": (number_or_null, "a finite number or null"),
              "success_rate": (lambda v: v is None or (finite_number(v) and 0 <= v <= 1), "a rate from 0 to 1"),
              "train_steps": _COUNTER, "wall_s": (number_or_null, "a finite number or null")})
"""A line of a learning-curve file (benchmarks/learning_curve.py --out, benchmarks/official/run.py)."""
OFFICIAL_EVENT = RecordKind(
    "official episode event",
    required={"env_steps": _COUNTER, "score": (finite_number, "a finite number"), "train_steps": _COUNTER,
              "wall_s": (finite_number, "a finite number")},
    optional={"success": (lambda v: v is None or isinstance(v, bool), "true, false or null"), "length": _COUNTER,
              "worker": _COUNTER})
"""A line of an official DreamerV3 run's events.jsonl (benchmarks/official/official_entry.py, read by run.py)."""
SA_EXAMPLE = RecordKind(
    "self-awareness training row",
    required={"task": (lambda v: isinstance(v, str), "a task name"), "plan": (lambda v: isinstance(v, str), "text"),
              "chunk": (lambda v: isinstance(v, str), "text"),
              "label": (lambda v: finite_number(v) and 0 <= v <= 1, "a number from 0 to 1")})
"""A row of MUSE-LLM's self-awareness replay (`replay.jsonl` beside the M_sa weights; agents/muse.py)."""


def _say(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def cut_torn_tail(path: str | Path, say: Callable[[str], None] = _say) -> bool:
    """Cut a torn last line (no newline at the end: a kill mid-write) so the next append starts on a fresh
    line, and say so in one line. Never through a link (UnsafePath). True when something was cut."""
    path = Path(path)
    if not path.is_symlink() and not path.is_file():
        return False
    fd = open_nofollow(path, os.O_RDWR)
    with os.fdopen(fd, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return False
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return False
        start = max(0, size - RECORD_LINE_MAX_BYTES)
        f.seek(start)
        tail = f.read()
        cut = tail.rfind(b"\n")
        keep = start + cut + 1 if cut >= 0 else (0 if start == 0 else size)
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    say(f"{path}: cut a torn last line ({size - keep} bytes, a write cut short); what it held is redone")
    return True


def read_records(path: str | Path, kind: RecordKind, *, resume: bool = False, upto: int | None = None,
                 say: Callable[[str], None] = _say) -> list[dict[str, Any]]:
    """The records of `path` (none when missing), checked against `kind`; see the module docstring.

    `upto`: drop records whose `kind.order` field is past it (a checkpoint's step). `resume`: cut a torn
    tail and rewrite the file without dropped records (duplicates, past `upto`), saying each in one line."""
    path = Path(path)
    if not path.is_symlink() and not path.exists():
        return []
    if path.is_dir():
        raise RecordError(f"{path} is a folder, not a record file; give a file")
    if resume:
        cut_torn_tail(path, say)
    size = path.stat().st_size
    if size > RECORD_FILE_MAX_BYTES:
        raise RecordError(f"{path} is {size >> 20} MiB, more than any {kind.name} file holds "
                          f"({RECORD_FILE_MAX_BYTES >> 20} MiB); give the right file")
    data = path.read_bytes()
    lines = data.split(b"\n")
    torn = not data.endswith(b"\n") and data != b""
    kept: list[dict[str, Any]] = []
    seen: set[Hashable] = set()
    duplicates: list[int] = []
    past: list[int] = []
    last_order: tuple[int, Any] | None = None
    fix = "fix or delete that line (the file is left as it is)"
    for n, raw in enumerate(lines, start=1):
        if torn and n == len(lines):
            break  # the torn tail: ignored (cut above on resume)
        if not raw.strip():
            continue
        if len(raw) > RECORD_LINE_MAX_BYTES:
            raise RecordError(f"{path} line {n} is {len(raw) >> 20} MiB long, not a record; {fix}")
        try:
            record = json.loads(raw.decode("utf-8"))  # a NaN parses; the schema then names its field
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            why = "is not UTF-8 text" if isinstance(e, UnicodeDecodeError) else "is not valid JSON"
            raise RecordError(f"{path} line {n} {why}; {fix}") from None
        problem = kind.problem(record)
        if problem:
            raise RecordError(f"{path} line {n} {problem}; {fix}")
        if kind.key is not None:
            key = kind.key(record)
            if key in seen:
                duplicates.append(n)
                continue
            seen.add(key)
        if kind.order is not None:
            value = record[kind.order]
            if upto is not None and value > upto:
                past.append(n)
                continue
            if last_order is not None and value < last_order[1]:
                raise RecordError(f"{path} line {n} has {kind.order} {value} after {kind.order} {last_order[1]} "
                                  f"(line {last_order[0]}): rows out of order; {fix}")
            last_order = (n, value)
        kept.append(record)
    notes = []
    if duplicates:
        notes.append(f"dropped {len(duplicates)} duplicate {kind.name}(s) (line(s) {_lines(duplicates)}; "
                     "the first is kept)")
    if past:
        notes.append(f"dropped {len(past)} {kind.name}(s) past the checkpoint's {kind.order} {upto} "
                     f"(line(s) {_lines(past)}; they are logged again)")
    if notes:
        if resume:
            atomic_write_jsonl(path, kept)
        say(f"{path}: {'; '.join(notes)}" + ("" if resume else " (the file is left as it is)"))
    return kept


def _lines(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:5])
    return shown + (f" and {len(numbers) - 5} more" if len(numbers) > 5 else "")
