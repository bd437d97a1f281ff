"""The official DreamerV3 (danijar/dreamerv3, PyPI dreamer==3.3.1) on this project's task and budget.

Why: whether this project's Dreamer learns can only be judged beside the reference implementation run
on the same task with the same budget. This script runs the official `train` script (unchanged agent,
its own replay, driver and train-ratio rule) in its own virtual environment built by
`benchmarks/official/setup.sh`, as a subprocess, and turns its per-episode log into the learning-curve
JSON lines shared with `benchmarks/learning_curve.py` (impl "official"), appended to
`docs/learning_curves/<suite>_<task>.jsonl`.

    bash benchmarks/official/setup.sh
    python benchmarks/official/run.py --suite dmc --task cartpole-swingup --seeds 0 1

Budget (defaults = the shared CPU budget; `--budget-json FILE` reads the same keys): model `size1m`,
train ratio 32, batch 16 x 64, 4 envs, action repeat 2, DMC episodes of 1000 frames (Meta-World 500),
50k agent steps, a window every 5k agent steps. Every count of steps here is agent steps (policy
decisions) summed over envs, as the official `step` counter counts them (one per env transition,
the reset transition included); frames = agent steps x action repeat. The official code has no random
prefill: it acts with the untrained policy from the first step and starts training once its replay
holds batch x seq sequences. Settings this script fixes for CPU runs and states: jax platform cpu,
compute dtype float32 (the official default bfloat16 is for accelerators), no preallocation, logging
to jsonl only, DMC proprio without the per-step render (see official_entry.py).

Resumable: rerunning the same command continues each unfinished seed from the official checkpoint
(`--run.save_every` seconds apart) and appends only windows not yet in the output file (key: impl,
seed, env_steps). A seed is finished when its `done.json` records a budget at least the requested
`--env-steps`; a larger one resumes it from its checkpoint to the new end. Runs live in
`runs/official/<suite>_<task>/seed<N>/` (logdir, events.jsonl, run.log).
The last line printed is one JSON summary object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from benchmarks.learning_curve import append_new, in_series  # noqa: E402  (the same file, keys and series)
from benchmarks.report import emit_record, git_commit  # noqa: E402
from muse_common.files import (  # noqa: E402
    UnsafePath,
    atomic_write_json,
    name_problem,
    open_nofollow,
    output_dir_problem,
    read_jsonl,
    run_folder_link_problem,
)
from muse_common.records import OFFICIAL_EVENT, read_records  # noqa: E402  (each event checked, named if not)

REPO = Path(__file__).resolve().parent.parent.parent
OFFICIAL_VERSION = "dreamer==3.3.1"
OFFICIAL_BUILD = "2"
"""The build recipe of benchmarks/official/setup.sh (its BUILD, written to the venv's .complete): 2 holds
elements < 3.19, whose later releases break 3.3.1's logging of `log/` keys (Meta-World success)."""
DEFAULT_BUDGET: dict[str, Any] = {
    "size": "size1m", "train_ratio": 32, "batch": 16, "seq_len": 64, "num_envs": 4, "action_repeat": 2,
    "episode_frames": 1000, "env_steps_total": 50_000, "prefill": 0, "log_every": 5000, "seeds": [0, 1],
}
"""The shared CPU budget. prefill 0: the official code has none (see the module docstring)."""
BUDGET_KEYS = ("size", "train_ratio", "batch", "seq_len", "num_envs", "action_repeat", "episode_frames",
               "env_steps_total", "prefill")
SUITES = ("dmc", "gym", "metaworld")
VARIANTS = ("exact-twohot",)  # official_entry.py flags of the same names


def official_paths(venv: Path | None = None) -> tuple[Path, Path]:
    """(python of the official venv, unpacked official source) under REPO/.official by default."""
    root = REPO / ".official"
    return (venv or root / "venv") / "bin" / "python", root / "dreamer-3.3.1"


def official_available(venv: Path | None = None) -> str | None:
    """None when the official venv is built by the current setup.sh, else the reason it is not usable."""
    python, src = official_paths(venv)
    marker = python.parent.parent / ".complete"
    if not marker.exists():
        return (f"the official DreamerV3 environment is not built ({python.parent.parent}); "
                "run bash benchmarks/official/setup.sh")
    if marker.read_text().strip() != OFFICIAL_BUILD:
        return (f"the official DreamerV3 environment ({python.parent.parent}) was built by an older setup.sh "
                "(its elements breaks 3.3.1's logging of Meta-World success); rerun bash benchmarks/official/setup.sh")
    if not (src / "dreamerv3" / "configs.yaml").exists():
        return f"the official source is incomplete ({src}); rerun bash benchmarks/official/setup.sh"
    return None


def official_command(python: Path, src: Path, suite: str, task: str, seed: int, budget: dict[str, Any],
                     logdir: Path, events: Path, save_every_s: int = 300, variant: str | None = None) -> list[str]:
    """The official train script's command line for one seed at `budget` (`variant`: one of VARIANTS)."""
    return [
        str(python), str(Path(__file__).resolve().parent / "official_entry.py"),
        "--src", str(src), "--repo", str(REPO), "--events", str(events), "--suite", suite, "--task", task,
        "--repeat", str(budget["action_repeat"]), "--episode-frames", str(budget["episode_frames"]),
        "--env-seed", str(seed), *([f"--{variant}"] if variant else []), "--",
        "--configs", "defaults", budget["size"],
        "--logdir", str(logdir), "--seed", str(seed),
        "--jax.platform", "cpu", "--jax.compute_dtype", "float32", "--jax.prealloc", "False",
        "--run.steps", str(budget["env_steps_total"]), "--run.envs", str(budget["num_envs"]),
        "--run.train_ratio", str(float(budget["train_ratio"])),
        "--batch_size", str(budget["batch"]), "--batch_length", str(budget["seq_len"]),
        "--report_length", str(min(32, int(budget["seq_len"]))),  # its report reads the train replay's chunks
        "--run.log_every", "120", "--run.save_every", str(save_every_s), "--logger.outputs", "jsonl",
    ]


def events_to_lines(events: list[dict[str, Any]], *, suite: str, task: str, seed: int, budget: dict[str, Any],
                    log_every: int, finished: bool, machine: str, commit: str,
                    variant: str | None = None) -> list[dict[str, Any]]:
    """Per-episode events of one official run -> one CURVES line per window of `log_every` agent steps.

    Window k covers episodes that ended at agent steps in ((k-1)*W, k*W]; its `env_steps` is k*W,
    capped at the budget's total. A window is complete once an event past its end exists or the run
    `finished`; incomplete windows are not emitted (a resumed run adds them later). `train_steps` and
    `wall_s` are those of the window's last episode (wall seconds exclude downtime between resumes).
    A `variant` run's lines carry `variant` (plotted apart, never judged as the official's).
    """
    if log_every <= 0:
        raise ValueError("log_every must be > 0")
    total = int(budget["env_steps_total"])
    events = sorted(events, key=lambda e: e["env_steps"])
    last_step = events[-1]["env_steps"] if events else 0
    n_windows = math.ceil(total / log_every)
    lines = []
    for k in range(1, n_windows + 1):
        lo, hi = (k - 1) * log_every, min(k * log_every, total)
        if not finished and last_step <= hi:
            break
        inside = [e for e in events if lo < e["env_steps"] <= hi] if k < n_windows else \
            [e for e in events if e["env_steps"] > lo]
        succ = [bool(e["success"]) for e in inside if e.get("success") is not None]
        prev = [e for e in events if e["env_steps"] <= hi]
        lines.append({
            "impl": "official", "agent": "dreamer", "suite": suite, "task": task, "seed": int(seed),
            "env_steps": hi, "frames": hi * int(budget["action_repeat"]),
            "score": (sum(e["score"] for e in inside) / len(inside)) if inside else None,
            "success_rate": (sum(succ) / len(succ)) if succ else None,
            "episodes": len(inside),
            "train_steps": prev[-1]["train_steps"] if prev else 0,
            "wall_s": prev[-1]["wall_s"] if prev else 0.0,
            "budget": {k2: budget[k2] for k2 in BUDGET_KEYS},
            "machine": machine, "commit": commit, "official_version": OFFICIAL_VERSION,
            **({"variant": variant} if variant else {}),
        })
    return lines


def machine_string() -> str:
    try:
        load = float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError):
        load = float("nan")
    return f"cpu {os.cpu_count()}-core, load {load:.1f}"


def finished_budget(summary: dict[str, Any], events: list[dict[str, Any]], log_every: int) -> int:
    """The agent steps a finished seed (its `done.json` summary) was run to.

    A summary written before this key existed is read as the end of the window of its last episode: the
    official run stops at `run.steps`, and its last episodes end inside the last window.
    """
    if "env_steps_total" in summary:
        return int(summary["env_steps_total"])
    last = max((int(e["env_steps"]) for e in events), default=0)
    return math.ceil(last / log_every) * log_every


def run_seed(args: argparse.Namespace, budget: dict[str, Any], seed: int, out: Path) -> dict[str, Any]:
    """Run (or resume) one seed to the end, converting its log into `out` while it runs."""
    python, src = official_paths(args.official_venv)
    name = f"seed{seed}-{args.variant}" if args.variant else f"seed{seed}"
    rundir = args.runs_dir / f"{args.suite}_{args.task}" / name
    rundir.mkdir(parents=True, exist_ok=True)
    problem = run_folder_link_problem(rundir)  # a received run folder's link would be written through
    if problem:
        raise SystemExit(f"--runs-dir {args.runs_dir}: {problem}.")
    events, done = rundir / "events.jsonl", rundir / "done.json"
    commit = git_commit()

    def convert(finished: bool, ev: list[dict[str, Any]] | None = None) -> int:
        """Append the complete windows of `ev` (default: the events file as it is now) that `out` lacks."""
        ev = read_records(events, OFFICIAL_EVENT) if ev is None else ev
        lines = events_to_lines(ev, suite=args.suite, task=args.task,
                                seed=seed, budget=budget, log_every=budget["log_every"], finished=finished,
                                machine=machine_string(), commit=commit, variant=args.variant)
        return append_new(out, lines)

    if done.exists():
        try:
            summary = json.loads(done.read_bytes())
        except ValueError as exc:  # not UTF-8 or not JSON
            summary = exc
        if not isinstance(summary, dict) or type(summary.get("env_steps_total", 0)) is not int:
            raise SystemExit(f"{done} is damaged ({summary if isinstance(summary, Exception) else 'not a summary'}); "
                             "delete it and rerun the same command (the run resumes from its checkpoint).")
        ev = read_records(events, OFFICIAL_EVENT)
        if finished_budget(summary, ev, budget["log_every"]) >= int(budget["env_steps_total"]):
            convert(True, ev)
            return summary
        # a longer budget than the finished run's: resume it from its checkpoint; done.json is rewritten at the end
    if args.convert_only:  # a run going on elsewhere (or killed): its complete windows so far
        return {"seed": seed, "ok": None, "new_lines": convert(False)}
    cmd = official_command(python, src, args.suite, args.task, seed, budget, rundir / "logdir", events,
                           variant=args.variant)
    t0 = time.time()
    with os.fdopen(open_nofollow(rundir / "run.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as log:
        log.write(f"\n# {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=rundir,
                                env={**os.environ, "JAX_PLATFORMS": "cpu"})
        try:
            while proc.poll() is None:
                time.sleep(args.poll_s)
                convert(False)
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            raise
    if proc.returncode != 0:
        print(f"official run {args.suite}/{args.task} seed {seed} failed (exit {proc.returncode}); "
              f"see {rundir / 'run.log'}; rerun the same command to resume.", file=sys.stderr)
        return {"seed": seed, "ok": False, "returncode": proc.returncode}
    ev = read_records(events, OFFICIAL_EVENT)
    convert(True, ev)
    summary = {"seed": seed, "ok": True, "episodes": len(ev), "wall_s_this_call": round(time.time() - t0, 1),
               "wall_s": ev[-1]["wall_s"] if ev else None, "train_steps": ev[-1]["train_steps"] if ev else None,
               "env_steps_total": int(budget["env_steps_total"])}
    atomic_write_json(done, summary)
    return summary


def load_budget(path: Path | None) -> dict[str, Any]:
    budget = dict(DEFAULT_BUDGET)
    if path is not None:
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: not JSON, or not UTF-8
            raise SystemExit(f"--budget-json {path}: cannot read it as JSON ({exc}); "
                             "give a JSON object file.") from None
        if not isinstance(data, dict):
            raise SystemExit(f"--budget-json {path}: holds a JSON {type(data).__name__}, not an object; "
                             "give a JSON object file.")
        budget.update({k: data[k] for k in (*BUDGET_KEYS, "log_every", "seeds") if k in data})
        problem = budget_problem(budget)
        if problem:
            raise SystemExit(f"--budget-json {path}: {problem}.")
    budget["prefill"] = 0  # the official code has no random prefill, whatever this project's budget uses
    return budget


BUDGET_LIMITS: dict[str, tuple[float, float]] = {
    "train_ratio": (1e-3, 4096),  # replayed steps per agent step; the official configs use up to 1024
    "batch": (1, 4096), "seq_len": (1, 4096), "num_envs": (1, 1024), "action_repeat": (1, 100),
    "episode_frames": (1, 1_000_000), "log_every": (1, 10**9),
    "env_steps_total": (1, 10**9),  # a billion agent steps is years of this CPU budget
    "prefill": (0, 10**9),
}
"""The range of each numeric budget key (lowest, highest): anything past it is a typo, not a run."""
SEED_MAX = 2**31 - 1  # the official code's seed is a 32-bit int


def budget_problem(budget: dict[str, Any]) -> str | None:
    """Why a budget (the default, a --budget-json file's keys, the flags over them) cannot be run, or None:
    a non-number, NaN, a value out of `BUDGET_LIMITS`, a size that is no name, seeds not a list of ints."""
    for key, (low, high) in BUDGET_LIMITS.items():
        value = budget.get(key)
        integer = key != "train_ratio"
        ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type or not (math.isfinite(value) and low <= value <= high):
            kind = "an integer" if integer else "a number"
            return f"{key}={value!r} must be {kind} from {low:g} to {high:g}"
    problem = name_problem(budget.get("size"), "size")
    if problem:
        return problem
    seeds = budget.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= SEED_MAX for x in seeds):
        return f"seeds={seeds!r} must be a non-empty list of integers from 0 to {SEED_MAX}"
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from muse_common.arg_parser import ArgumentParser

    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--suite", choices=SUITES, default="dmc")
    p.add_argument("--task", default="cartpole-swingup", help="task as this project spells it "
                   "(dmc: domain-task, gym: a gymnasium id, metaworld: e.g. handle-press-v3)")
    p.add_argument("--seeds", type=int, nargs="+", help="default: the budget's seeds (0 1)")
    p.add_argument("--budget-json", type=Path, help="JSON object with the budget keys (e.g. the shared budget file)")
    p.add_argument("--env-steps", type=int, help="agent steps per run (overrides the budget)")
    p.add_argument("--train-ratio", type=float, help="replayed steps per agent step (overrides the budget)")
    p.add_argument("--size", help="model size preset (overrides the budget)")
    p.add_argument("--batch", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--num-envs", type=int)
    p.add_argument("--action-repeat", type=int)
    p.add_argument("--episode-frames", type=int, help="frames per episode (default: 1000, Meta-World 500)")
    p.add_argument("--log-every", type=int, help="agent steps per window (overrides the budget)")
    # str, not Path: Path('') is '.', and an empty folder name must be refused, not read as the current folder
    p.add_argument("--out-dir", default=str(REPO / "docs" / "learning_curves"))
    p.add_argument("--runs-dir", default=str(REPO / "runs" / "official"))
    p.add_argument("--official-venv", type=Path, help="default: REPO/.official/venv")
    p.add_argument("--variant", choices=VARIANTS, help="a named change to the official run (its lines carry "
                   "`variant`): exact-twohot = its two-hot mean without float32 rounding noise "
                   "(official_entry.py)")
    p.add_argument("--convert-only", action="store_true",
                   help="only convert the runs' logs so far into the output file (start no run)")
    p.add_argument("--poll-s", type=float, default=60.0, help="seconds between conversions while a run is going")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    problem = name_problem(args.task, "--task")
    if problem:
        raise SystemExit(problem + ".")
    for flag in ("runs_dir", "out_dir"):
        problem = output_dir_problem(getattr(args, flag))
        if problem:
            raise SystemExit(f"--{flag.replace('_', '-')} {problem}.")
        setattr(args, flag, Path(getattr(args, flag)))
    reason = official_available(args.official_venv)
    if reason and not args.convert_only:
        raise SystemExit(reason)
    budget = load_budget(args.budget_json)
    if args.suite == "metaworld" and args.episode_frames is None:
        budget["episode_frames"] = 500
    for flag, key in (("env_steps", "env_steps_total"), ("train_ratio", "train_ratio"), ("size", "size"),
                      ("batch", "batch"), ("seq_len", "seq_len"), ("num_envs", "num_envs"),
                      ("action_repeat", "action_repeat"), ("episode_frames", "episode_frames"),
                      ("log_every", "log_every")):
        if getattr(args, flag) is not None:
            budget[key] = getattr(args, flag)
    seeds = list(args.seeds) if args.seeds is not None else budget["seeds"]
    problem = budget_problem({**budget, "seeds": seeds})  # the flags checked as the budget file's keys
    if problem:
        raise SystemExit(f"budget {problem}.")
    seeds = list(seeds)
    # absolute: the official process runs inside its seed folder, where a relative logdir would nest
    args.runs_dir, args.out_dir = args.runs_dir.resolve(), args.out_dir.resolve()
    out = args.out_dir / f"{args.suite}_{args.task}.jsonl"
    results = [run_seed(args, budget, seed, out) for seed in seeds]
    finals = {}
    for row in read_jsonl(out):
        last = row.get("env_steps") == budget["env_steps_total"]
        if in_series(row, "official", "dreamer", args.variant) and row.get("seed") in seeds and last:
            finals[row["seed"]] = row.get("score")
    return emit_record({"benchmark": "official_learning_curve", "official_version": OFFICIAL_VERSION,
                        "variant": args.variant, "suite": args.suite, "task": args.task, "seeds": seeds,
                        "budget": budget, "final_scores": finals, "runs": results, "out": str(out)}, None)


def cli(argv: list[str] | None = None) -> int:
    """`main` with its refusals as one line on stderr (`run.py: error: ...`, exit 2) instead of a traceback."""
    from muse_common.records import RecordError

    try:
        main(argv)
        return 0
    except SystemExit as e:
        if not isinstance(e.code, str):
            raise
        message = e.code
    except (RecordError, UnsafePath) as e:
        message = str(e)
    print(f"run.py: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(cli())
