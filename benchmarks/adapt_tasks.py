"""Wall time of `adapt` for K novel tasks side by side (vmapped over the task axis) vs one task at a time.

Why: MUSE §3.2.1 adapts "one novel task at a time", so each task's episodes must run one after another;
throughput can only come from running the tasks side by side. This script runs both settings of
`adapt.parallel_tasks` in one process on the same pre-trained checkpoint (same tasks, episodes, seed),
times each including compilation, and checks that both wrote every task's episodes.

    python benchmarks/adapt_tasks.py --checkpoint runs/quickstart --tasks 10 --episodes 2
    python benchmarks/adapt_tasks.py --pretrain-config smoke --tasks 2 --episodes 1   # makes a tiny checkpoint

`--compare overlap` times `adapt.overlap_collect` instead (acting while the train steps run), tasks side by
side: one untimed run per setting first compiles its programs in this process, then `--rounds` rounds each
time a serial and an overlapped run (order alternating by round, so a change of load hits both alike):

    python benchmarks/adapt_tasks.py --compare overlap --checkpoint runs/quickstart/muse --tasks 2 \
        --episodes 2 --rounds 3 --out docs/adapt_overlap_cpu.jsonl

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
    """Seconds for one whole `adapt` run (compilation included, unless an earlier run in this process compiled
    the same programs); checks every episode was written."""
    from muse_jax.loops.adapt import adapt

    t0 = time.perf_counter()
    adapt(checkpoint, agent, out, tasks=tasks, episodes=episodes,
          overrides={**overrides, "adapt.parallel_tasks": parallel}, echo=lambda s: None)
    wall = time.perf_counter() - t0
    n = len(read_records(out / "episodes.jsonl", ADAPT_EPISODE))  # checked, each (task, episode) once
    if n != len(tasks) * episodes:
        raise SystemExit(f"{out}: {n} episodes written, expected {len(tasks) * episodes}.")
    return wall


def checkpoint_config(checkpoint: str) -> str:
    """The name of the config a `muse-wm pretrain` run folder was trained with ("unknown" where its latest
    checkpoint does not say), so that a record names its checkpoint by more than a local path."""
    from muse_jax.checkpoint import Checkpointer

    with Checkpointer(Path(checkpoint) / "checkpoints", read_only=True) as ck:
        config = ck.read_meta().get("config")
    return str(config.get("name", "unknown")) if isinstance(config, dict) else "unknown"


def compare_overlap(checkpoint: str, args: Any, tasks: list[str], overrides: dict[str, Any], work: Path,
                    ) -> dict[str, Any]:
    """`adapt.overlap_collect` off vs on, tasks side by side, compiled once before any timed run."""
    import statistics

    import jax

    from benchmarks.report import git_commit

    def run(name: str, overlap: bool) -> float:
        return time_adapt(checkpoint, args.agent, work / name, tasks, args.episodes, True,
                          {**overrides, "adapt.overlap_collect": overlap})

    # Why one warm-up per setting: the learner's graph definition holds its config, so a changed setting (this one
    # included) compiles the policy and train programs again (~25 s of a ~50 s quickstart run on 2 CPU cores)
    warmup_s = run("warmup", False) + run("warmup-overlap", True)
    times: dict[str, list[float]] = {"serial": [], "overlap": []}
    for r in range(args.rounds):
        order = ("serial", "overlap") if r % 2 == 0 else ("overlap", "serial")
        for name in order:
            times[name].append(round(run(f"{name}-{r}", name == "overlap"), 2))
    serial, overlap = statistics.median(times["serial"]), statistics.median(times["overlap"])
    return {"benchmark": "adapt_overlap", "checkpoint": checkpoint, "checkpoint_config": checkpoint_config(checkpoint),
            "agent": args.agent, "tasks": len(tasks),
            "episodes_per_task": args.episodes, "overrides": args.overrides, "rounds": args.rounds,
            "warmup_s": round(warmup_s, 2), "serial_s": times["serial"], "overlap_s": times["overlap"],
            "serial_median_s": serial, "overlap_median_s": overlap, "speedup": round(serial / overlap, 3),
            "device": str(jax.devices()[0].device_kind), "cpu_cores": os.cpu_count(),
            "loadavg_1m_end": round(os.getloadavg()[0], 2), "code": git_commit(),
            "date": time.strftime("%Y-%m-%d")}


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
                   help="where the adapt outputs go (default: a temp folder)")
    p.add_argument("--compare", choices=("parallel", "overlap"), default="parallel",
                   help="parallel: tasks side by side vs one at a time; overlap: adapt.overlap_collect off vs on")
    p.add_argument("--rounds", type=int, default=3, help="--compare overlap: timed rounds (serial + overlapped)")
    p.add_argument("--out", default=None, type=path_text_arg, help="also append the record to this JSONL file")
    args = p.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: give at least 1.")
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
    if args.compare == "overlap":
        return emit_record(compare_overlap(checkpoint, args, tasks, overrides, work), args.out)
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
