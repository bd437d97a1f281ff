"""Learning curves on any suite and task: episode score (and success rate where the suite has one) against
agent steps, for several seeds, beside a random policy, the official DreamerV3 and its published curve.

Why: a user must be able to see whether the agent learns, at a budget their machine affords, and how it
compares with the official implementation at the same budget (`benchmarks/official/`, which writes its
lines into the same file).

Training is the project's real pre-training loop (`muse_jax.loops.pretrain`, as `muse-wm pretrain`) on one
task, proprio inputs, one run folder per seed under `--runs` (rerunning the same command resumes each seed
from its last checkpoint); the seeds train one after another, or with `--together` all at once through one
vmapped train step (`muse_jax.loops.seeds`, as `muse-wm pretrain --seeds`; not the default because each
line's `wall_s` then counts the shared wall time, which is not comparable with one seed trained alone).
Each metrics window of `--log-every` agent steps becomes one JSON line in `--out`
(default docs/learning_curves/<suite>_<task>.jsonl), in the format both implementations share: impl, agent,
suite, task, seed, env_steps (agent steps = policy decisions, summed over envs), frames (env_steps x action
repeat), score (mean undiscounted return of the training episodes, stochastic policy, that ended in the
window; null if none), success_rate (null where the suite defines no success), episodes, train_steps, wall_s
(seconds of this process's windows summed: a resume's downtime is excluded, its restart and compile time
included), budget, machine, commit; and with `--variant NAME` (an ablation of this project's agent through
`--set`, e.g. the official's data pipeline) `variant` and `overrides`; this project's lines also carry
`network`, the model options that change the network a run trained (`network_of`), so that runs of two
networks never share one series (`line_network` reads lines written before the record existed). Lines are
appended whole and never duplicated: a line is written once per (impl, agent, variant, network, seed,
env_steps), and only for windows up to
the run's latest checkpoint, which a resume never rewrites; while a seed trains, its windows so far are
appended every HARVEST_EVERY_S seconds (as the official runner converts its log while it runs).
`--random-episodes` adds the random policy's line (uniform actions in [-1, 1], same env; impl "random",
env_steps 0). A file holds one random line; asking for more episodes than it has replaces it (the file is
rewritten atomically, every other line kept), asking for fewer keeps it: some random returns are
heavy-tailed (ball_in_cup-catch: 10 random episodes all scored 0, 100 gave a mean of 64 and up to 864), so
10 episodes can miss the tail.

The plot (same name, .png) shows per implementation the mean over seeds and the min-max spread on the
windows every seed has (beyond them each seed alone, thin), the
random line, and the published DreamerV3 curve from /work/shared/data/published when one exists. Units:
danijar/dreamerv3 counts one step per env transition (`embodied/run/train.py`, `driver.on_step(...
step.increment())`, i.e. agent steps) and its logger multiplies that by the suite's action repeat
(`dreamerv3/main.py` `make_logger`: `multiplier = config.env.<suite>.repeat`), so its logged and
published `step` counts frames; with the DMC action repeat of 2 used for the published scores (configs.yaml
of 2024-04, the commit that added `scores/`) a published step of 100k frames is 50k agent steps here.
The Meta-World reference (TD-MPC2 authors' DreamerV3 runs) is plotted at its steps as published: its unit
could not be established from code here and the plot says so.

Default budget (`--size size1m --train-ratio 32 --batch 16 --seq-len 64 --num-envs 4 --prefill 1024
--log-every 5000`) is the CPU budget shared with the official runner (`docs/learning_curves/budget_cpu.json`).

    python benchmarks/learning_curve.py --suite dmc --task cartpole-swingup --seeds 0 1 --env-steps 50000

The last line printed is one JSON summary (benchmarks.report.emit_record).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import re
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from functools import cache, partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record, git_commit  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PUBLISHED_DIR = Path(os.environ.get("MUSE_PUBLISHED_DIR", REPO.parent / "shared" / "data" / "published"))
PUBLISHED_DMC_REPEAT = 2
"""Action repeat of the published DreamerV3 DMC scores: their `step` is frames = agent steps x 2."""
DEFAULT_REPEAT = {"dmc": 2, "metaworld": 2, "gym": 1}
"""Action repeat per suite unless --action-repeat: DreamerV3's DMC setting; Meta-World as the shared budget."""
DEFAULT_EPISODE_FRAMES = {"dmc": 1000, "metaworld": 500, "gym": 0}
"""Frames per episode unless --episode-frames (gym 0 = the env's registered time limit)."""
HARVEST_EVERY_S = 60.0
"""Default seconds between appends of a training seed's windows so far (--harvest-every-s, train_and_harvest)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from muse_common.arg_parser import ArgumentParser

    p = ArgumentParser(prog="learning_curve.py", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=["dmc", "gym", "metaworld"], default="dmc")
    p.add_argument("--task", default="cartpole-swingup", help="task as the config spells it (cartpole-swingup, "
                   "InvertedPendulum-v5, handle-press-v3)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds, one run each, one after another")
    p.add_argument("--together", action="store_true",
                   help="train the seeds at once, one vmapped train step for all (muse-wm pretrain --seeds); "
                        "each line's wall_s is then the shared wall time, not one seed's alone")
    p.add_argument("--env-steps", type=int, default=50_000, help="agent steps per run, summed over envs")
    p.add_argument("--agent", choices=["dreamer", "muse"], default="dreamer",
                   help="dreamer (any suite) or muse (Meta-World only: it needs a success signal)")
    p.add_argument("--size", default="size1m", help="model size preset (default size1m)")
    p.add_argument("--train-ratio", type=float, default=32.0, help="replayed steps per agent step (default 32)")
    p.add_argument("--batch", type=int, default=16, help="replay batch size B (default 16)")
    p.add_argument("--seq-len", type=int, default=64, help="replay chunk length T (default 64)")
    p.add_argument("--num-envs", type=int, default=4, help="parallel envs (default 4)")
    p.add_argument("--prefill", type=int, default=1024, help="random-policy agent steps first (default 1024)")
    p.add_argument("--log-every", type=int, default=5000, help="agent steps per curve point (default 5000)")
    p.add_argument("--action-repeat", type=int, default=None, help="default: dmc 2, metaworld 2, gym 1")
    p.add_argument("--episode-frames", type=int, default=None,
                   help="frames per episode (default: dmc 1000, metaworld 500, gym the env's own limit)")
    p.add_argument("--random-episodes", type=int, default=10, help="random-policy episodes for the reference line "
                   "(0: none; written once per file)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="any further config override (repeatable)")
    p.add_argument("--variant", default=None, metavar="NAME",
                   help="name a variant of this project's agent (its --set overrides): its lines carry "
                        "`variant` and its overrides, are keyed, plotted and summarised apart from the default "
                        "agent's, and its run folders get the name; the target is judged on the default agent")
    p.add_argument("--out", default=None, help="JSON lines file (default docs/learning_curves/<suite>_<task>.jsonl); "
                   "the PNG goes beside it")
    p.add_argument("--runs", default=None, help="run folders (default runs/learning_curve/<suite>_<task>)")
    p.add_argument("--plot-only", action="store_true",
                   help="train nothing: write the lines the run folders hold so far, and the plot; the flags "
                        "must describe the runs (as for a resume), their length is the runs' own")
    p.add_argument("--harvest-every-s", type=float, default=HARVEST_EVERY_S, metavar="S",
                   help=f"while a seed trains, append its finished windows to --out every S seconds "
                        f"(default {HARVEST_EVERY_S:g})")
    args = p.parse_args(argv)
    if args.harvest_every_s <= 0:
        p.error("--harvest-every-s must be > 0")
    for name in ("env_steps", "batch", "seq_len", "num_envs", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.prefill < 0 or args.random_episodes < 0:
        p.error("--prefill and --random-episodes must be >= 0")
    if not (0 < args.train_ratio <= 4096):  # also refuses nan and inf
        p.error(f"--train-ratio {args.train_ratio}: give a number above 0 and at most 4096")
    if any(not 0 <= seed <= 2**31 - 1 for seed in args.seeds) or len(set(args.seeds)) != len(args.seeds):
        p.error(f"--seeds {' '.join(map(str, args.seeds))}: give distinct integers from 0 to {2**31 - 1}")
    from muse_common.files import name_problem

    problem = name_problem(args.task, "--task")  # it names the default output file and run folders
    if problem:
        p.error(problem)
    for flag in ("out", "runs"):  # '' would fall back to the default, the repo's own docs/ and runs/ files
        if getattr(args, flag) is not None and not getattr(args, flag).strip():
            p.error(f"--{flag} is empty (''); give a path, or leave the flag out for the default")
    if args.action_repeat is not None and args.action_repeat < 1:
        p.error("--action-repeat must be >= 1")
    if args.variant is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", args.variant):
        p.error(f"--variant {args.variant!r}: use letters, digits, '_', '.', '-' (it names run folders)")
    return args


def build_config(args: argparse.Namespace, seed: int) -> Any:
    """The pre-training config of one seed's run; raises ConfigError (bad override, muse off Meta-World)."""
    from muse_jax.config import from_dict, parse_overrides

    env: dict[str, Any] = {"suite": args.suite, "tasks": [args.task], "image": False, "proprio": True,
                           "num_envs": args.num_envs, "vector": "sync",
                           "action_repeat": args.action_repeat or DEFAULT_REPEAT[args.suite]}
    frames = args.episode_frames if args.episode_frames is not None else DEFAULT_EPISODE_FRAMES[args.suite]
    if args.suite != "gym" or frames:
        env["max_episode_steps"] = frames
    if args.suite == "metaworld":
        env["novel_tasks"] = [args.task]
    data = {
        "name": f"learning_curve-{args.suite}-{args.task}", "agent": args.agent, "model": {"size": args.size},
        "env": env,
        "replay": {"batch_size": args.batch, "seq_len": args.seq_len,
                   "capacity": max(args.env_steps, args.batch * args.seq_len)},
        "train": {"env_steps": args.env_steps, "train_ratio": args.train_ratio, "prefill": args.prefill,
                  "log_every": args.log_every, "save_every": args.log_every, "seed": seed},
    }
    return from_dict(data, parse_overrides(args.overrides))


def budget_of(cfg: Any) -> dict[str, Any]:
    return {"size": cfg.model.size, "train_ratio": cfg.train.train_ratio, "batch": cfg.replay.batch_size,
            "seq_len": cfg.replay.seq_len, "num_envs": cfg.env.num_envs, "action_repeat": cfg.env.action_repeat,
            "episode_frames": cfg.env.max_episode_steps, "env_steps_total": cfg.train.env_steps,
            "prefill": cfg.train.prefill}


def machine() -> str:
    import jax

    d = jax.devices()[0]
    kind = "cpu" if d.platform == "cpu" else f"{d.platform} {d.device_kind}"
    return f"{kind} {os.cpu_count()}-core, load {os.getloadavg()[0]:.1f}"


def checkpoint_steps(run: Path) -> list[int]:
    ck = run / "checkpoints"
    return sorted(int(p.name) for p in ck.iterdir() if p.name.isdigit()) if ck.is_dir() else []


def trained_config(run: Path, cfg: Any) -> Any:
    """The config `run` was trained with, for labelling its windows without training (`--plot-only`).

    Why: a window's line records its budget and overrides from the command, so a `--plot-only` call with
    other flags than the run's would label the run's new windows with a budget it never had. The flags must
    describe the run (the check a resume makes, `resume_conflicts`, else ConfigError naming the keys); the
    run's own length (`train.env_steps`, which a resume may extend) replaces the command's. A folder with no
    checkpoint has no windows to label: `cfg` as it is.
    """
    from muse_jax.checkpoint import Checkpointer
    from muse_jax.config import ConfigError, explain_conflicts, resume_conflicts

    if not checkpoint_steps(run):
        return cfg
    ck = Checkpointer(run / "checkpoints", cfg.train.keep_checkpoints, read_only=True)
    try:
        saved = ck.read_meta().get("config", {})
    finally:
        ck.close()
    diff = resume_conflicts(saved, cfg)
    if diff:
        what, sets = explain_conflicts(saved, cfg, diff)
        raise ConfigError(f"{run} was trained with another config ({what}); give --plot-only the flags the run "
                          f"was trained with ({sets}), so its windows are labelled with its budget")
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, env_steps=int(saved["train"]["env_steps"])))


def run_lines(run: Path, cfg: Any, args: argparse.Namespace, seed: int, where: str, sha: str) -> list[dict]:
    """The curve lines of one run folder, for windows up to its latest checkpoint (see the module doc)."""
    from muse_common.records import PRETRAIN_METRICS, read_records
    from muse_jax.envs.suite import SUITES_WITH_SUCCESS

    steps = checkpoint_steps(run)
    if not steps:
        return []
    out, wall, prev = [], 0.0, 0
    for row in read_records(run / "metrics.jsonl", PRETRAIN_METRICS):
        x = int(row["env_steps"])
        rate = row.get("env_steps_per_s")
        wall += (x - prev) / rate if rate else 0.0
        prev = x
        if x > steps[-1]:
            break
        n = int(row.get("episodes_finished") or 0)
        has_success = args.suite in SUITES_WITH_SUCCESS
        line = {"impl": "muse_jax", "agent": args.agent, "suite": args.suite, "task": args.task, "seed": seed,
                "env_steps": x, "frames": x * cfg.env.action_repeat,
                "score": row.get("episode_score") if n else None,
                "success_rate": row.get("success_rate") if n and has_success else None,
                "episodes": n, "train_steps": int(row["train_steps"]), "wall_s": round(wall, 1),
                "budget": budget_of(cfg), "network": network_of(cfg), "machine": where, "commit": sha}
        if args.variant is not None:
            line.update(variant=args.variant, overrides=list(args.overrides))
        out.append(line)
    return out


def network_of(cfg: Any) -> dict[str, Any]:
    """The model options of `cfg` that change which network a run trains, beyond its budget's size.

    Why: `model.hidden_bias` became the default on 2026-11-26 (docs/experiments/does-it-learn.md); a curve file
    holds runs of both networks, and a window of one must never be averaged with, or stand in for, a
    window of the other.
    """
    return {"hidden_bias": bool(cfg.model.hidden_bias)}


def network_key(network: dict[str, Any] | None) -> tuple[tuple[str, Any], ...] | None:
    """`network` as a hashable, order-free key (None stays None: the official's and random lines)."""
    return tuple(sorted(network.items())) if network is not None else None


def default_network() -> dict[str, Any]:
    """`network_of` the default config: the network of this project's default series, the one judged."""
    return dict(_default_network_items())


@cache
def _default_network_items() -> tuple[tuple[str, Any], ...]:
    """Built once: `in_series` asks for it per line, and a `Config()` is validated on construction."""
    from muse_jax.config import Config

    return network_key(network_of(Config()))


def line_network(line: dict[str, Any]) -> dict[str, Any] | None:
    """The network a line of this project was trained with (None for the official's and random lines).

    Lines written before `network` was recorded were trained with `model.hidden_bias` false, the default
    until 2026-11-26, unless their `--variant` overrides set it true.
    """
    if line.get("impl") != "muse_jax":
        return None
    if "network" in line:
        return dict(line["network"])
    sets = {o.replace(" ", "").lower() for o in line.get("overrides") or []}
    return {"hidden_bias": "model.hidden_bias=true" in sets}


def in_series(line: dict[str, Any], impl: str, agent: str, variant: str | None = None,
              network: dict[str, Any] | None = None) -> bool:
    """Whether `line` belongs to one plotted series: implementation, agent (lines without one are
    "dreamer"), `--variant` (None: the default agent) and, for this project's lines, the network
    (`line_network`; None: the default config's, `default_network`). The default agent on the default
    network alone is judged."""
    if not (line.get("impl") == impl and line.get("agent", "dreamer") == agent and line.get("variant") == variant):
        return False
    return impl != "muse_jax" or line_network(line) == (network if network is not None else default_network())


def line_key(line: dict[str, Any]) -> tuple:
    return (line.get("impl"), line.get("agent"), line.get("variant"), network_key(line_network(line)),
            int(line.get("seed", 0)), int(line.get("env_steps", 0)))


def read_lines(path: str | Path, resume: bool = False) -> list[dict[str, Any]]:
    """The curve lines of an output file through the one reader of their kind (`muse_common.records.CURVE_LINE`,
    keyed by `line_key`): a line failing the schema stops with one line naming file and line (RecordError, a
    ValueError), a duplicated line is dropped and said, a torn last line ignored; with `resume` (the start of a
    command, before any run appends) the torn line is cut and the file rewritten without the duplicates."""
    import dataclasses

    from muse_common.records import CURVE_LINE, read_records

    return read_records(path, dataclasses.replace(CURVE_LINE, key=line_key), resume=resume,
                        say=lambda m: print(f"learning_curve: warning: {m}", file=sys.stderr))


def ensure_random_line(path: Path, episodes: int, make: Callable[[int], dict[str, Any]]) -> int:
    """Keep one random line in `path` with at least `episodes` episodes; returns the lines written (0 or 1).

    None yet: `make(episodes)` is appended. One with fewer episodes: it is replaced by `make(episodes)` in
    an atomic rewrite that keeps every other line in order. One with as many or more: kept as it is.
    A line another process appends during the rewrite can be dropped; both runners re-append missing
    windows on their next call, so run this while no run writes the file (the random line comes first).
    """
    from muse_common.files import atomic_write_jsonl

    lines = read_lines(path, resume=True)  # first thing a command does to its file: torn tail, duplicates out
    if episodes <= 0:
        return 0
    old = [i for i, x in enumerate(lines) if x.get("impl") == "random"]
    if old and int(lines[old[0]].get("episodes", 0)) >= episodes:
        return 0
    new = make(episodes)
    if not old:
        return append_new(path, [new])
    kept = [x for i, x in enumerate(lines) if i not in old]
    kept.insert(old[0], new)
    atomic_write_jsonl(path, kept)
    return 1


def append_new(path: Path, lines: list[dict[str, Any]]) -> int:
    """Append the lines whose key is not in the file yet (whole lines, fsynced); returns how many."""
    from muse_common.files import append_jsonl

    have = {line_key(x) for x in read_lines(path)}
    n = 0
    for line in lines:
        if line_key(line) not in have:
            append_jsonl(path, line)
            have.add(line_key(line))
            n += 1
    return n


def random_line(cfg: Any, args: argparse.Namespace, episodes: int, seed: int, where: str, sha: str) -> dict:
    """Mean return (and success rate) of uniformly random actions in [-1, 1] over `episodes` episodes of the
    run's env (same task, action repeat and episode length): the level a curve must rise above."""
    import numpy as np

    from muse_jax.envs.suite import SUITES_WITH_SUCCESS, make_env

    env = make_env(cfg.env, args.task, 1, seed + 12345)
    rng = np.random.default_rng(seed)
    scores, successes, steps = [], [], 0
    try:
        for ep in range(episodes):
            env.reset(seed=seed + 12345 + ep)
            total, success, done = 0.0, False, False
            while not done:
                a = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
                _, r, terminated, truncated, info = env.step(a)
                total, steps = total + r, steps + 1
                success |= bool(info.get("success", False))
                done = terminated or truncated
            scores.append(total)
            successes.append(success)
    finally:
        env.close()
    has_success = args.suite in SUITES_WITH_SUCCESS
    return {"impl": "random", "agent": "random", "suite": args.suite, "task": args.task, "seed": seed,
            "env_steps": 0, "frames": 0, "score": float(np.mean(scores)),
            "success_rate": float(np.mean(successes)) if has_success else None, "episodes": episodes,
            "train_steps": 0, "wall_s": 0.0, "random_agent_steps": steps,
            "score_min": float(np.min(scores)), "score_max": float(np.max(scores)),
            "budget": budget_of(cfg), "machine": where, "commit": sha}


def published_curve(suite: str, task: str) -> tuple[dict[int, list[float]], str] | None:
    """{x in agent steps (DMC) or as published (Meta-World): [value per seed]} and its label, or None."""
    values: dict[int, list[float]] = defaultdict(list)
    if suite == "dmc":
        path = PUBLISHED_DIR / "dreamerv3_dmc_proprio.csv"
        name = task.replace("-", "_")
        if not path.is_file():
            return None
        with open(path) as f:
            for row in csv.DictReader(f):
                if row["task"] == name:
                    values[int(row["step"]) // PUBLISHED_DMC_REPEAT].append(float(row["score"]))
        label = "DreamerV3 published (5 seeds; size12m, train ratio 512; frames / 2)"
    elif suite == "metaworld":
        path = PUBLISHED_DIR / f"dreamerv3_metaworld_{task.removesuffix('-v3').removesuffix('-v2')}.csv"
        if not path.is_file():
            return None
        with open(path) as f:
            for row in csv.DictReader(f):
                values[int(row["step"])].append(float(row["success"]))
        label = "DreamerV3 published (TD-MPC2 runs; x as published, unit unestablished)"
    else:
        return None
    return (dict(values), label) if values else None


Band = tuple[list[int], list[float], list[float], list[float], int, list[list[tuple[int, float]]]]


def _seed_band(lines: list[dict[str, Any]], key: str) -> Band:
    """(grid, mean, min, max, seeds, tails): the band over seeds on the x values where every seed has one
    (each seed interpolated within its own range only), and each seed's points outside that range.

    Why: a mean over whichever seeds reach a window jumps where a seed ends (one still running, or one run
    longer), and reads as the seeds' mean when it is one seed's curve; so the band stops where the
    shortest seed stops and the rest is drawn seed by seed (`tails`, each joined to the band's edge).
    """
    import numpy as np

    by_seed: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for x in lines:
        if x.get(key) is not None:
            by_seed[int(x["seed"])].append((int(x["env_steps"]), float(x[key])))
    if not by_seed:
        return [], [], [], [], 0, []
    grid = sorted({s for pts in by_seed.values() for s, _ in pts})
    rows = []
    for pts in by_seed.values():
        pts.sort()
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        v = np.interp(grid, xs, ys)
        v[(np.array(grid) < xs[0]) | (np.array(grid) > xs[-1])] = np.nan
        rows.append(v)
    m = np.vstack(rows)
    every = ~np.isnan(m).any(0)
    common = [x for x, e in zip(grid, every, strict=True) if e]
    tails = []
    for v, pts in zip(rows, by_seed.values(), strict=True):
        if not common:
            tails.append(pts)
            continue
        before = [p for p in pts if p[0] < common[0]]
        after = [p for p in pts if p[0] > common[-1]]
        if before:
            tails.append(before + [(common[0], float(v[grid.index(common[0])]))])
        if after:
            tails.append([(common[-1], float(v[grid.index(common[-1])]))] + after)
    band = m[:, every]
    return common, list(band.mean(0)), list(band.min(0)), list(band.max(0)), len(by_seed), tails


ABOVE_RANDOM_ALPHA = 0.05
"""Significance level of "clearly above the random line" for success rates (see `judge_target`)."""


def p_above_random(line: dict[str, Any], rand: dict[str, Any]) -> float:
    """One-sided Fisher exact p-value that `line`'s success rate beats the random line's.

    Both rates come from few episodes (8 a window on Meta-World, 10 random), so the counts, not the rates,
    are compared: successes = round(success_rate * episodes) on each side.
    """
    from scipy.stats import fisher_exact

    def counts(x: dict[str, Any]) -> tuple[int, int]:
        n = int(x["episodes"])
        k = round(float(x["success_rate"]) * n)
        return k, n - k

    return float(fisher_exact([counts(line), counts(rand)], alternative="greater").pvalue)


def judge_target(lines: Iterable[dict[str, Any]], key: str = "score", agent: str = "dreamer",
                 network: dict[str, Any] | None = None) -> dict[str, Any]:
    """The equal-budget learning target (this project keeps up with the official DreamerV3), from one task's lines.

    The final point is the largest `env_steps` at which every seed of both implementations has a value
    (`key`: score, or success_rate on Meta-World). Target: this project's mean there is at least the
    official mean minus the official seeds' spread (max - min), and both are clearly above the random
    line. "Clearly above" is a choice the target leaves open. For scores it is every seed's final value
    above the best random episode of the random line (`score_max`). For success rates a rate above the
    random rate is not evidence (3 of 8 against 3 of 10 would pass), so every seed's final window must beat
    the random line in a one-sided Fisher exact test on the success counts (successes of `episodes`
    against the random line's), p < `ABOVE_RANDOM_ALPHA`; the p-values are kept in `p_above_random`.
    `judged` is False, with the reason, where a side has fewer than 2 seeds: a spread needs two. This
    project's side is the default agent on `network` (None: the default config's, `in_series`).
    """
    lines = list(lines)  # read_jsonl yields: read once
    ours = [x for x in lines if in_series(x, "muse_jax", agent, network=network)]
    theirs = [x for x in lines if in_series(x, "official", "dreamer")]
    side_lines = {"ours": ours, "official": theirs}
    steps: dict[str, dict[int, set[int]]] = {}
    for side, rows in side_lines.items():
        by_seed: dict[int, set[int]] = defaultdict(set)
        for x in rows:
            if x.get(key) is not None:
                by_seed[int(x["seed"])].add(int(x["env_steps"]))
        steps[side] = by_seed
    seeds = {side: sorted(by_seed) for side, by_seed in steps.items()}
    common = set.intersection(*(st for by_seed in steps.values() for st in by_seed.values())) \
        if all(steps.values()) else set()
    out: dict[str, Any] = {"key": key, "seeds": seeds}
    if not common:
        return {**out, "judged": False, "reason": "no env_steps at which every seed of both has a value"}
    final = max(common)
    rand = next((x for x in lines if x.get("impl") == "random"), None)
    bar = None if rand is None else (rand.get("score_max") if key == "score" else rand.get("success_rate"))
    out.update(env_steps=final, random_bar=bar)
    for side, rows in side_lines.items():
        at_final = [x for x in rows if int(x["env_steps"]) == final and x.get(key) is not None]
        vals = [float(x[key]) for x in at_final]
        out[side] = {"values": vals, "mean": sum(vals) / len(vals), "spread": max(vals) - min(vals)}
        if bar is None:
            out[side]["above_random"] = None
        elif key == "score":
            out[side]["above_random"] = min(vals) > bar
        else:
            pvals = [p_above_random(x, rand) for x in at_final]
            out[side]["p_above_random"] = pvals
            out[side]["above_random"] = max(pvals) < ABOVE_RANDOM_ALPHA
    out["ours_at_least_official_minus_spread"] = out["ours"]["mean"] >= out["official"]["mean"] - out["official"][
        "spread"]
    short = [side for side in side_lines if len(seeds[side]) < 2]
    out["judged"] = not short and bar is not None
    if short:
        out["reason"] = f"fewer than 2 seeds: {', '.join(short)}"
    elif bar is None:
        out["reason"] = "no random line (--random-episodes)"
    else:
        out["target_met"] = out["ours_at_least_official_minus_spread"] and out["ours"]["above_random"] and \
            out["official"]["above_random"]
    return out


ZOOM_RATIO = 3.0
"""A zoomed second panel is drawn when the published curve's top over the plotted range is more than this
many times the runs' top: runs far below the published curve are otherwise a flat line at the bottom."""


def needs_zoom(runs_top: float, published_top: float | None) -> bool:
    """Whether the runs' own scale needs a panel of its own beside the one with the published curve."""
    return published_top is not None and runs_top > 0 and published_top > ZOOM_RATIO * runs_top


def _series(lines: list[dict[str, Any]], key: str) -> list[tuple[list[int], list[float], list[float], list[float],
                                                                  list[list[tuple[int, float]]], str, str]]:
    """(grid, mean, lo, hi, tails, color, label) of `key` per implementation, agent and variant
    (`_seed_band`)."""

    colors = {"muse_jax": "tab:blue", "official": "tab:orange"}
    variant_colors = iter(["tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"])
    default = default_network()
    series = []
    for impl in ("muse_jax", "official"):
        kinds = {(x.get("agent", "dreamer"), x.get("variant"), network_key(line_network(x) or {}))
                 for x in lines if x.get("impl") == impl}
        ordered = sorted(kinds, key=lambda k: (k[0], k[1] or "", k[2] != _default_network_items()))
        for agent, variant, net in ordered:
            mine = [x for x in lines if in_series(x, impl, agent, variant, dict(net) if net else None)]
            grid, mean, lo, hi, n, tails = _seed_band(mine, key)
            other_net = [f"{k}={v}" for k, v in net if impl == "muse_jax" and default.get(k) != v]
            # before the skip: the same color in every panel
            c = next(variant_colors, "black") if variant or other_net else colors[impl]
            if not grid and not tails:
                continue
            name = "this project" if impl == "muse_jax" else "official DreamerV3"
            what = ", ".join([agent] + ([variant] if variant else []) + [f"model.{o}" for o in other_net])
            label = f"{name} ({what}), mean of {n} seed(s)" + ("; thin: one seed where the others have no window"
                                                                 if tails and n > 1 else "")
            series.append((grid, mean, lo, hi, tails, c, label))
    return series


def plot(path: Path, png: Path, suite: str, task: str) -> int:
    """One PNG per task from every line in `path`; returns its number of panels (0: nothing to plot).

    Panel 1 holds every series and the published curve; where the published curve dwarfs the runs
    (`needs_zoom`), a panel repeats the runs and the random line on their own scale. Where success is the
    plotted metric (Meta-World), a last panel gives the same runs' episode scores: with 8 episodes a window
    a success rate moves in steps of 1/8, and the score shows how far each policy is from succeeding.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from muse_common.files import atomic_save_figure

    lines = read_lines(path)
    key = "success_rate" if suite == "metaworld" else "score"
    if not any(x.get(key) is not None for x in lines):
        return 0

    def random_level(k: str) -> float | None:
        rand = [x for x in lines if x.get("impl") == "random" and x.get(k) is not None]
        return sum(float(x[k]) for x in rand) / len(rand) if rand else None

    series = {key: _series(lines, key)}
    level = random_level(key)
    xmax = max((x for s in series[key] for x in s[0] + [p[0] for t in s[4] for p in t]), default=0)
    pub = published_curve(suite, task)
    if pub is not None:
        values, pub_label = pub
        pub_xs = sorted(values)  # the part of the published curve the runs cover, and at least its first two
        pub_xs = [x for x in pub_xs if x <= max(xmax * 1.25, pub_xs[min(1, len(pub_xs) - 1)])]
    tops = [v for s in series[key] for v in s[3] + [p[1] for t in s[4] for p in t] if math.isfinite(v)]
    tops += [level] if level is not None else []
    runs_top = max(tops, default=0.0)
    pub_top = max(max(values[x]) for x in pub_xs) if pub is not None else None
    panels = [(key, "main")] + ([(key, "zoom")] if needs_zoom(runs_top, pub_top) else [])
    if key == "success_rate":
        series["score"] = _series(lines, "score")
        if series["score"]:
            panels.append(("score", "score"))
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4), squeeze=False)
    budget = next((x.get("budget") for x in lines if x.get("impl") == "muse_jax" and x.get("budget")), None)
    rep = budget["action_repeat"] if budget else "?"
    title = f"{suite} {task}"
    if budget:
        title += (f" | {budget['size']}, train ratio {budget['train_ratio']:g}, "
                  f"B{budget['batch']}xT{budget['seq_len']}, {budget['num_envs']} envs")
    titles = {"main": title, "zoom": "the runs on their own scale (published curve left out)",
              "score": "the same runs: episode score"}
    for ax, (k, kind) in zip(axes[0], panels, strict=True):
        for grid, mean, lo, hi, tails, c, label in series[k]:
            if grid:
                ax.plot(grid, mean, c=c, marker="o", ms=3, label=label)
                ax.fill_between(grid, lo, hi, color=c, alpha=0.2, lw=0)
            for tail in tails:
                ax.plot([p[0] for p in tail], [p[1] for p in tail], c=c, lw=0.8, marker="o", ms=2, alpha=0.7,
                        **({} if grid else {"label": label if tail is tails[0] else None}))
        lv = random_level(k)
        if lv is not None:
            ax.axhline(lv, ls=":", c="tab:red", label=f"random policy: {lv:.3g}")
        if pub is not None and kind == "main":
            mean = [sum(values[x]) / len(values[x]) for x in pub_xs]
            ax.plot(pub_xs, mean, c="gray", ls="--", marker="s", ms=3, label=pub_label)
            ax.fill_between(pub_xs, [min(values[x]) for x in pub_xs], [max(values[x]) for x in pub_xs],
                            color="gray", alpha=0.15, lw=0)
        ax.set_xlabel(f"agent steps (policy decisions, summed over envs; frames = agent steps x {rep})")
        ax.set_ylabel("success rate of training episodes" if k == "success_rate" else "episode return (training)")
        ax.set_title(titles[kind], fontsize=9)
        ax.legend(fontsize=7, loc="best")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic_save_figure(fig, png, dpi=110)
    return len(panels)


def train_seed(cfg: Any, run: Path, agent: str) -> float:
    """Train (or resume) one seed's run folder to the budget, holding its lock; returns the wall seconds."""
    from muse_common.run_lock import run_folder_lock
    from muse_jax.loops.pretrain import pretrain

    t = time.time()
    with run_folder_lock(run, flag="--runs"):
        pretrain(cfg, run, echo=lambda s: print(s, file=sys.stderr), act_mode="muse" if agent == "muse" else "dreamer")
    return round(time.time() - t, 1)


def train_seeds_together(cfgs: list[Any], runs: list[Path], agent: str) -> float:
    """Train (or resume) every seed's run folder at once (`muse_jax.loops.seeds.pretrain_seeds`), holding
    their locks; returns the wall seconds."""
    from contextlib import ExitStack

    from muse_common.run_lock import run_folder_lock
    from muse_jax.loops.seeds import pretrain_seeds

    t = time.time()
    with ExitStack() as held:
        for run in runs:
            held.enter_context(run_folder_lock(run, flag="--runs"))
        pretrain_seeds(cfgs, runs, echo=lambda s: print(s, file=sys.stderr),
                       act_mode="muse" if agent == "muse" else "dreamer")
    return round(time.time() - t, 1)


def train_and_harvest(train: Callable[[], float], harvest: Callable[[], Any], every_s: float) -> float:
    """Return `train()`, while a helper thread calls `harvest()` every `every_s` seconds.

    Why: a seed of a CPU curve trains for hours; harvesting its checkpointed windows into `--out` (and the
    plot) as it goes, as the official runner converts its log while it runs, shows progress and keeps
    those windows when the run folder is lost with its machine. A failed harvest is one warning line and
    is retried at the next tick; the harvest after training is the caller's.
    """
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                harvest()
            except (OSError, ValueError) as e:
                print(f"learning_curve: warning: the windows so far were not written ({' '.join(str(e).split())}); "
                      f"retrying in {every_s:g} s", file=sys.stderr)

    helper = threading.Thread(target=loop, name="harvest", daemon=True)
    helper.start()
    try:
        return train()
    finally:
        stop.set()
        helper.join()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from muse_common.run_lock import RunFolderBusy
    from muse_jax.config import ConfigError
    from muse_jax.errors import CheckpointError, NonFiniteLossError

    stops = (ConfigError, CheckpointError, RunFolderBusy, NonFiniteLossError)

    try:
        cfgs = {seed: build_config(args, seed) for seed in args.seeds}
        from muse_jax.envs.suite import check_tasks

        check_tasks(args.suite, [args.task])
    except (ConfigError, ValueError, ImportError) as e:
        print(f"learning_curve: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    from muse_jax.parallel import cli_cache_dir, enable_compilation_cache

    cache = cli_cache_dir()  # the CLI's cache (MUSE_JAX_COMPILATION_CACHE=0 turns it off)
    if cache is not None:
        enable_compilation_cache(cache)
    name = f"{args.suite}_{args.task}"
    out = Path(args.out) if args.out else REPO / "docs" / "learning_curves" / f"{name}.jsonl"
    runs = Path(args.runs) if args.runs else REPO / "runs" / "learning_curve" / name
    png = out.with_suffix(".png")
    if out.is_dir():
        print(f"learning_curve: error: --out {out} is a folder; give a .jsonl file path", file=sys.stderr)
        return 2
    if args.plot_only and not out.exists() and not any(runs.glob("*_seed*")):
        print(f"learning_curve: error: --plot-only: neither {out} nor a run folder under {runs} exists; "
              "nothing to plot (train first, or give --out/--runs of an earlier run)", file=sys.stderr)
        return 2
    from muse_common.files import UnsafePath
    from muse_common.records import RecordError

    try:
        return _harvest_all(args, cfgs, out, runs, png, stops)
    except (RecordError, UnsafePath) as e:
        print(f"learning_curve: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


def _harvest_seed(args: argparse.Namespace, out: Path, png: Path, sha: str, run: Path, cfg: Any, seed: int) -> int:
    """Append one seed's checkpointed windows the file lacks and replot if there were any (`--together`);
    returns how many lines were appended."""
    n = append_new(out, run_lines(run, cfg, args, seed, machine(), sha))
    if n:
        plot(out, png, args.suite, args.task)
    return n


def _harvest_all(args: argparse.Namespace, cfgs: dict[int, Any], out: Path, runs: Path, png: Path,
                 stops: tuple[type[BaseException], ...]) -> int:
    """Train (or only harvest and plot) every seed into `out`, then print the summary record."""
    sha, t0 = git_commit(), time.time()

    written = ensure_random_line(out, args.random_episodes, lambda n: random_line(
        cfgs[args.seeds[0]], args, n, args.seeds[0], machine(), sha))
    walls = {}
    folder = lambda seed: runs / (f"{args.agent}-{args.variant}_seed{seed}" if args.variant
                                  else f"{args.agent}_seed{seed}")
    if args.together and not args.plot_only and len(args.seeds) > 1:
        def harvest_all() -> None:
            nonlocal written  # by the helper thread while the seeds train
            written += sum(_harvest_seed(args, out, png, sha, folder(s), cfgs[s], s) for s in args.seeds)

        try:
            wall = train_and_harvest(partial(train_seeds_together, [cfgs[s] for s in args.seeds],
                                             [folder(s) for s in args.seeds], args.agent),
                                     harvest_all, args.harvest_every_s)
        except stops as e:
            print(f"learning_curve: error: seeds {args.seeds}: {' '.join(str(e).split())}", file=sys.stderr)
            return 2
        walls = dict.fromkeys(args.seeds, wall)
    for seed in [] if walls else args.seeds:
        run = folder(seed)
        cfg = cfgs[seed]

        def harvest(run: Path = run, cfg: Any = cfg, seed: int = seed) -> None:
            """Append the seed's checkpointed windows the file lacks (counted in `written`) and replot if
            there were any, so a long command shows progress."""
            nonlocal written  # by the helper thread while a seed trains, and after it
            n = append_new(out, run_lines(run, cfg, args, seed, machine(), sha))
            written += n
            if n:
                plot(out, png, args.suite, args.task)

        try:
            if args.plot_only:
                cfg = trained_config(run, cfg)
            else:
                walls[seed] = train_and_harvest(partial(train_seed, cfg, run, args.agent), harvest,
                                                args.harvest_every_s)
        except stops as e:  # a refused resume, a busy folder, a diverged loss: one line, finished seeds kept
            print(f"learning_curve: error: seed {seed}: {' '.join(str(e).split())}", file=sys.stderr)
            return 2
        harvest(cfg=cfg)  # the seed's last windows (all of them with --plot-only)
    if walls and args.together:
        harvest_all()  # the seeds' last windows
    plotted = plot(out, png, args.suite, args.task)
    every = read_lines(out)  # the file as written: summary, random line and target from one read
    lines = [x for x in every if in_series(x, "muse_jax", args.agent, args.variant, network_of(cfgs[args.seeds[0]]))]
    # the summary describes the series as the file holds it: with --plot-only the command's --seeds and
    # --env-steps need not be the runs' (its defaults, 0 and 50000, usually are not)
    seeds = sorted({int(x["seed"]) for x in lines}) if args.plot_only and lines else args.seeds
    budget = next((x["budget"] for x in reversed(lines) if x.get("budget")), None) if args.plot_only else None
    budget = budget or budget_of(cfgs[args.seeds[0]])
    final = {}
    for seed in seeds:
        scored = [x for x in lines if int(x["seed"]) == seed and x.get("score") is not None]
        if scored:
            last = max(scored, key=lambda x: x["env_steps"])
            final[str(seed)] = {"env_steps": last["env_steps"], "score": last["score"],
                                "success_rate": last["success_rate"]}
    rand = [x for x in every if x.get("impl") == "random"]
    emit_record({"suite": args.suite, "task": args.task, "agent": args.agent, "variant": args.variant,
                 "seeds": seeds,
                 "env_steps": budget["env_steps_total"], "lines_written": written, "final": final,
                 "random_score": rand[0]["score"] if rand else None,
                 "random_episodes": rand[0]["episodes"] if rand else None, "wall_s_per_seed": walls,
                 "network": network_of(cfgs[args.seeds[0]]),
                 "target": judge_target(every, "success_rate" if args.suite == "metaworld" else "score",
                                        args.agent, network_of(cfgs[args.seeds[0]])),
                 "wall_s": round(time.time() - t0, 1), "budget": budget,
                 "machine": machine(), "out": str(out), "plot": str(png) if plotted else None}, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
