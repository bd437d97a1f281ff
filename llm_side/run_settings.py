"""The settings of an LLM run as a YAML file and as flags, shared by `muse-llm run` (cli.py),
`muse-llm sweep-tau` (sweep.py) and `muse-llm compare` (compare.py): one loader with one set of error
lines, and the task-selection flags the commands take, with the same names, types and help
(run_spec.build_spec turns both into a RunSpec).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from llm_side.backends import DEFAULT_MODEL
from muse_common.overrides import load_yaml, yaml_problem


class SettingsError(ValueError):
    """A settings file that cannot be used; the message is one line naming the file and the fix."""


def load_settings(path: str | None, keys: tuple[str, ...], what: str = "run settings") -> dict[str, Any]:
    """The mapping in the YAML file `path` ({} when no file is given), refused with a `SettingsError`
    when the file is missing, not UTF-8, not YAML, empty, not a mapping, has keys outside `keys`, or has
    an `env_opt`/`agent_opt` that is not a mapping."""
    if path is None:
        return {}
    if not str(path).strip():
        raise SettingsError("--config is empty (''); give a YAML file, or drop --config")
    p = Path(path)
    if p.exists() and not p.is_file():  # a folder, or a named pipe that would be read forever
        raise SettingsError(f"config file {p} is not a regular file; give a YAML file")
    if not p.is_file():
        raise SettingsError(f"config file {p} not found")
    try:
        data = load_yaml(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SettingsError(f"config file {p} is not UTF-8 text (byte {e.start}); give a YAML file") from None
    except yaml.YAMLError as e:
        raise SettingsError(f"config file {p} is not valid YAML: {yaml_problem(e)}") from None
    if data is None:
        raise SettingsError(f"config file {p} is empty; give the {what} ({', '.join(keys)}) or drop --config")
    if not isinstance(data, dict):
        raise SettingsError(f"{p} must hold a mapping of {what}")
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise SettingsError(f"{p}: unknown key(s) {unknown}; allowed: {', '.join(keys)}")
    for key in ("env_opt", "agent_opt"):
        if not isinstance(data.get(key) or {}, dict):
            raise SettingsError(f"{p}: '{key}' must be a mapping of option: value, got {data[key]!r}")
    return data


MODEL_HELP = (f"smollm2 | qwen0.5b | qwen1.5b | gemma270m | hf:DIR | gguf:FILE | openai:URL:MODEL "
              f"(default: env MUSE_LLM_MODEL, else {DEFAULT_MODEL})")


def add_task_flags(parser: argparse.ArgumentParser, env_help: str | None = None) -> None:
    """The flags that choose the env, its tasks, the model and the seed (settings-file keys env, split,
    tasks, limit, max_steps, model, seed); a flag given on the line wins over the file."""
    parser.add_argument("--env", help=env_help)
    parser.add_argument("--split")
    parser.add_argument("--tasks", help="comma-separated task ids")
    parser.add_argument("--limit", type=int, help="first N tasks only")
    parser.add_argument("--max-steps", type=int, help="default: the env's own limit")
    parser.add_argument("--model", help=MODEL_HELP)
    parser.add_argument("--seed", type=int)
