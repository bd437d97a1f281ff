"""`muse-llm`: run an LLM agent on a text env (resumable), list an env's tasks, report runs.

    muse-llm run --env alfworld --agent react --split eval_out_of_distribution --limit 5 --out runs/x
    muse-llm tasks --env alfworld --split eval_out_of_distribution
    muse-llm report runs/x runs/y

Env and agent names come from llm_side/registry.py; a `package.module:factory` path works too (for
plugins and tests). `tasks` and `report` never import torch. Errors print one line (exit 2);
MUSE_LLM_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llm_side import registry
from llm_side.run_settings import add_task_flags, load_settings
from muse_common.overrides import OverrideError, parse_key_values
from muse_common.run_lock import RunFolderBusy, run_folder_lock
from muse_common.settings import SettingsError, build_options, describe

RUN_KEYS = (
    "env",
    "agent",
    "split",
    "tasks",
    "limit",
    "episodes",
    "max_steps",
    "model",
    "seed",
    "env_opt",
    "agent_opt",
)


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


def parse_options(pairs: Sequence[str] | None, flag: str) -> dict[str, Any]:
    """`--env-opt` / `--agent-opt` `k=v` strings -> dict of YAML scalars (true, 3, 0.5, else the text)."""
    try:
        return parse_key_values(pairs, flag, structured=False)
    except OverrideError as e:
        raise UsageError(str(e)) from None


def resolve(kind: str, name: str) -> Callable[..., Any]:
    """Registry name or `module:attr` path -> factory."""
    if ":" in name:
        module, attr = name.split(":", 1)
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"cannot load {kind} '{name}': {exc}") from None
    try:
        return registry.env_factory(name) if kind == "env" else registry.agent_factory(name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except ImportError as exc:
        raise UsageError(
            f"{kind} '{name}' is registered but cannot be imported ({exc}); "
            f"install its extra, e.g. pip install -e .[{name}]"
        ) from None


def check_options(kind: str, name: str, options: Any) -> Any:
    """A registered env's or agent's `Options` built from `--env-opt`/`--agent-opt` values (and the settings
    file's `env_opt`/`agent_opt`), or a UsageError naming the option and what it allows; a `module:factory`
    plugin gets the mapping as given."""
    table = registry.ENV_OPTIONS if kind == "env" else registry.AGENT_OPTIONS
    if name not in table:
        return options
    try:
        cls = registry.env_options(name) if kind == "env" else registry.agent_options(name)
        return build_options(cls, options, name)
    except ImportError as exc:
        raise UsageError(f"{kind} '{name}' is registered but cannot be imported ({exc}); "
                         f"install its extra, e.g. pip install -e .[{name}]") from None
    except SettingsError as exc:
        raise UsageError(f"--{kind}-opt: {exc}") from None


def list_options(env_name: str | None, agent_name: str | None) -> str:
    """`--list-options`: the fields of the named env's and agent's `Options`, with types, defaults, docs."""
    if not env_name and not agent_name:
        raise UsageError("--list-options needs --agent A and/or --env E")
    out = []
    for kind, name in (("env", env_name), ("agent", agent_name)):
        if not name:
            continue
        table = registry.ENV_OPTIONS if kind == "env" else registry.AGENT_OPTIONS
        if name not in table:
            raise UsageError(f"--list-options: {kind} '{name}' is not registered; options are listed for: "
                             f"{', '.join(table)}")
        cls = registry.env_options(name) if kind == "env" else registry.agent_options(name)
        out.append(f"{kind} {name} (--{kind}-opt key=value): {describe(cls)}")
    return "\n".join(out)


def check_pair(env_name: str, agent_name: str) -> None:
    """Refuse a registered agent on a registered env it does not run on (README's env/agent table)."""
    if env_name in registry.ENVS and agent_name in registry.AGENTS:
        envs = registry.agent_envs(agent_name)
        if env_name not in envs:
            fits = sorted(a for a in registry.AGENTS if env_name in registry.agent_envs(a))
            raise UsageError(f"agent '{agent_name}' runs on env {' / '.join(envs)}, not '{env_name}'; "
                             f"agents for {env_name}: {', '.join(fits)}")


def make_env(name: str, options: dict[str, Any]) -> Any:
    opts = check_options("env", name, options)
    factory = resolve("env", name)
    try:
        return factory(opts) if name in registry.ENV_OPTIONS else factory(**options)
    except TypeError as exc:
        raise UsageError(f"env '{name}' rejected --env-opt {options}: {exc}") from None


def select_tasks(env: Any, split: str | None, tasks: str | None, limit: int | None) -> list[str]:
    expand = getattr(env, "expand_task_ids", None)  # envs with aliases (ScienceWorld's paper ids "4-1")
    if tasks and callable(expand):
        try:
            ids = list(expand([t.strip() for t in str(tasks).split(",") if t.strip()]))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    elif tasks:
        ids = [t.strip() for t in str(tasks).split(",") if t.strip()]
        known = set(env.task_ids(split))
        unknown = [t for t in ids if t not in known]
        if unknown:
            raise UsageError(
                f"unknown task id(s) {unknown} for env '{env.name}'; list them with "
                f"`muse-llm tasks --env {env.name}" + (f" --split {split}`" if split else "`")
            )
    else:
        ids = list(env.task_ids(split))
    twice = sorted({t for t in ids if ids.count(t) > 1})
    if twice:
        raise UsageError(f"--tasks names {', '.join(repr(t) for t in twice)} more than once; give each task once "
                         "(use --episodes for more episodes of a task)")
    if limit is not None:
        ids = ids[:limit]
    return ids


INT_SETTINGS = {"limit": 1, "episodes": 1, "max_steps": 1, "seed": 0}  # name -> smallest allowed


def check_int(key: str, value: Any) -> int | None:
    """An integer run setting, or a message naming the setting and what it allows."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"'{key}' must be an integer >= {INT_SETTINGS[key]}, got {value!r}")
    if value < INT_SETTINGS[key]:
        raise UsageError(f"'{key}' must be >= {INT_SETTINGS[key]}, got {value}")
    return value


def check_resume(run_file: Path, settings: dict[str, Any]) -> None:
    """A run folder is resumed only with the settings its run.json names (as `muse-wm` does): a resume
    with another model, seed, step limit, task list or option would mix two runs under one run.json."""
    import json

    try:
        old = json.loads(run_file.read_bytes())
    except (ValueError, UnicodeDecodeError):
        old = None
    if not isinstance(old, dict):
        raise UsageError(f"{run_file} is not a run settings file (not a JSON object); delete it to resume with the "
                         "settings given, or pass a different --out folder")
    now = json.loads(json.dumps(settings))  # as run.json stores them (tuples as lists)
    if not any(k in old for k in now):
        raise UsageError(f"{run_file} names none of the run settings; delete it to resume with the settings given, "
                         "or pass a different --out folder")
    differ = [k for k in now if old.get(k) != now[k]]
    if differ:
        pairs = "; ".join(f"{k}: {old.get(k)!r} there, {now[k]!r} now" for k in differ)
        raise UsageError(f"--out {run_file.parent} holds a run with other settings ({pairs}); rerun with the settings "
                         "of its run.json to resume, or pass a different --out folder")


def cmd_run(args: argparse.Namespace) -> int:
    from llm_side.backends import DEFAULT_MODEL, LazyLLM, check_available
    from llm_side.harness.runner import run_eval
    from muse_common.files import atomic_write_json

    cfg = load_settings(args.config, RUN_KEYS)
    get = lambda key, default=None: getattr(args, key) if getattr(args, key) is not None else cfg.get(key, default)
    if args.list_options:
        print(list_options(get("env"), get("agent")), end="")
        return 0
    if not args.out:
        raise UsageError("run needs --out DIR (the run folder)")
    for key in INT_SETTINGS:
        check_int(key, get(key))
    env_name, agent_name = get("env"), get("agent")
    if not env_name or not agent_name:
        raise UsageError("run needs --env and --agent (or a --config that sets them)")
    if args.split and args.tasks:
        raise UsageError("give --split or --tasks, not both")
    from muse_common.files import output_dir_problem

    problem = output_dir_problem(args.out)
    if problem:
        raise UsageError(f"--out {problem}")
    check_pair(env_name, agent_name)
    env_opts = {**(cfg.get("env_opt") or {}), **parse_options(args.env_opt, "--env-opt")}
    agent_opts = {**(cfg.get("agent_opt") or {}), **parse_options(args.agent_opt, "--agent-opt")}
    seed, episodes = int(get("seed", 0)), int(get("episodes", 1))
    model = get("model", DEFAULT_MODEL)
    agent_options = check_options("agent", agent_name, agent_opts)  # refused before the env starts
    random.seed(seed)
    check_available(model)
    agent_factory = resolve("agent", agent_name)
    env = make_env(env_name, env_opts)
    try:
        task_ids = select_tasks(env, get("split"), get("tasks"), get("limit"))
        try:
            agent = agent_factory(env_name, LazyLLM(model), agent_options)
        except ValueError as exc:
            if "--agent-opt" in str(exc) or not agent_opts:
                raise UsageError(str(exc)) from None
            given = " ".join(f"{k}={v}" for k, v in agent_opts.items())  # name the input when the agent did not
            raise UsageError(f"agent '{agent_name}' rejected --agent-opt {given}: {exc}") from None
        out = Path(args.out)
        settings = {
            "env": env_name,
            "agent": agent_name,
            "model": model,
            "seed": seed,
            "episodes": episodes,
            "max_steps": get("max_steps"),
            "tasks": task_ids,
            "env_opt": env_opts,
            "agent_opt": agent_opts,
        }
        with run_folder_lock(out, "--out"):  # one writer per run folder, held for the run's life
            run_file = out / "run.json"
            if run_file.exists():
                check_resume(run_file, settings)
            else:
                atomic_write_json(run_file, {**settings, "argv": sys.argv[1:]})
            summary = run_eval(
                env,
                agent,
                env_name=env_name,
                agent_name=agent_name,
                task_ids=task_ids,
                episodes=episodes,
                max_steps=get("max_steps"),
                out_dir=out,
                seed=seed,
                progress=not args.no_progress,
            )
    finally:
        env.close()
    rate = summary["success_rate"]
    print(
        f"{env_name}/{agent_name}: {summary['successes']}/{summary['episodes']} episodes succeeded "
        f"({rate:.1%}); records in {out}"
    )
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    env = make_env(args.env, parse_options(args.env_opt, "--env-opt"))
    try:
        for task_id in env.task_ids(args.split):
            print(task_id)
    finally:
        env.close()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from llm_side.harness.report import render, report

    if not 0.0 <= args.threshold <= 1.0:  # also refuses nan
        raise UsageError(f"--threshold {args.threshold}: give a competence threshold from 0 to 1 (default 0.5)")
    tables, plots = report(args.dirs, threshold=args.threshold)
    print(render(tables), end="")
    for p in plots:
        print(f"ROC plot: {p}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="muse-llm", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an agent on tasks x episodes (resumes an existing --out)")
    run.add_argument("--config", help="YAML of run settings (configs/llm/); flags override it")
    add_task_flags(run, env_help=f"one of {', '.join(registry.ENVS)} or module:factory")
    run.add_argument("--agent", help=f"one of {', '.join(registry.AGENTS)} or module:factory")
    run.add_argument("--episodes", type=int, help="episodes (trials) per task; default 1")
    run.add_argument("--env-opt", action="append", metavar="K=V", help="env option, repeatable")
    run.add_argument("--agent-opt", action="append", metavar="K=V", help="agent option, repeatable")
    run.add_argument("--out", help="run folder (episodes.jsonl, summary.json); required")
    run.add_argument("--list-options", action="store_true",
                     help="print the --agent's and/or --env's options (types, defaults, docs) and exit")
    run.add_argument("--no-progress", action="store_true")
    run.set_defaults(func=cmd_run)
    tasks = sub.add_parser("tasks", help="list an env's task ids, one per line")
    tasks.add_argument("--env", required=True)
    tasks.add_argument("--split")
    tasks.add_argument("--env-opt", action="append", metavar="K=V")
    tasks.set_defaults(func=cmd_tasks)
    rep = sub.add_parser("report", help="paper-style tables and ROC plots of run folders")
    rep.add_argument("dirs", nargs="+")
    rep.add_argument("--threshold", type=float, default=0.5, help="self-awareness threshold (default 0.5)")
    rep.set_defaults(func=cmd_report)
    return parser


# Subcommands with their own argument parsers, handed the rest of the command line.
PASSTHROUGH = {
    "sweep-tau": "llm_side.sweep:main",  # RefRea threshold study (paper 003, Figure 3)
    "alfworld-pipeline": "llm_side.pipeline_alfworld:main",  # MUSE-LLM Algorithm 3 stages
    "compare": "llm_side.compare:main",  # MUSE-LLM Tables 3-4: ReAct, Reflexion, MUSE on the same episodes
    "serve": "llm_side.serve:main",  # llama.cpp's OpenAI-compatible server on a packaged GGUF
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in PASSTHROUGH:
        module, attr = PASSTHROUGH[argv[0]].split(":")
        return int(getattr(importlib.import_module(module), attr)(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `muse-llm tasks ... | head`: the reader left; exit quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"muse-llm {args.command}: stopped: interrupted; finished episodes are kept, rerun the same command "
              "to resume", file=sys.stderr)
        return 130
    except (UsageError, ValueError, OSError, RuntimeError, RunFolderBusy) as exc:
        if os.environ.get("MUSE_LLM_DEBUG"):
            raise
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) and exc.errno:
            where = f" {exc.filename}" if exc.filename else ""
            exc = f"cannot write{where}: {os.strerror(exc.errno)}; records written so far are kept"
        print(f"muse-llm {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
