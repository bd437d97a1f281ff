"""Where ALFWorld's games live, and which ones count (no alfworld import: `muse-llm tasks` stays cheap).

Game data comes from `ALFWORLD_DATA` (an `alfworld-download` folder, or any folder holding
`json_2.1.1/` and `logic/`) or, by default, from the project's offline archive unpacked once into a
cache folder; the archive is looked for in `$MUSE_SHARED_DATA/alfworld/` (default `../shared/data`).
Game selection mirrors the stock `AlfredTWEnv` loader (skip movable-receptacle and
sliced tasks and games marked unsolvable), which gives 140 / 134 / 200 games for the three splits.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
from functools import lru_cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SHARED = REPO_ROOT.parent / "shared" / "data"
SHARED_DATA = Path(os.environ.get("MUSE_SHARED_DATA", DEFAULT_SHARED)) / "alfworld"
DEFAULT_TGZ = SHARED_DATA / "alfworld_json_2.1.1_eval.tgz"
REACT_PROMPTS = SHARED_DATA / "react_alfworld_3prompts.json"
REFLEXION_EXAMPLES = SHARED_DATA / "reflexion_few_shot_examples.txt"
ALFWORLD_PACKAGE_DEFAULT = Path.home() / ".cache" / "alfworld"
CACHE_DIR = Path(os.environ.get("MUSE_LLM_CACHE", Path.home() / ".cache" / "muse-llm")) / "alfworld"

SPLITS: dict[str, str] = {
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
    "train": "valid_train",
}
"""Split name (as in the paper / AlfredTWEnv) -> folder under json_2.1.1. Folder names work too."""

DEFAULT_SPLIT = "eval_out_of_distribution"

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

REACT_PREFIXES = {
    "pick_and_place": "put",
    "pick_clean_then_place": "clean",
    "pick_heat_then_place": "heat",
    "pick_cool_then_place": "cool",
    "look_at_obj": "examine",
    "pick_two_obj": "puttwo",
}
"""Game folder prefix -> the ReAct prompt family (react_<family>_{0,1})."""


class AlfworldDataMissing(FileNotFoundError):
    """No game data: the message says how to provide it."""


def data_root(data: str | Path | None = None) -> Path:
    """Folder holding `json_2.1.1/` and `logic/`: `data`, else $ALFWORLD_DATA, else the unpacked archive."""
    chosen = data or os.environ.get("ALFWORLD_DATA")
    if not data and chosen and Path(chosen).expanduser() == ALFWORLD_PACKAGE_DEFAULT \
            and not (ALFWORLD_PACKAGE_DEFAULT / "json_2.1.1").is_dir():
        chosen = None  # `import alfworld` sets this default itself; without downloaded games, use the archive
    if chosen:
        root = Path(chosen).expanduser()
        if not (root / "json_2.1.1").is_dir():
            raise AlfworldDataMissing(
                f"ALFWorld data folder {root} has no json_2.1.1/ folder. Point ALFWORLD_DATA (or --env-opt "
                f"data=...) at a folder made by `alfworld-download`, or unset it to use {DEFAULT_TGZ} (found through "
                f"MUSE_SHARED_DATA).")
        return root
    return unpack_archive(DEFAULT_TGZ, CACHE_DIR)


def unpack_archive(tgz: Path, cache: Path) -> Path:
    """Unpack `tgz` into `cache` once; a temp folder + rename keeps a killed unpack from leaving half a tree."""
    if (cache / "json_2.1.1").is_dir() and (cache / "logic").is_dir():
        return cache
    if not tgz.is_file():
        raise AlfworldDataMissing(
            f"ALFWorld game data not found: set ALFWORLD_DATA to a folder made by `alfworld-download` "
            f"(with json_2.1.1/ and logic/), or provide the offline archive at {tgz} (set MUSE_SHARED_DATA to the "
            f"shared data folder that holds alfworld/{tgz.name} when it is not at {DEFAULT_SHARED}).")
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache.parent, prefix=".alfworld-unpack-"))
    try:
        with tarfile.open(tgz) as tf:
            tf.extractall(tmp, filter="data")
        if not (tmp / "logic").is_dir():
            raise AlfworldDataMissing(f"{tgz} has no logic/ folder; it is not the ALFWorld eval archive.")
        try:
            os.replace(tmp, cache)
        except OSError:
            if not (cache / "json_2.1.1").is_dir():  # lost a race to another process: theirs is fine
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return cache


def split_folder(split: str | None) -> str:
    split = split or DEFAULT_SPLIT
    if split in SPLITS:
        return SPLITS[split]
    if split in SPLITS.values():
        return split
    raise ValueError(f"unknown ALFWorld split '{split}'; choose one of: {', '.join([*SPLITS, *SPLITS.values()])}.")


@lru_cache(maxsize=16)
def _list_games(root: str, folder: str) -> tuple[str, ...]:
    base = Path(root) / "json_2.1.1"
    out = []
    for traj in sorted((base / folder).glob("*/*/traj_data.json")):
        game_dir = traj.parent
        rel = game_dir.relative_to(base).as_posix()
        if "movable" in rel or "Sliced" in rel:
            continue
        game = game_dir / "game.tw-pddl"
        if not game.is_file():
            continue
        try:
            with open(traj) as f:
                task_type = json.load(f)["task_type"]
            with open(game) as f:
                solvable = json.load(f).get("solvable", True)
        except (OSError, ValueError, KeyError):
            continue
        if task_type in TASK_TYPES and solvable:
            out.append(rel)
    return tuple(out)


def task_ids(split: str | None = None, data: str | Path | None = None) -> list[str]:
    """Stable, readable ids: the game folder relative to json_2.1.1, e.g.
    'valid_unseen/pick_and_place_simple-Pencil-None-Shelf-308/trial_T2019...'."""
    return list(_list_games(str(data_root(data)), split_folder(split)))


def game_file(task_id: str, data: str | Path | None = None) -> Path:
    parts = Path(task_id).parts
    if not parts or Path(task_id).is_absolute() or any(p in ("..", ".") for p in parts) or "\x00" in task_id:
        # a task id from --tasks or a settings file is a path below the data folder, never one leaving it
        raise ValueError(f"unknown ALFWorld task {task_id!r}: a task id is a game folder below json_2.1.1 "
                         "(no '..', not absolute); list ids with `muse-llm tasks --env alfworld`.")
    path = data_root(data) / "json_2.1.1" / task_id / "game.tw-pddl"
    if not path.is_file():
        raise ValueError(f"unknown ALFWorld task '{task_id}' (no {path}); "
                         "list ids with `muse-llm tasks --env alfworld`.")
    return path


def react_family(task_id: str) -> str:
    """The ReAct prompt family of a task id ('put', 'clean', ...)."""
    name = task_id.split("/")[-2] if "/" in task_id else task_id
    for prefix, family in REACT_PREFIXES.items():
        if name.startswith(prefix):
            return family
    raise ValueError(f"cannot tell the task type of ALFWorld task '{task_id}'.")


@lru_cache(maxsize=1)
def react_prompts() -> dict[str, str]:
    if not REACT_PROMPTS.is_file():
        raise AlfworldDataMissing(f"ReAct ALFWorld prompts not found at {REACT_PROMPTS}.")
    with open(REACT_PROMPTS) as f:
        return json.load(f)


def react_examples(task_id: str, shots: int = 2) -> str:
    """The ReAct examples of the task's type: two in the original order (_1 then _0), or just _0."""
    family = react_family(task_id)
    d = react_prompts()
    return "".join(d[f"react_{family}_{i}"] for i in (1, 0)[2 - shots:])


@lru_cache(maxsize=1)
def reflexion_examples() -> str:
    if not REFLEXION_EXAMPLES.is_file():
        raise AlfworldDataMissing(f"Reflexion few-shot examples not found at {REFLEXION_EXAMPLES}.")
    return REFLEXION_EXAMPLES.read_text()
