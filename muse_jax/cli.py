"""`muse-wm`: pretrain, adapt, compare. Thin shell over muse_jax.loops and muse_jax.evaluate.

Known user errors (bad config, missing checkpoint, NaN loss, an unwritable --logdir, a full disk)
end with one readable line and exit code 2 (fix the command) or 1 (the run stopped), not a traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from muse_common.arg_parser import ArgumentParser, path_text_arg
from muse_jax.agent_kinds import AGENT_KINDS

os.environ.setdefault("HF_HUB_OFFLINE", "1")


CACHE_ENV_HINT = "MUSE_JAX_COMPILATION_CACHE=/a/writable/folder, or =0 to turn the cache off"


def _cache_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not keep compiled XLA programs on disk (default: $XDG_CACHE_HOME/muse-jax/xla or "
                        "~/.cache/muse-jax/xla; MUSE_JAX_COMPILATION_CACHE=0 or a folder also sets it)")


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="muse-wm", description="MUSE world-model agent on Meta-World.")
    sub = p.add_subparsers(dest="cmd", required=True)

    pre = sub.add_parser("pretrain", help="multi-task pre-training (resumes when --logdir has checkpoints)")
    pre.add_argument("--config", required=True, help="configs/wm/NAME.yaml or a NAME such as smoke, quickstart, paper")
    pre.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set model.deter=256 (repeatable)")
    pre.add_argument("--logdir", required=True, help="run folder: metrics.jsonl, tb/, checkpoints/")
    pre.add_argument("--agent", choices=AGENT_KINDS, default=None,
                     help="muse (default) or dreamer: the same model without the self-awareness head and loss")
    pre.add_argument("--seeds", type=int, nargs="+", default=None, metavar="SEED",
                     help="train.seed; several seeds train together, one vmapped train step for all, each in "
                          "its own run folder LOGDIR/seed<SEED> (one seed: LOGDIR itself, as without --seeds)")
    _cache_flag(pre)
    pre.add_argument("--stop-at", type=int, default=None, help=argparse.SUPPRESS)
    pre.add_argument("--from-step", type=int, default=None, metavar="STEP",
                     help="resume from this checkpoint step instead of the newest (after a damaged checkpoint); "
                          "later steps are moved to LOGDIR/checkpoints_set_aside/")

    ad = sub.add_parser("adapt", help="adapt a pre-trained agent on novel tasks and score it")
    ad.add_argument("--checkpoint", required=True, help="a pretrain --logdir, its checkpoints/ or one step folder")
    ad.add_argument("--agent", required=True, choices=AGENT_KINDS)
    ad.add_argument("--tasks", nargs="+", default=None, help="novel tasks (default: the config's env.novel_tasks)")
    ad.add_argument("--episodes", type=int, default=None, help="episodes per task (default: adapt.episodes, 20)")
    ad.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ad.add_argument("--logdir", required=True, help="output folder: results.json, roc.png, table.md, ...")
    ad.add_argument("--one-task-at-a-time", action="store_true",
                    help="adapt the novel tasks one after another instead of side by side (vmapped)")
    _cache_flag(ad)
    ad.add_argument("--stop-after-rounds", type=int, default=None, help=argparse.SUPPRESS)

    cmp_ = sub.add_parser("compare", help="two or more adapt outputs side by side (markdown)")
    cmp_.add_argument("runs", nargs="+", help="adapt --logdir folders")
    cmp_.add_argument("--out", default=None, type=path_text_arg, help="also write a combined ROC plot (PNG) here")
    return p


class UsageError(ValueError):
    """A command-line problem the user fixes by changing the command (exit 2)."""


def check_logdir(path: str, flag: str = "--logdir") -> None:
    """An output folder must be a folder we can write: checked before any work, without creating it."""
    from muse_common.files import output_dir_problem

    problem = output_dir_problem(path)
    if problem:
        raise UsageError(f"{flag} {problem}.")


def check_results_files(runs: Sequence[str]) -> None:
    """Each adapt output's results.json, where present, must be JSON holding what `compare` reads
    (an object with `agent`, `episodes` and a `tasks` list of per-task objects); named if it is not."""
    from muse_common.files import RunFileError, read_json_object

    for run in runs:
        path = Path(run) / "results.json"
        if path.is_file():
            rerun = f"rerun `muse-wm adapt ... --logdir {run}` to rewrite it."
            try:
                data = read_json_object(path, "an adapt results file", rerun)
            except RunFileError as e:
                raise UsageError(str(e)) from None
            problem = results_problem(data)
            if problem:
                raise UsageError(f"{path} is not an adapt results file ({problem}); {rerun}")


def results_problem(data: object) -> str | None:
    """Why a parsed results.json cannot be compared, or None."""
    from muse_common.files import json_object_problem

    if not isinstance(data, dict):
        return json_object_problem(data)
    missing = [k for k in ("agent", "episodes", "tasks") if k not in data]
    if missing:
        return f"no {', '.join(repr(k) for k in missing)}"
    if not isinstance(data["agent"], str):
        return f"'agent' is {data['agent']!r}"
    tasks = data["tasks"]
    if not isinstance(tasks, list) or not all(isinstance(t, dict) and isinstance(t.get("task"), str) for t in tasks):
        return "'tasks' is not a list of per-task results"
    return None


def check_compare_out(out: str) -> None:
    """`compare --out` is the path of a PNG file: not a folder, in a folder we can write."""
    if Path(out).is_dir():
        raise UsageError(f"--out {out} is a folder; give the path of a PNG file, e.g. --out {Path(out) / 'roc.png'}.")
    check_logdir(str(Path(out).absolute().parent), "--out")


def _say(line: str) -> None:
    """Print one report line on the real stderr (a failed checkpoint save may still hold fd 2), on a line of
    its own: a progress bar a stop cut short is closed first, so the report never trails its last frame."""
    held = sys.modules.get("muse_jax.orbax_quiet")  # not imported by `compare`
    out = held.user_stderr() if held else sys.stderr
    bars = sys.modules.get("tqdm.std")
    open_bars = list(getattr(getattr(bars, "tqdm", None), "_instances", None) or [])
    for bar in open_bars:
        try:
            bar.close()
        except Exception:  # noqa: BLE001 - a bar on a full or closed stream: the report line matters more
            pass
    if open_bars and out is not sys.stderr:  # the bars closed into the held fd 2: end their line here
        line = "\n" + line
    print(line, file=out, flush=True)


def check_task_names(cfg: Any) -> None:
    """Every name in env.tasks belongs to the configured suite, and (Meta-World, the only suite `adapt`
    runs) every name in env.novel_tasks is a Meta-World task: a typo in the novel tasks is refused at
    pretrain, not stored in the checkpoint to fail at adapt."""
    from muse_jax.envs import suite
    from muse_jax.envs.metaworld import check_task, configure_gl

    if cfg.env.image:
        configure_gl(cfg.env.render_backend)  # before check_task imports mujoco
    try:
        suite.check_tasks(cfg.env.suite, cfg.env.tasks)
    except ValueError as e:
        raise UsageError(f"config key 'env.tasks': {e}") from None
    if cfg.env.suite != "metaworld":
        return
    for name in cfg.env.novel_tasks:
        try:
            check_task(name)
        except ValueError as e:
            raise UsageError(f"config key 'env.novel_tasks': {e}") from None


def _one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.errno and e.filename:
        return f"cannot use {e.filename}: {os.strerror(e.errno)}."
    return " ".join(str(e).split())


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if argv is None and args.cmd != "compare":
        # The command itself (not a call from Python): restart once under glibc's 2 MiB pages, before JAX is
        # imported; the CPU train step then pays ~1.7k page faults instead of ~100k (muse_jax/host_allocator.py,
        # docs/speed.md "Host memory"). Off: MUSE_JAX_HUGE_PAGES=0.
        from muse_jax.host_allocator import restart_with_huge_pages

        restart_with_huge_pages()
    from muse_jax.config import ConfigError

    if args.cmd == "compare":
        try:
            return _compare(args)
        except (ConfigError, ValueError, OSError) as e:  # FileNotFoundError and a results.json that is not JSON too
            _say(f"muse-wm: error: {_one_line(e)}")
            return 2
    from muse_common.interrupts import recording_interrupts
    from muse_jax import orbax_quiet
    from muse_jax.parallel import cli_cache_dir, enable_compilation_cache

    # A second run, a resumed run or an adaptation loads the compiled train step instead of compiling it
    # (docs/speed.md: time to the first update, first run vs second). Off: --no-compile-cache or
    # MUSE_JAX_COMPILATION_CACHE=0.
    cache = cli_cache_dir(args.no_compile_cache)
    if cache is not None:
        try:
            enable_compilation_cache(cache)
        except OSError as e:  # an unwritable cache folder costs compile time, not the run
            _say(f"muse-wm: warning: no compilation cache ({_one_line(e)}); set {CACHE_ENV_HINT}.")
    orbax_quiet.HOLD_STDERR_AFTER_FAILED_SAVE = True  # a failed save is reported as one line (orbax_quiet.py)
    started = [False]  # set once the run folder is locked: an OSError after it stopped a run, before it a usage error
    try:
        with recording_interrupts():  # a Ctrl-C that Python swallows still stops the run (interrupts.py)
            return _pretrain_command(args, started) if args.cmd == "pretrain" else _adapt_command(args, started)
    except (Exception, KeyboardInterrupt) as e:
        code = _report(e, started[0], _resume_point(args))
        if code is None:
            raise
        return code


def _compare(args: argparse.Namespace) -> int:
    from muse_jax.evaluate import compare

    if args.out:
        check_compare_out(args.out)
    check_results_files(args.runs)
    print(compare(args.runs, args.out), end="")
    return 0


def _pretrain_command(args: argparse.Namespace, started: list[bool]) -> int:
    from muse_common.run_lock import run_folder_lock
    from muse_jax.config import load_config

    overrides = list(args.overrides) + ([f"agent={args.agent}"] if args.agent else [])
    seeds = args.seeds or []
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds {' '.join(map(str, seeds))}: name each seed once.")
    cfg = load_config(args.config, overrides + [f"train.seed={s}" for s in seeds[:1]])
    check_logdir(args.logdir)
    check_task_names(cfg)
    if args.from_step is not None and args.from_step < 0:
        raise UsageError(f"--from-step {args.from_step}: give a checkpoint step (a folder name under "
                         f"{Path(args.logdir) / 'checkpoints'}).")
    if len(seeds) > 1:
        return _pretrain_seeds_command(args, [load_config(args.config, overrides + [f"train.seed={s}"])
                                              for s in seeds], started)
    from muse_jax import parallel
    from muse_jax.loops.pretrain import _pretrain  # the public `pretrain` plus the hidden --stop-at

    try:  # parallel.distributed: join the multi-host job before anything touches a device
        parallel.init_distributed(cfg)
    except (RuntimeError, ValueError) as e:
        raise UsageError(str(e)) from None
    logdir = parallel.process_logdir(args.logdir)
    with run_folder_lock(logdir):  # one writer per run folder, held for the run's life
        started[0] = True
        res = _pretrain(cfg, logdir, stop_at=args.stop_at, from_step=args.from_step)
    parallel.finish_distributed()
    print(f"pretrain done: {res['counters']}")
    return 0


def _pretrain_seeds_command(args: argparse.Namespace, cfgs: list[Any], started: list[bool]) -> int:
    """`pretrain --seeds` with several seeds: one process, one run folder per seed (loops/seeds.py)."""
    from contextlib import ExitStack

    from muse_common.run_lock import run_folder_lock
    from muse_jax.loops.seeds import pretrain_seeds, seed_logdirs

    if cfgs[0].parallel.distributed:
        raise UsageError("--seeds with several seeds trains them in one process; set parallel.distributed=false, "
                         "or run one seed per multi-host job.")
    logdirs = seed_logdirs(args.logdir, args.seeds)
    with ExitStack() as held:
        for d in logdirs:  # one writer per run folder, held for the run's life
            held.enter_context(run_folder_lock(d))
        started[0] = True
        results = pretrain_seeds(cfgs, logdirs, stop_at=args.stop_at, from_step=args.from_step)
    for seed, res in zip(args.seeds, results, strict=True):
        print(f"pretrain done: seed{seed}: {res['counters']}")
    return 0


def _adapt_command(args: argparse.Namespace, started: list[bool]) -> int:
    from muse_common.run_lock import run_folder_lock
    from muse_jax.config import parse_overrides
    from muse_jax.config.schema import ADAPT_EPISODES_MAX

    if args.episodes is not None and not 1 <= args.episodes <= ADAPT_EPISODES_MAX:
        raise UsageError(f"--episodes {args.episodes}: adapt at least one episode per task and at most "
                         f"{ADAPT_EPISODES_MAX} (the paper adapts 20).")
    overrides = parse_overrides(args.overrides)
    check_logdir(args.logdir)
    from muse_jax.loops.adapt import _adapt  # the public `adapt` plus the hidden --stop-after-rounds

    if args.one_task_at_a_time:
        overrides["adapt.parallel_tasks"] = False
    with run_folder_lock(args.logdir):
        started[0] = True
        res = _adapt(args.checkpoint, args.agent, args.logdir, tasks=args.tasks, episodes=args.episodes,
                     overrides=overrides, stop_after_rounds=args.stop_after_rounds)
    if res is not None:
        from muse_jax.evaluate import table_markdown

        print(table_markdown([res]), end="")
    return 0


def _resume_point(args: argparse.Namespace) -> str:
    """What a rerun of the interrupted command resumes from, in words: pretrain's last complete checkpoint
    (orbax renames a step's temporary folder to the bare step number once it is complete), adapt's finished
    episodes."""
    if args.cmd != "pretrain":
        return f"the episodes finished so far ({Path(args.logdir) / 'episodes.jsonl'})"
    folder = Path(args.logdir) / "checkpoints"
    try:
        steps = [int(p.name) for p in folder.iterdir() if p.name.isdigit() and p.is_dir()]
    except OSError:
        steps = []
    if not steps:
        return "the start (no checkpoint was complete yet)"
    return f"the last complete checkpoint (step {max(steps)} in {folder})"


def _report(e: BaseException, started: bool, resume_point: str = "the last complete checkpoint") -> int | None:
    """One stderr line for a known way a run ends, and its exit code: 2 fix the command, 1 the run
    stopped (what finished is kept), 130 interrupted; None for anything else (a real bug: traceback)."""
    from muse_common.files import UnsafePath
    from muse_common.run_lock import RunFolderBusy
    from muse_jax.config import ConfigError
    from muse_jax.errors import CheckpointError, CheckpointWriteError, NonFiniteLossError

    if isinstance(e, CheckpointWriteError):
        _say(f"muse-wm: stopped: {e}")
        return 1
    if isinstance(e, ConfigError | CheckpointError | FileNotFoundError | ValueError | RunFolderBusy | UnsafePath):
        _say(f"muse-wm: error: {e}")
        return 2
    if isinstance(e, NonFiniteLossError):
        _say(f"muse-wm: stopped: {e}")
        return 1
    if isinstance(e, KeyboardInterrupt):
        _say(f"muse-wm: stopped: interrupted (Ctrl-C); rerun the same command to resume from {resume_point}; "
             "a checkpoint cut short is discarded.")
        return 130
    if not isinstance(e, OSError):
        return None
    # a disk that filled up or turned read-only mid-run: finished data is kept
    where = f" {e.filename}" if e.filename else ""
    what = os.strerror(e.errno) if e.errno else str(e)
    if not started:
        _say(f"muse-wm: error: cannot use{where}: {what}.")
        return 2
    fix = "free some space" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "fix the folder"
    _say(f"muse-wm: stopped: cannot write{where}: {what}; finished episodes and checkpoints are kept. "
         f"{fix.capitalize()}, then rerun the same command to resume.")
    return 1


if __name__ == "__main__":
    sys.exit(main())
