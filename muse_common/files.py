"""Crash-safe file writes shared by both sides: a reader never sees half a file or half a line."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any


class UnsafePath(OSError):
    """A write that would follow a symbolic link or leave the folder it was given; one line, names the path.

    A subclass of OSError, so every command that already reports a failed write as one line reports this too."""


NAME_MAX_LEN = 128
"""The longest name from input (task, model, run, seed) that becomes part of a path: a file name stays far
below the 255 bytes file systems allow, with room for the project's prefixes and suffixes."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@-]*")


def name_problem(value: object, what: str = "name") -> str | None:
    """Why `value` cannot become one component of a path (empty, a `/`, `..`, a leading dot or dash, a
    control character, too long), or None. Names from input are checked with this before any path is built."""
    text = str(value)
    if not text:
        return f"{what} is empty; give a name of letters, digits and . _ + = @ -"
    if len(text) > NAME_MAX_LEN:
        return f"{what} is {len(text)} characters long; at most {NAME_MAX_LEN} (it becomes a file name)"
    if not _NAME.fullmatch(text) or ".." in text:
        return (f"{what} {text!r} cannot be part of a path; use letters, digits and . _ + = @ - "
                "(no '/', no '..', not starting with '.' or '-')")
    return None


def check_name(value: object, what: str = "name") -> str:
    """`value` as a string when `name_problem` finds nothing, else ValueError with its one line."""
    problem = name_problem(value, what)
    if problem:
        raise ValueError(problem)
    return str(value)


def link_problem(path: str | Path) -> str | None:
    """Why writing at `path` could reach a file elsewhere: `path` or its folder is a symbolic link. None
    when neither is (a missing path is fine)."""
    p = Path(path)
    for q in (p, p.parent):
        if q.is_symlink():
            return (f"{q} is a symbolic link; this program never writes through a link (a received run folder "
                    f"could point it at any file you can write): remove the link, or give another folder")
    return None


def refuse_link(path: str | Path) -> None:
    """Raise UnsafePath (one line) when `link_problem` finds one."""
    problem = link_problem(path)
    if problem:
        raise UnsafePath(problem)


RUN_FOLDER_SCAN_LIMIT = 200_000
"""Entries looked at by `run_folder_links` before it stops: a run folder holds some thousands (checkpoints),
so a bigger one is not a run folder, and the scan stays under a second."""


def run_folder_links(folder: str | Path) -> list[Path]:
    """The symbolic links inside `folder` (not the folder itself, which the user named), without following
    any. A run writes only inside its folder, so a link there (a received folder's `.run.lock` pointing at
    ~/.bashrc) is refused before the run opens anything."""
    root = Path(folder)
    if not root.is_dir():
        return []
    found: list[Path] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            seen += 1
            p = Path(dirpath) / name
            if p.is_symlink():
                found.append(p)
        if seen > RUN_FOLDER_SCAN_LIMIT:
            break
    return found


def run_folder_link_problem(folder: str | Path) -> str | None:
    """One line naming the first link inside `folder` (see `run_folder_links`), or None."""
    links = run_folder_links(folder)
    if not links:
        return None
    more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
    return (f"{links[0]} is a symbolic link inside the run folder{more}; a run never writes through a link "
            f"(a received folder could point it at any file you can write): remove it, or give another folder")


def open_nofollow(path: str | Path, flags: int, mode: int = 0o666) -> int:
    """os.open with O_NOFOLLOW after `refuse_link` on the path and its folder: the file descriptor of `path`
    itself, never of what a link points to (ELOOP from the kernel becomes the same one line)."""
    refuse_link(path)
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as e:
        if e.errno == 40:  # ELOOP: the last component became a link between the check and the open
            raise UnsafePath(link_problem(path) or f"{path} is a symbolic link; never written through") from None
        raise


def output_dir_problem(path: str | Path) -> str | None:
    """Why `path` cannot be an output folder (empty; an existing file; a read-only or unwritable disk), or
    None. Checked before any work and without creating anything. (Links inside a run folder are refused when
    its lock is taken, `run_lock.run_folder_lock`, before the run writes anything.)"""
    if str(path).strip() == "":
        return "the output folder is empty (''); give a folder name (a '.' for the current folder is explicit)"
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
    """Write to a temp file in the same folder, fsync, then rename over `path`. The rename replaces a link
    at `path` rather than writing through it; a `path` or folder that is a link is refused (UnsafePath)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_link(path)
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
    refuse_link(path)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    tmp.unlink(missing_ok=True)  # a link left at the temp name is removed, never written through
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
        fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except UnsafePath:
        raise
    except OSError as e:
        raise _named(e, path) from None


JSON_FILE_MAX_BYTES = 64 << 20
"""The biggest JSON file of a run folder read whole (64 MiB): settings, metrics and results files the project
writes are some KiB; a bigger one is not one of them and is refused before it is read into memory."""


class RunFileError(ValueError):
    """A JSON file of a run folder that is not what the project wrote there: one line `PATH is not WHAT
    (PROBLEM); FIX`. A ValueError, so every command that reports bad input as one line reports this too."""

    def __init__(self, path: str | Path, what: str, problem: str, fix: str) -> None:
        self.path, self.what, self.problem, self.fix = Path(path), what, problem, fix
        super().__init__(f"{path} is not {what} ({problem}); {fix}")


def json_object_problem(data: object) -> str | None:
    """Why parsed JSON is not an object (`a JSON list, not an object`), or None."""
    return None if isinstance(data, dict) else f"a JSON {type(data).__name__}, not an object"


def read_json_object(path: str | Path, what: str, fix: str,
                     fields: Sequence[tuple[str, type | tuple[type, ...]]] = ()) -> dict[str, Any]:
    """The JSON object in `path`, a file a run folder holds (settings, metrics, results, a model's meta), which
    may come from someone else or be damaged. Raises RunFileError naming the file, `what` it should be, the
    problem and `fix` when it is larger than JSON_FILE_MAX_BYTES, not UTF-8, not JSON (nested too deep
    included), not an object, or lacks one of `fields` (name, type) or holds another type there (a bool is
    not an int). An OSError reading it (a missing file included) is raised as it is."""
    path = Path(path)
    size = path.stat().st_size
    if size > JSON_FILE_MAX_BYTES:
        raise RunFileError(path, what, f"{size} bytes, more than the {JSON_FILE_MAX_BYTES >> 20} MiB such a file "
                           "can hold", fix)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise RunFileError(path, what, "not UTF-8 text", fix) from None
    except (ValueError, RecursionError) as e:
        raise RunFileError(path, what, f"not valid JSON: {' '.join(str(e).split())[:200]}", fix) from None
    problem = json_object_problem(data)
    for name, kind in fields if problem is None else ():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if name not in data:
            problem = f"no {name!r}"
        elif not isinstance(data[name], kinds) or (isinstance(data[name], bool) and bool not in kinds):
            problem = f"{name!r} is {str(data[name])[:80]!r}, not {' or '.join(k.__name__ for k in kinds)}"
        if problem:
            break
    if problem:
        raise RunFileError(path, what, problem, fix)
    return data


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
