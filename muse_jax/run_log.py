"""Run logging: metrics.jsonl (crash-safe lines), TensorBoard scalars and a tqdm progress bar.
(Named `run_log`, not `logging`, so it never shadows the standard library's module.)

One `RunLogger.write(record)` call feeds all sinks, so the JSONL file and TensorBoard never disagree.
Non-finite floats are written as null in JSON (JSON has no NaN) and skipped in TensorBoard.
"""

from __future__ import annotations

import errno
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from muse_common.files import append_jsonl
from muse_common.records import PRETRAIN_METRICS, cut_torn_tail, read_records


def _say(message: str) -> None:
    print(f"muse-wm: {message}", file=sys.stderr)


def drop_metrics_after(path: str | Path, env_steps: int) -> None:
    """On resume, check metrics.jsonl (`muse_common.records.PRETRAIN_METRICS`) and forget the rows logged after
    the checkpoint we resume from, duplicates and a torn last line: they will be logged again, and kept they
    would make plots zig-zag. Each drop is said in one line; a row that is not a metrics row (`step: "abc"`,
    out of order) stops the run with RecordError (one line naming file and line). Rewritten atomically."""
    read_records(path, PRETRAIN_METRICS, resume=True, upto=env_steps, say=_say)


class RunLogger:
    """metrics.jsonl + TensorBoard (DIR/tb) + progress bar over env steps."""

    def __init__(self, logdir: str | Path, total: int, initial: int = 0, desc: str = "", tensorboard: bool = True,
                 unit: str = "step", position: int | None = None):
        """`position`: the progress bar's line when several runs share one terminal (tqdm's `position`)."""
        self.dir = Path(logdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        cut_torn_tail(self.path, _say)  # the next row never glues onto a kill's half line
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            _quiet_writer_threads()
            self._tb = SummaryWriter(str(self.dir / "tb"))
        self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True,
                         mininterval=1.0, position=position)
        self._t0 = time.time()

    def advance(self, n: int, **postfix: Any) -> None:
        self._bar.update(n)
        if postfix:
            self._bar.set_postfix({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in postfix.items()},
                                  refresh=False)

    def write(self, record: dict[str, Any]) -> None:
        """Append one metrics line; `step` (x-axis) must be in the record."""
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        append_jsonl(self.path, clean)
        if self._tb is not None:
            step = int(record["step"])
            try:
                _raise_writer_thread_error(self._tb)  # before queueing more: a dead writer thread's queue fills up
                for k, v in record.items():
                    if k != "step" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                        self._tb.add_scalar(k, v, step)
                self._tb.flush()
                _raise_writer_thread_error(self._tb)
            except OSError as e:  # a full disk: one stop line naming the folder, no tensorboardX traceback after it
                tb, self._tb = self._tb, None
                _abandon(tb)
                if e.filename is None and e.errno:
                    raise OSError(e.errno, e.strerror or os.strerror(e.errno), str(self.dir / "tb")) from None
                raise

    def close(self) -> None:
        self._bar.close()
        tb, self._tb = self._tb, None
        if tb is not None:
            try:
                tb.close()
            except OSError:  # a full or read-only disk, reported by the run itself as one line
                _abandon(tb)


_WRITER_THREAD_ERRORS: list[OSError] = []
"""OSErrors raised in tensorboardX's writer threads (a full disk), taken by `_raise_writer_thread_error`."""


def _quiet_writer_threads() -> None:
    """Keep a tensorboardX writer thread's OSError (its own write to a full disk) from printing a thread
    traceback: it is kept in `_WRITER_THREAD_ERRORS` and raised in the main thread by the next
    `RunLogger.write`, which the run reports as one line. Every other thread error goes to the hook before."""
    before = threading.excepthook
    if getattr(before, "muse_writer_threads", False):
        return

    def hook(args: Any) -> None:
        if isinstance(args.exc_value, OSError) and type(args.thread).__module__.startswith("tensorboardX"):
            _WRITER_THREAD_ERRORS.append(args.exc_value)
            return
        before(args)

    hook.muse_writer_threads = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def _raise_writer_thread_error(tb: Any) -> None:
    """Raise what a writer thread of `tb` failed with, or an I/O error if one died without a word:
    events queued to a dead thread fill its queue, and the next `add_scalar` would wait forever."""
    if _WRITER_THREAD_ERRORS:
        raise _WRITER_THREAD_ERRORS.pop()
    for writer in (getattr(tb, "all_writers", None) or {}).values():
        worker = getattr(getattr(writer, "event_writer", None), "_worker", None)
        if worker is not None and not worker.is_alive():
            raise OSError(errno.EIO, "the TensorBoard writer thread stopped")


def _abandon(tb: Any) -> None:
    """Mark a tensorboardX writer's event files closed without flushing them: its exit handler would
    retry the flush that just failed and print a traceback after the run's own one-line report."""
    for writer in (getattr(tb, "all_writers", None) or {}).values():
        event_writer = getattr(writer, "event_writer", None)
        if event_writer is not None:
            event_writer._closed = True  # noqa: SLF001 - tensorboardX has no public "discard"
