"""Wall time of `adapt` for K novel tasks side by side (vmapped over the task axis) vs one task at a time.

Why: MUSE §3.2.1 adapts "one novel task at a time", so each task's episodes must run one after another;
throughput can only come from running the tasks side by side. This script runs both settings of
`adapt.parallel_tasks` in one process on the same pre-trained checkpoint (same tasks, episodes, seed),
times each including compilation, and checks that both wrote every task's episodes.

    python benchmarks/adapt_tasks.py --checkpoint runs/quickstart --tasks 10 --episodes 2
    python benchmarks/adapt_tasks.py --pretrain-config smoke --tasks 2 --episodes 1   # makes a tiny checkpoint

The last line printed is always one JSON object.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record  # noqa: E402
from muse_common.records import ADAPT_EPISODE, read_records  # noqa: E402
from muse_jax.config import load_config, parse_overrides  # noqa: E402
from muse_jax.envs.metaworld import NOVEL_TASKS  # noqa: E402


def time_adapt(checkpoint: str, agent: str, out: Path, tasks: list[str], episodes: int, parallel: bool,
               overrides: dict[str, Any]) -> float:
    """Seconds for one whole `adapt` run (compilation included); checks every episode was written."""
    from muse_jax.loops.adapt import adapt

    t0 = time.perf_counter()
    adapt(checkpoint, agent, out, tasks=tasks, episodes=episodes,
          overrides={**overrides, "adapt.parallel_tasks": parallel}, echo=lambda s: None)
    wall = time.perf_counter() - t0
    n = len(read_records(out / "episodes.jsonl", ADAPT_EPISODE))  # checked, each (task, episode) once
    if n != len(tasks) * episodes:
        raise SystemExit(f"{out}: {n} episodes written, expected {len(tasks) * episodes}.")
    return wall


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from muse_common.arg_parser import ArgumentParser, path_text_arg

    p = ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=None, help="a `muse-wm pretrain` logdir")
    p.add_argument("--pretrain-config", default=None, help="without --checkpoint: pre-train this config first")
    p.add_argument("--agent", default="muse", choices=["muse", "dreamer"])
    p.add_argument("--tasks", type=int, default=10, help="the first K novel tasks of MUSE Figure 4")
    p.add_argument("--episodes", type=int, default=2)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="adapt-time config override (e.g. env.max_episode_steps=100)")
    p.add_argument("--workdir", default=None, type=path_text_arg,
                   help="where the two adapt outputs go (default: a temp folder)")
    args = p.parse_args(argv)
    if not 1 <= args.tasks <= len(NOVEL_TASKS):
        raise SystemExit(f"--tasks {args.tasks}: give 1..{len(NOVEL_TASKS)}.")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="adapt_tasks_"))
    checkpoint = args.checkpoint
    pretrain_s = None
    if checkpoint is None:
        if args.pretrain_config is None:
            raise SystemExit("give --checkpoint RUN or --pretrain-config NAME.")
        from muse_jax.loops.pretrain import pretrain

        cfg = load_config(args.pretrain_config, [f"agent={args.agent}"])
        checkpoint = str(work / "pretrain")
        t0 = time.perf_counter()
        pretrain(cfg, checkpoint, echo=lambda s: None)
        pretrain_s = time.perf_counter() - t0
    tasks = list(NOVEL_TASKS[: args.tasks])
    overrides = parse_overrides(args.overrides)
    vmapped = time_adapt(checkpoint, args.agent, work / "vmapped", tasks, args.episodes, True, overrides)
    one = time_adapt(checkpoint, args.agent, work / "one_at_a_time", tasks, args.episodes, False, overrides)
    import jax

    record = {"tasks": len(tasks), "episodes_per_task": args.episodes, "agent": args.agent,
              "vmapped_s": round(vmapped, 2), "one_at_a_time_s": round(one, 2), "speedup": round(one / vmapped, 3),
              "pretrain_s": None if pretrain_s is None else round(pretrain_s, 2), "checkpoint": checkpoint,
              "device": str(jax.devices()[0].device_kind), "platform": platform.platform(),
              "cpu_count": os.cpu_count()}
    return emit_record(record, None)


if __name__ == "__main__":
    main()
