"""`muse-llm`: run an LLM agent on a text env (resumable), list an env's tasks, report runs.

    muse-llm run --env alfworld --agent react --split eval_out_of_distribution --limit 5 --out runs/x
    muse-llm tasks --env alfworld --split eval_out_of_distribution
    muse-llm report runs/x runs/y
    muse-llm compare | alfworld-pipeline | serve | sweep-tau --help

Env and agent names come from llm_side/registry.py: the built-ins, and third-party ones installed under the
entry-point groups `muse_llm.envs` / `muse_llm.agents` (a `module:factory` path is refused: no code from settings).
A run is a RunSpec built and run by llm_side/run_spec.py, as every other command that runs agents builds and
runs its own. `tasks` and `report` never import torch. Errors print one line (exit 2);
MUSE_LLM_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from llm_side import registry
from llm_side.run_settings import add_task_flags, load_settings
from llm_side.run_spec import (
    RUN_KEYS,
    RunSpec,
    UsageError,
    build_spec,
    execute,
    make_env,
    outcome_line,
    parse_options,
    run_command,
)
from muse_common.arg_parser import ArgumentParser
from muse_common.settings import describe


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


def run_spec_of(args: argparse.Namespace) -> RunSpec:
    """The RunSpec of `muse-llm run`'s flags over its `--config` file."""
    return build_spec(load_settings(args.config, RUN_KEYS), {k: getattr(args, k) for k in RUN_KEYS})


def cmd_run(args: argparse.Namespace) -> int:
    if args.list_options:
        cfg = load_settings(args.config, RUN_KEYS)
        print(list_options(args.env or cfg.get("env"), args.agent or cfg.get("agent")), end="")
        return 0
    if not args.out:
        raise UsageError("run needs --out DIR (the run folder)")
    spec = run_spec_of(args)
    summary = execute(spec, args.out, progress=not args.no_progress)
    print(outcome_line(spec, summary, args.out))
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
    parser = ArgumentParser(prog="muse-llm", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an agent on tasks x episodes (resumes an existing --out)")
    run.add_argument("--config", help="YAML of run settings (configs/llm/); flags override it")
    add_task_flags(run, env_help=f"one of {', '.join(registry.names('env'))} or a plugin "
                   "registered under the entry-point group muse_llm.envs")
    run.add_argument("--agent", help=f"one of {', '.join(registry.names('agent'))} or a plugin registered "
                     "under the entry-point group muse_llm.agents")
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
    for name, (_, summary) in PASSTHROUGH.items():  # listed in --help; main() hands them their own parser
        sub.add_parser(name, help=f"{summary} (muse-llm {name} --help)", add_help=False)
    return parser


# Subcommands with their own argument parsers, handed the rest of the command line: (entry, --help line).
PASSTHROUGH = {
    "compare": ("llm_side.compare:main", "MUSE-LLM Tables 2-4: ReAct, Reflexion and MUSE on the same episodes"),
    "alfworld-pipeline": ("llm_side.pipeline_alfworld:main",
                          "MUSE-LLM Algorithm 3: collect, train M_sa, SFT, DPO, deploy on ALFWorld"),
    "serve": ("llm_side.serve:main", "an OpenAI-compatible server (llama.cpp or transformers) on a packaged model"),
    "sweep-tau": ("llm_side.sweep:main", "RefRea's similarity-threshold study (paper 003, Figure 3)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in PASSTHROUGH:
        module, attr = PASSTHROUGH[argv[0]][0].split(":")
        return int(getattr(importlib.import_module(module), attr)(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    return run_command(args.command, lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
