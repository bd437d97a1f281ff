"""Orbax checkpoints of a run: storage and integrity only (no model imports).

Why a wrapper around orbax's CheckpointManager: every run saves the same items (the learner
state, the replay arrays, JSON meta with the config and counters, and a manifest of parameter
shapes), and every failure a user can meet (a checkpoint of another model size, a truncated copy)
must come back as ONE readable error instead of a pytree traceback from deep inside orbax.
Building and restoring a learner from a checkpoint is `muse_jax.loops.restore`'s job; keeping orbax's
own output off the user's terminal is `muse_jax.orbax_quiet`'s, and the one-process view each host
takes of orbax in a multi-host run is `muse_jax.orbax_one_process`'s.

Atomicity is orbax's: a step is written into `<step>.orbax-checkpoint-tmp-*` and renamed when
complete, so a crash mid-save leaves no folder that `latest_step` picks up. On top of that each
finished step gets `muse_files.json` (sizes and CRC32 of every file, written atomically), which
lets `restore` name the exact file that was truncated or corrupted after the fact.

The state is an `nnx.State` (or a plain mapping of arrays). It is stored as Flax NNX's pure dict
(`nnx.to_pure_dict`) and put back with `nnx.replace_by_pure_dict`, so the layout on disk does not
depend on flax's pytree internals. Two choices on top of the NNX helpers: a Variable whose value is
itself a pytree (an optax state, which may hold `nnx.State`s of parameters) stores that pytree with
each inner State as a pure dict too; PRNG key arrays are stored as their raw key data and re-wrapped
with the template's key implementation on restore.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from muse_common.files import UnsafePath, atomic_write_json, run_folder_link_problem
from muse_jax.errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
    CheckpointWriteError,
)
from muse_jax.orbax_one_process import orbax_sees_one_process
from muse_jax.orbax_quiet import os_error_in, stderr_kept_on_success, user_stderr
from muse_jax.parallel import host_local, meet

__all__ = ["CHECKPOINTS_DIR", "INTEGRITY_FILE", "CheckpointCorruptError", "CheckpointError", "CheckpointMismatchError",
           "CheckpointNotFoundError", "CheckpointWriteError", "Checkpointer", "first_mismatch", "manifest_of",
           "resolve_checkpoint_path", "user_stderr", "verify_integrity"]

INTEGRITY_FILE = "muse_files.json"
CHECKPOINTS_DIR = "checkpoints"
STORAGE_FORMAT = 2
"""Layout of the `state` item: 2 = NNX pure dict. Checkpoints without the field (format 1, a
path-keyed dict written before this layout) are refused with one line naming the fix."""
_ITEMS = ("state", "replay", "meta", "manifest", "partial")
"""`partial`: the unfinished episodes of each env at save time (pre-training stores them so a resume
loses no env step taken before the checkpoint; see loops/pretrain.py)."""


# ----------------------------------------------------------------------------------------------
# Pure helpers: NNX state <-> pure dict, manifest, comparison.


def _is_state(x: Any) -> bool:
    return isinstance(x, nnx.State)


def _variable_value(x: Any) -> Any:
    """A Variable's value (or a raw leaf) with any nnx.State inside it turned into a pure dict."""
    value = x.get_value() if isinstance(x, nnx.Variable) else x
    return jax.tree.map(lambda v: pure_dict(v) if _is_state(v) else v, value, is_leaf=_is_state)


def pure_dict(state: Any) -> dict[str, Any]:
    """`nnx.to_pure_dict` of `state`, with pytree-valued Variables (optax states) made pure as well."""
    if not _is_state(state):
        if not isinstance(state, Mapping):
            raise TypeError(f"checkpoint state must be an nnx.State or a mapping of arrays, "
                            f"got {type(state).__name__}.")
        state = nnx.State(state)
    return nnx.to_pure_dict(state, _variable_value)


def _put_back(variable: Any, value: Any) -> Any:
    """`nnx.replace_by_pure_dict`'s replace function: the stored value into the template's Variable,
    a pytree-valued one (optax state) rebuilt with the template's structure."""
    old = variable.get_value() if isinstance(variable, nnx.Variable) else variable
    if not isinstance(old, jax.Array | jax.ShapeDtypeStruct | np.ndarray):
        value = jax.tree.unflatten(jax.tree.structure(old), jax.tree.leaves(value))
    return variable.replace(value) if isinstance(variable, nnx.Variable) else value


def _path_name(path: tuple) -> str:
    parts = []
    for entry in path:
        for attr in ("key", "name", "idx"):
            if hasattr(entry, attr):
                parts.append(str(getattr(entry, attr)))
                break
        else:
            parts.append(str(entry))
    return "/".join(parts) if parts else "<root>"


def _is_key_array(x: Any) -> bool:
    if not isinstance(x, jax.Array | jax.ShapeDtypeStruct):
        return False
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _dtype_name(x: Any) -> str:
    if _is_key_array(x):
        return f"key<{jax.random.key_impl(x)}>" if not isinstance(x, jax.ShapeDtypeStruct) else str(x.dtype)
    return str(np.dtype(x.dtype))


def manifest_of(tree: Any) -> dict[str, dict[str, Any]]:
    """{path: {"shape": [...], "dtype": name}} for every leaf of a pytree of arrays or shapes (an
    nnx.State is taken as its pure dict, so paths read `agent/wm/encoder/kernel`)."""
    if _is_state(tree):
        tree = pure_dict(tree)
    out = {}
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        shape = list(x.shape) if hasattr(x, "shape") else list(np.shape(x))
        dtype = _dtype_name(x) if hasattr(x, "dtype") else str(np.asarray(x).dtype)
        out[_path_name(path)] = {"shape": shape, "dtype": dtype}
    return out


def first_mismatch(saved: Mapping[str, Mapping[str, Any]],
                   expected: Mapping[str, Mapping[str, Any]]) -> str | None:
    """A one-line description of the first difference between two manifests, or None if they agree."""
    for path, want in expected.items():
        got = saved.get(path)
        if got is None:
            return f"parameter '{path}' (shape {tuple(want['shape'])}) is missing from the checkpoint"
        if list(got["shape"]) != list(want["shape"]):
            return (f"parameter '{path}': expected shape {tuple(want['shape'])}, "
                    f"found shape {tuple(got['shape'])}")
        if got["dtype"] != want["dtype"]:
            return f"parameter '{path}': expected dtype {want['dtype']}, found dtype {got['dtype']}"
    extra = [p for p in saved if p not in expected]
    if extra:
        return f"parameter '{extra[0]}' is in the checkpoint but not in the model ({len(extra)} extra)"
    return None


def _to_storable(x: Any) -> Any:
    if _is_key_array(x):
        return jax.random.key_data(x)
    if isinstance(x, jax.Array | np.ndarray):
        return x
    return np.asarray(x)


def _storage_template(x: Any) -> Any:
    """The abstract array orbax restores into: the template leaf's shape, dtype and sharding."""
    if _is_key_array(x):
        data = jax.eval_shape(lambda k: jax.random.key_data(k), x)
        return jax.ShapeDtypeStruct(data.shape, data.dtype, sharding=getattr(x, "sharding", None))
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    arr = np.asarray(x)
    return jax.ShapeDtypeStruct(arr.shape, arr.dtype)


def _from_storage(stored: Any, template: Any) -> Any:
    """A restored leaf as the template leaf wants it: PRNG key data re-wrapped as a key array."""
    if not _is_key_array(template):
        return stored
    impl = jax.random.key_impl(template) if not isinstance(template, jax.ShapeDtypeStruct) else None
    return jax.random.wrap_key_data(stored, **({"impl": impl} if impl is not None else {}))


def _fill_template(template: Any, stored: Any) -> Any:
    """The template (an nnx.State or a mapping) with the stored pure dict's values put in."""
    pure_template = pure_dict(template)
    values = jax.tree.map(_from_storage, stored, pure_template)
    if not _is_state(template):
        return values
    state = jax.tree.map(lambda x: x, template)  # a fresh State: the caller's template stays as it was
    nnx.replace_by_pure_dict(state, values, _put_back)
    return state


# ----------------------------------------------------------------------------------------------
# Integrity: sizes and CRC32 of every file of a finished step.


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def _list_files(step_dir: Path) -> dict[str, dict[str, int]]:
    files = {}
    for root, _, names in os.walk(step_dir):
        for name in sorted(names):
            path = Path(root) / name
            rel = str(path.relative_to(step_dir))
            if rel == INTEGRITY_FILE or name.startswith(f".{INTEGRITY_FILE}"):
                continue
            files[rel] = {"size": path.stat().st_size, "crc32": _crc32(path)}
    return files


def write_integrity(step_dir: Path) -> None:
    atomic_write_json(step_dir / INTEGRITY_FILE, {"files": _list_files(step_dir)})


def earlier_steps(step_dir: Path) -> list[int]:
    """Finished checkpoint steps older than `step_dir` in the same folder (newest last)."""
    try:
        here = int(step_dir.name)
        return sorted(int(p.name) for p in step_dir.parent.iterdir() if p.name.isdigit() and int(p.name) < here)
    except (ValueError, OSError):
        return []


def corrupt_fix(step_dir: Path) -> str:
    """What to type to get going again after checkpoint `step_dir` turned out damaged."""
    older = earlier_steps(step_dir)
    if not older:
        return (f"delete {step_dir} and rerun the same command (there is no earlier checkpoint: "
                "pretrain starts over)")
    prev = older[-1]
    prev_dir = step_dir.parent / str(prev)
    return (f"delete {step_dir} and rerun the same command to resume from step {prev}, or keep it and resume from "
            f"step {prev} with `muse-wm pretrain ... --from-step {prev}` (adapt: --checkpoint {prev_dir})")


def verify_integrity(step_dir: Path) -> None:
    """Raise CheckpointCorruptError naming the first missing, truncated or damaged file."""
    record = step_dir / INTEGRITY_FILE
    if not record.exists():
        return  # saved by another tool, or killed between orbax's rename and this record: trust orbax
    problem = None
    try:
        files = json.loads(record.read_bytes().decode("utf-8"))["files"]
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, OSError, RecursionError) as e:
        problem, files = f"not a JSON object with 'files' ({type(e).__name__})", {}
    if problem is None:
        problem = _integrity_problem(files)
    if problem:
        raise CheckpointCorruptError(f"checkpoint file {record} is damaged ({problem}); "
                                     f"{corrupt_fix(step_dir)}.") from None
    fix = corrupt_fix(step_dir)
    for rel, want in files.items():
        path = step_dir / rel
        if not path.exists():
            raise CheckpointCorruptError(f"checkpoint file {path} is missing; {fix}.")
        size = path.stat().st_size
        if size != want["size"]:
            raise CheckpointCorruptError(
                f"checkpoint file {path} is truncated or changed: {size} bytes, "
                f"expected {want['size']}; {fix}.")
        if _crc32(path) != want["crc32"]:
            raise CheckpointCorruptError(f"checkpoint file {path} is corrupt (CRC32 mismatch); {fix}.")


def _integrity_problem(files: Any) -> str | None:
    """Why `muse_files.json`'s 'files' is not a record of a step (it lists every file with its size and CRC32:
    never empty, names inside the step folder, non-negative integers), or None. A received checkpoint's record
    is checked before it is believed: `{"files": []}` would otherwise pass every file unchecked."""
    if not isinstance(files, dict) or not files:
        return "its 'files' is not a non-empty mapping of file -> size and CRC32"
    for rel, want in files.items():
        parts = Path(rel).parts
        if not rel or Path(rel).is_absolute() or ".." in parts:
            return f"it names {rel!r}, a path outside the step folder"
        ok = isinstance(want, dict) and all(
            isinstance(want.get(k), int) and not isinstance(want.get(k), bool) and want[k] >= 0
            for k in ("size", "crc32"))
        if not ok:
            return f"its entry for {rel!r} is not a size and CRC32"
    return None


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------------------------
# The manager.


def _host_storable(x: Any) -> np.ndarray:
    """Multi-host: this host's numpy copy of a (replicated) state leaf."""
    return np.asarray(_to_storable(host_local(x)))


def _host_template(x: Any) -> np.ndarray:
    """Multi-host: a numpy state leaf to restore into on this host alone."""
    t = _storage_template(x)
    return np.zeros(t.shape, t.dtype)


class Checkpointer:
    """Keeps the last `keep` checkpoints of a run in `directory` (one subfolder per step)."""

    def __init__(self, directory: str | os.PathLike, keep: int = 2, *, read_only: bool = False) -> None:
        if keep < 1:
            raise ValueError(f"Checkpointer keep={keep}: keep at least 1 checkpoint "
                             "(train.keep_checkpoints).")
        if Path(directory).exists() and not Path(directory).is_dir():
            raise CheckpointError(f"{directory} is a file, not a checkpoint folder; move it away (a run keeps its "
                                  "checkpoints in that folder) or give another --logdir")
        self.directory = Path(directory).resolve()
        # cleanup_tmp_directories: a write cut short (kill, full disk) leaves a tmp folder; the next start removes it
        # several hosts: each process keeps its own checkpoints in its own folder (parallel.process_logdir)
        self._host_only = jax.process_count() > 1
        hosts = ocp.options.MultiprocessingOptions()
        if self._host_only:
            orbax_sees_one_process()
            hosts = ocp.options.MultiprocessingOptions(primary_host=0, active_processes={0})
            if not read_only:  # orbax creates the folder only for all processes together
                self.directory.mkdir(parents=True, exist_ok=True)
        options = ocp.CheckpointManagerOptions(max_to_keep=None if read_only else keep,
                                               create=not read_only and not self._host_only,
                                               save_interval_steps=0 if read_only else 1, read_only=read_only,
                                               enable_async_checkpointing=False, multiprocessing_options=hosts,
                                               cleanup_tmp_directories=not read_only)
        self._manager = ocp.CheckpointManager(self.directory, options=options, item_names=_ITEMS)
        self._failed_steps: set[int] = set()
        if not read_only:
            self._roll_forward()

    def _roll_forward(self) -> None:
        """Give the integrity record to finished steps that lack it.

        Orbax's rename makes a step complete; a kill between that rename and `write_integrity`
        leaves a complete step without its record, which this finishes on the next start.
        """
        for step in self.all_steps():
            step_dir = self.step_dir(step)
            if not (step_dir / INTEGRITY_FILE).exists():
                write_integrity(step_dir)

    def save(self, step: int, state: Any, *, replay: Mapping[str, np.ndarray] | None = None,
             meta: Mapping[str, Any] | None = None, partial: Mapping[str, np.ndarray] | None = None) -> Path:
        """Write one checkpoint and return its folder. Returns only when it is complete on disk.

        A write that fails (disk full, read-only, I/O error) removes its half-written folder and raises
        CheckpointWriteError naming the step kept and the space to free; earlier steps are untouched.
        """
        meta = dict(meta or {})
        try:
            json.dumps(meta)
        except TypeError as e:
            raise TypeError(f"Checkpointer.save: meta must be JSON-serialisable "
                            f"(config dict, counters): {e}") from None
        pure = pure_dict(state)
        items: dict[str, Any] = {
            "state": ocp.args.StandardSave(jax.tree.map(_host_storable if self._host_only else _to_storable, pure)),
            "meta": ocp.args.JsonSave(meta),
            "manifest": ocp.args.JsonSave({"format": STORAGE_FORMAT, "state": manifest_of(pure),
                                           "replay": sorted(replay) if replay else [],
                                           "partial": sorted(partial) if partial else []}),
        }
        if replay:
            items["replay"] = ocp.args.StandardSave({k: np.asarray(v) for k, v in replay.items()})
        if partial:
            items["partial"] = ocp.args.StandardSave({k: np.asarray(v) for k, v in partial.items()})
        self._refuse_links(int(step))
        if self._host_only:  # orbax's own barriers in a save set up collectives: start them together
            meet(f"checkpoint {int(step)}")
        try:
            with stderr_kept_on_success():
                self._manager.save(int(step), args=ocp.args.Composite(**items), force=True)
                self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001 - orbax wraps OS errors in many types; one message instead
            os_error = os_error_in(e)
            if os_error is None:
                raise
            raise CheckpointWriteError(self._write_failure(int(step), os_error)) from None
        step_dir = self.step_dir(step)
        try:  # several hosts: each process writes its own folder's record
            write_integrity(step_dir)
        except OSError as e:  # the step itself is complete; the next start writes its record
            raise CheckpointWriteError(self._write_failure(int(step), e)) from None
        return step_dir

    def _refuse_links(self, step: int) -> None:
        """A link made in the run folder during the run (the checkpoints folder, or an entry inside it, swapped
        for a link to elsewhere) is refused before orbax writes through it: UnsafePath, one line."""
        if self.directory.is_symlink():
            problem = (f"{self.directory} became a symbolic link during the run; a run never writes through a "
                       "link (it could point at any folder you can write): remove it")
        else:
            problem = run_folder_link_problem(self.directory)
        if problem:
            raise UnsafePath(f"checkpoint step {step} not written: {problem}; then rerun the same command to "
                             "resume from the last checkpoint")

    def step_dir(self, step: int) -> Path:
        return self.directory / str(int(step))

    def _remove_half_written(self, step: int, *, quiet_checks: int = 5) -> None:
        """Remove a failed step's tmp folder. Orbax's worker threads may still create files in it for a moment
        after the save raised, so it counts as gone only once it stayed absent for `quiet_checks` looks."""
        absent = 0
        for _ in range(50):
            left = list(self.directory.glob(f"{step}.orbax-checkpoint-tmp*"))
            absent = 0 if left else absent + 1
            if absent >= quiet_checks:
                return
            for p in left:
                shutil.rmtree(p, ignore_errors=True)
            time.sleep(0.1)

    def _write_failure(self, step: int, error: OSError) -> str:
        """Clean the half-written step (so its space comes back) and describe what is kept and what to free."""
        self._failed_steps.add(step)
        self._remove_half_written(step)
        kept = [s for s in self.all_steps() if s != step]
        last = kept[-1] if kept else None
        need = _tree_bytes(self.step_dir(last)) if last is not None else 0
        reason = os.strerror(error.errno) if error.errno else str(error)
        try:
            free = shutil.disk_usage(self.directory).free
        except OSError:
            free = 0
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            todo = (f"free at least {max(need, 1 << 20) / 2**20:.0f} MB on that disk (a checkpoint takes "
                    f"{need / 2**20:.1f} MB, {free / 2**20:.1f} MB are free) or lower train.keep_checkpoints")
        else:
            todo = f"make {self.directory} writable"
        kept_txt = (f"checkpoint step {last} ({self.step_dir(last)}) is intact and kept" if last is not None
                    else "no earlier checkpoint exists")
        return (f"cannot write checkpoint step {step} in {self.directory}: {reason}; {kept_txt}. "
                f"To go on, {todo}, then rerun the same command (it resumes from "
                f"{'step ' + str(last) if last is not None else 'the start'}).")

    def all_steps(self) -> list[int]:
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest finished step, or None. Half-written (tmp) folders are never listed."""
        self._manager.reload()
        return self._manager.latest_step()

    def _resolve_step(self, step: int | None) -> int:
        steps = self.all_steps()
        if step is None:
            if not steps:
                raise CheckpointNotFoundError(
                    f"no finished checkpoint in {self.directory}; "
                    "train first or point at a run's checkpoints/.")
            return steps[-1]
        if int(step) not in steps:
            raise CheckpointNotFoundError(f"no checkpoint step {step} in {self.directory}; "
                                          f"available: {steps}.")
        return int(step)

    def read_meta(self, step: int | None = None) -> dict[str, Any]:
        step = self._resolve_step(step)
        return self._read_json(step, "meta")

    def _read_json(self, step: int, item: str) -> dict[str, Any]:
        path = self.step_dir(step) / item / "metadata"
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(**{item: ocp.args.JsonRestore()}))
        except Exception as e:  # orbax raises many types; one clear message instead
            raise CheckpointCorruptError(f"checkpoint file {path} cannot be read ({type(e).__name__}: {e}); "
                                         f"{corrupt_fix(self.step_dir(step))}.") from None
        return dict(restored[item])

    def restore(self, step: int | None = None, state_template: Any = None, *, with_replay: bool = True
                ) -> tuple[Any, dict[str, np.ndarray] | None, dict[str, Any]]:
        """(state, replay, meta) of `step` (default: latest).

        `state_template` is an nnx.State (or mapping) of arrays or jax.ShapeDtypeStructs with the
        structure to restore into (e.g. a freshly created learner's state, or `jax.eval_shape` of it);
        its shardings are used, and a new State of the same kind comes back. Without it the state
        comes back as the stored pure dict.
        """
        step = self._resolve_step(step)
        step_dir = self.step_dir(step)
        verify_integrity(step_dir)
        manifest = self._read_json(step, "manifest")
        if manifest.get("format") != STORAGE_FORMAT:
            raise CheckpointMismatchError(
                f"checkpoint {step_dir} was written by an older muse-wm (storage format "
                f"{manifest.get('format', 1)}, this version reads {STORAGE_FORMAT}); pre-train again into a new "
                "--logdir, or restore it with the muse-wm version that wrote it.")
        if state_template is not None:
            problem = first_mismatch(manifest["state"], manifest_of(state_template))
            if problem:
                raise CheckpointMismatchError(
                    f"checkpoint {step_dir} does not fit the model built from the config: {problem}. "
                    "It was probably saved with another model size or observation/action spec; load it with "
                    "the config stored in the checkpoint (load_agent) or start a fresh run directory.")
        args: dict[str, Any] = {"meta": ocp.args.JsonRestore()}
        if state_template is not None:
            leaf_template = _host_template if self._host_only else _storage_template
            args["state"] = ocp.args.StandardRestore(jax.tree.map(leaf_template, pure_dict(state_template)))
        else:
            args["state"] = ocp.args.StandardRestore()
        with_replay = with_replay and bool(manifest.get("replay"))
        if with_replay:
            args["replay"] = ocp.args.StandardRestore()
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(**args))
        except Exception as e:
            raise CheckpointCorruptError(
                f"checkpoint {step_dir} cannot be restored ({type(e).__name__}: {str(e)[:300]}); "
                f"{corrupt_fix(step_dir)}.") from None
        state = restored["state"]
        if state_template is not None:
            state = _fill_template(state_template, state)
            if self._host_only:
                state = jax.device_put(state)
        replay = None
        if with_replay:
            replay = {k: np.asarray(v) for k, v in restored["replay"].items()}
        return state, replay, dict(restored["meta"])

    def restore_partial(self, step: int | None = None) -> dict[str, np.ndarray] | None:
        """The `partial` item of `step` (default: latest), or None when it was saved without one."""
        step = self._resolve_step(step)
        if not self._read_json(step, "manifest").get("partial"):
            return None
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(partial=ocp.args.StandardRestore()))
        except Exception as e:  # noqa: BLE001
            raise CheckpointCorruptError(
                f"checkpoint {self.step_dir(step)} cannot be restored ({type(e).__name__}: {str(e)[:300]}); "
                f"{corrupt_fix(self.step_dir(step))}.") from None
        return {k: np.asarray(v) for k, v in restored["partial"].items()}

    def close(self) -> None:
        self._manager.close()
        for step in sorted(self._failed_steps):  # orbax's threads have stopped: nothing recreates the folder now
            self._remove_half_written(step, quiet_checks=1)

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ----------------------------------------------------------------------------------------------
# Where a user's --checkpoint points.


def resolve_checkpoint_path(path: str | os.PathLike) -> tuple[Path, int | None]:
    """A run logdir, its checkpoints/ folder or one step folder -> (checkpoints folder, step or None)."""
    p = Path(path).resolve()
    if not p.exists():
        raise CheckpointNotFoundError(f"checkpoint path {p} does not exist; give a run logdir, its "
                                      f"{CHECKPOINTS_DIR}/ folder or one step folder.")
    if not p.is_dir():
        raise CheckpointNotFoundError(f"checkpoint path {p} is a file; give a run logdir, its {CHECKPOINTS_DIR}/ "
                                      "folder or one step folder.")
    if (p / CHECKPOINTS_DIR).is_dir():
        return p / CHECKPOINTS_DIR, None
    if p.name.isdigit() and (p / "meta").exists():
        return p.parent, int(p.name)
    if any(c.name.isdigit() for c in p.iterdir() if c.is_dir()):
        return p, None
    raise CheckpointNotFoundError(f"{p} holds no checkpoint; give a run logdir, its {CHECKPOINTS_DIR}/ "
                                  "folder or one step folder (e.g. checkpoints/3000).")
