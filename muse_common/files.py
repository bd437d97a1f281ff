"""Crash-safe file writes shared by both sides: a reader never sees half a file or half a line."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any


def output_dir_problem(path: str | Path) -> str | None:
    """Why `path` cannot be an output folder (an existing file; a read-only or unwritable disk), or
    None. Checked before any work and without creating anything."""
    p = Path(path).expanduser().absolute()
    if p.exists() and not p.is_dir():
        return f"{p} is an existing file, not a folder; give a folder (new, or one an earlier run wrote)"
    probe = p
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{p}: {probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        try:
            read_only = bool(os.statvfs(probe).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        why = "is on a read-only file system" if read_only else "is not writable by you"
        return f"{p}: {probe} {why}; give a folder on a writable disk"
    return None


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write to a temp file in the same folder, fsync, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise _named(e, path) from None
        raise
    return path


def _named(error: OSError, path: Path) -> OSError:
    """The OSError of a write with the file it was writing (a full disk's ENOSPC names no file)."""
    if error.filename is not None or not error.errno:
        return error
    return type(error)(error.errno, error.strerror or os.strerror(error.errno), str(path))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_json(path: str | Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=_default) + "\n")


def atomic_save_figure(fig: Any, path: str | Path, dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG via a temp file + rename, then close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    try:
        fig.savefig(tmp, dpi=dpi, format="png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> Path:
    """Rewrite a JSONL file whole (one record a line, as `append_jsonl` writes them), atomically."""
    return atomic_write_text(path, "".join(json.dumps(r, default=_default) + "\n" for r in records))


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one JSON line with a single write + fsync, so a kill leaves whole lines only
    (a torn last line, if the OS ever leaves one, is skipped by `read_jsonl`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, default=_default) + "\n"
    try:
        with open(path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise _named(e, path) from None


def read_jsonl(path: str | Path, required: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    """Records (JSON objects holding the `required` keys) of a JSONL file. A torn final line (from a
    kill mid-write) is ignored; any other line that is not a record (`42`, `{}`, not JSON) is skipped
    with one warning on stderr naming it (once per process), and the file is left as it is."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    last = len(lines) - 1  # a file ending in a newline has an empty last piece
    for n, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if n < last:  # not the torn tail of a kill
                _warn_skipped(path, n + 1, "is not valid JSON")
            continue
        if not isinstance(record, dict):
            _warn_skipped(path, n + 1, f"is a JSON {type(record).__name__}, not a record")
            continue
        missing = [k for k in required if k not in record]
        if missing:
            _warn_skipped(path, n + 1, f"is not a record (no {', '.join(missing)})")
            continue
        yield record


_WARNED: set[tuple[str, int]] = set()


def _warn_skipped(path: Path, line: int, why: str) -> None:
    if (str(path), line) not in _WARNED:
        _WARNED.add((str(path), line))
        print(f"warning: {path} line {line} {why}; skipped (the file is left as it is)", file=sys.stderr)


def _default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
