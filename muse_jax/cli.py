"""`muse-wm`: pretrain, adapt, compare. Thin shell over muse_jax.loops and muse_jax.evaluate.

Known user errors (bad config, missing checkpoint, NaN loss) end with one readable line and exit
code 2 (usage) or 1 (run failed), not a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="muse-wm", description="MUSE world-model agent on Meta-World.")
    sub = p.add_subparsers(dest="cmd", required=True)

    pre = sub.add_parser("pretrain", help="multi-task pre-training (resumes when --logdir has checkpoints)")
    pre.add_argument("--config", required=True, help="configs/wm/NAME.yaml or a NAME such as smoke, quickstart, paper")
    pre.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set model.deter=256 (repeatable)")
    pre.add_argument("--logdir", required=True, help="run folder: metrics.jsonl, tb/, checkpoints/")
    pre.add_argument("--agent", choices=["muse", "dreamer"], default=None,
                     help="muse (default) or dreamer: the same model without the self-awareness head and loss")
    pre.add_argument("--stop-at", type=int, default=None, help=argparse.SUPPRESS)

    ad = sub.add_parser("adapt", help="adapt a pre-trained agent on novel tasks and score it")
    ad.add_argument("--checkpoint", required=True, help="a pretrain --logdir, its checkpoints/ or one step folder")
    ad.add_argument("--agent", required=True, choices=["muse", "dreamer"])
    ad.add_argument("--tasks", nargs="+", default=None, help="novel tasks (default: the config's env.novel_tasks)")
    ad.add_argument("--episodes", type=int, default=None, help="episodes per task (default: adapt.episodes, 20)")
    ad.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ad.add_argument("--logdir", required=True, help="output folder: results.json, roc.png, table.md, ...")
    ad.add_argument("--one-task-at-a-time", action="store_true",
                    help="adapt the novel tasks one after another instead of side by side (vmapped)")
    ad.add_argument("--stop-after-rounds", type=int, default=None, help=argparse.SUPPRESS)

    cmp_ = sub.add_parser("compare", help="two or more adapt outputs side by side (markdown)")
    cmp_.add_argument("runs", nargs="+", help="adapt --logdir folders")
    cmp_.add_argument("--out", default=None, help="also write a combined ROC plot (PNG) here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from muse_jax.config import ConfigError, load_config, parse_overrides

    if args.cmd != "compare":  # a resumed run or an adaptation reuses the compiled train step
        from muse_jax.parallel import enable_compilation_cache

        enable_compilation_cache(os.environ.get("JAX_COMPILATION_CACHE_DIR", "~/.cache/muse_jax/xla"))

    try:
        if args.cmd == "compare":
            from muse_jax.evaluate import compare

            print(compare(args.runs, args.out), end="")
            return 0
        from muse_jax.checkpoint import CheckpointError
        from muse_jax.loops.pretrain import NonFiniteLossError
    except (ConfigError, FileNotFoundError) as e:
        print(f"muse-wm: error: {e}", file=sys.stderr)
        return 2
    try:
        if args.cmd == "pretrain":
            overrides = list(args.overrides) + ([f"agent={args.agent}"] if args.agent else [])
            cfg = load_config(args.config, overrides)
            from muse_jax.loops.pretrain import pretrain

            res = pretrain(cfg, args.logdir, stop_at=args.stop_at)
            print(f"pretrain done: {res['counters']}")
            return 0
        from muse_jax.loops.adapt import adapt

        overrides = parse_overrides(args.overrides)
        if args.one_task_at_a_time:
            overrides["adapt.parallel_tasks"] = False
        res = adapt(args.checkpoint, args.agent, args.logdir, tasks=args.tasks, episodes=args.episodes,
                    overrides=overrides, stop_after_rounds=args.stop_after_rounds)
        if res is not None:
            from muse_jax.evaluate import table_markdown

            print(table_markdown([res]), end="")
        return 0
    except (ConfigError, CheckpointError, FileNotFoundError, ValueError) as e:
        print(f"muse-wm: error: {e}", file=sys.stderr)
        return 2
    except NonFiniteLossError as e:
        print(f"muse-wm: stopped: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
