"""Learning curve on one Meta-World task: success rate against env steps, to set beside DreamerV3's.

Why: a user must be able to see whether the world-model agent learns as DreamerV3 does. Published
DreamerV3 runs with state inputs reach, at 100k env steps, a success rate of about 0.98 on
coffee-button, 0.88 on drawer-close and 0.90 on handle-press.

Setting: single-task MT1 (`Meta-World/MT1`, object and goal positions re-drawn at every reset),
proprio only, 500-step episodes, success = the env's own `success` flag at any step of an episode.
Training is the project's pre-training loop (`muse_jax.loops.pretrain`: collector -> replay ->
jitted train step) on that one task with the default (current DreamerV3) settings; the success rate
is that of the training episodes (stochastic policy) finished in each window of `--log-every` env
steps, the first `--prefill` steps acting at random. `--agent muse` trains MUSE (competence head and
loss) and acts with self-regulation after the prefill; `--agent dreamer` is the baseline as
`muse-wm pretrain --agent dreamer` builds it (no competence head, acts with the actor). A uniformly
random policy's success rate on the same env (`--random-episodes`) is the reference line a curve must
rise above: on some tasks random flailing succeeds now and then.

Defaults follow the DreamerV3 settings on a GPU (model `size12m`, train ratio 512, 16 envs). On a
machine without an accelerator they shrink to a CPU budget (model `tiny`, train ratio 32, batch
16 x 32, 4 envs) so that short runs finish in minutes; every line records the settings it used.

    python benchmarks/metaworld_learning.py --task coffee-button-v3 --env-steps 100000 --out runs/curve

Writes OUT/curve.jsonl (one JSON line per window), OUT/curve.png and OUT/run/ (metrics.jsonl,
checkpoints: rerunning the same command resumes). The lines are also printed; the last line printed
is one JSON summary object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record  # noqa: E402

PUBLISHED_DREAMERV3_100K = {"coffee-button-v3": 0.98, "drawer-close-v3": 0.88, "handle-press-v3": 0.90}
"""Published DreamerV3 (state inputs) success rate at 100k env steps, as the README quotes it ("Learning curves")."""

GPU_DEFAULTS = {"size": "size12m", "train_ratio": 512.0, "num_envs": 16, "batch": 16, "seq": 64, "prefill": 5000}
CPU_DEFAULTS = {"size": "tiny", "train_ratio": 32.0, "num_envs": 4, "batch": 16, "seq": 32, "prefill": 1000}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="metaworld_learning.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Defaults marked 'auto' are the GPU values "
                                       f"{GPU_DEFAULTS} with an accelerator, else {CPU_DEFAULTS}.")
    p.add_argument("--task", default="coffee-button-v3", help="Meta-World v3 task (default: coffee-button-v3)")
    p.add_argument("--env-steps", type=int, default=100_000, help="environment steps to train for (default: 100000)")
    p.add_argument("--agent", choices=["dreamer", "muse"], default="dreamer",
                   help="dreamer: act with the actor, no competence loss; muse: competence head + self-regulation")
    p.add_argument("--size", default=None, help="model size preset (default: auto)")
    p.add_argument("--train-ratio", type=float, default=None, help="replayed steps per env step (default: auto)")
    p.add_argument("--num-envs", type=int, default=None, help="parallel envs (default: auto)")
    p.add_argument("--batch", type=int, default=None, help="replay batch size B (default: auto)")
    p.add_argument("--seq", type=int, default=None, help="replay chunk length T (default: auto)")
    p.add_argument("--prefill", type=int, default=None,
                   help="random-policy env steps first (default: auto, at most a quarter of --env-steps)")
    p.add_argument("--episode-steps", type=int, default=500, help="episode length (default: 500, Meta-World's)")
    p.add_argument("--log-every", type=int, default=None,
                   help="env steps per curve point (default: one episode per env, at least --env-steps/20)")
    p.add_argument("--random-episodes", type=int, default=10,
                   help="episodes of a uniformly random policy on the same env, the reference line "
                        "(default: 10; 0: skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="any config override, e.g. --set optim.lr=1e-4 (repeatable)")
    p.add_argument("--out", default="runs/metaworld_learning", help="output folder (default: runs/metaworld_learning)")
    args = p.parse_args(argv)
    for name in ("env_steps", "episode_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("num_envs", "batch", "seq", "log_every"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.prefill is not None and args.prefill < 0:
        p.error("--prefill must be >= 0")
    if args.random_episodes < 0:
        p.error("--random-episodes must be >= 0")
    return args


def has_accelerator() -> bool:
    import jax

    return any(d.platform in ("gpu", "tpu", "cuda", "rocm") for d in jax.devices())


def build_config(args: argparse.Namespace, accelerator: bool) -> Any:
    """The pre-training config for one MT1 task, proprio only; raises ConfigError on bad overrides."""
    from muse_jax.config import from_dict, parse_overrides

    d = dict(GPU_DEFAULTS if accelerator else CPU_DEFAULTS)
    for key in ("size", "train_ratio", "num_envs", "batch", "seq", "prefill"):
        if getattr(args, key) is not None:
            d[key] = getattr(args, key)
    prefill = d["prefill"] if args.prefill is not None else min(d["prefill"], args.env_steps // 4)
    episode_env_steps = d["num_envs"] * args.episode_steps
    log_every = args.log_every or max(episode_env_steps, args.env_steps // 20)
    data = {
        "name": f"metaworld_learning-{args.task}",
        "model": {"size": d["size"]},
        "env": {"tasks": [args.task], "novel_tasks": [args.task], "image": False, "proprio": True,
                "max_episode_steps": args.episode_steps, "num_envs": d["num_envs"], "vector": "sync"},
        "replay": {"batch_size": d["batch"], "seq_len": min(d["seq"], args.episode_steps),
                   "capacity": max(args.env_steps, d["batch"] * d["seq"])},  # a batch must fit
        "train": {"env_steps": args.env_steps, "train_ratio": d["train_ratio"], "prefill": prefill,
                  "log_every": log_every, "save_every": max(log_every, args.env_steps // 5), "seed": args.seed},
        "agent": args.agent,
    }
    return from_dict(data, parse_overrides(args.overrides))


def curve_points(metrics_path: Path, cfg: Any, agent: str, device: str) -> list[dict[str, Any]]:
    """One point per metrics line that saw finished episodes: success rate over those episodes."""
    from muse_common.files import read_jsonl

    out = []
    for row in read_jsonl(metrics_path):
        n = int(row.get("episodes_finished") or 0)
        if n == 0:
            continue
        out.append({"task": cfg.env.tasks[0], "agent": agent, "env_steps": int(row["env_steps"]),
                    "success_rate": float(row["success_rate"]), "episodes": n,
                    "prefill": int(row["env_steps"]) <= cfg.train.prefill, "train_steps": int(row["step"]),
                    "episode_score": row.get("episode_score"), "device": device, "size": cfg.model.size,
                    "train_ratio": cfg.train.train_ratio})
    return out


def random_policy_success(cfg: Any, episodes: int, seed: int) -> float | None:
    """Success rate of uniformly random actions in [-1, 1] on the run's env (same task, episode length,
    action repeat and reset distribution): the level a curve must rise above to show learning."""
    if episodes == 0:
        return None
    import numpy as np

    from muse_jax.envs.metaworld import ACT_DIM, make_env

    env = make_env(cfg.env.tasks[0], 0, cfg.env, seed + 12345)
    rng = np.random.default_rng(seed)
    solved = 0
    try:
        for ep in range(episodes):
            env.reset(seed=seed + 12345 + ep)
            success, done = False, False
            while not done:
                _, _, terminated, truncated, info = env.step(rng.uniform(-1, 1, ACT_DIM).astype(np.float32))
                success |= bool(info.get("success", False))
                done = terminated or truncated
            solved += success
    finally:
        env.close()
    return solved / episodes


def plot(points: list[dict[str, Any]], path: Path, title: str, published: float | None,
         random_level: float | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [p["env_steps"] for p in points]
    ax.plot(xs, [p["success_rate"] for p in points], marker="o", ms=3, label="this run (training episodes)")
    if published is not None:
        ax.axhline(published, ls="--", c="gray", label=f"DreamerV3 published @100k: {published:.2f}")
    if random_level is not None:
        ax.axhline(random_level, ls=":", c="tab:red", label=f"random policy: {random_level:.2f}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlim(0, max(xs) * 1.05)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from muse_jax.config import ConfigError

    accelerator = has_accelerator()
    try:
        cfg = build_config(args, accelerator)
        from muse_jax.envs.metaworld import check_task

        check_task(args.task)
    except (ConfigError, ValueError) as e:
        print(f"metaworld_learning: error: {e}", file=sys.stderr)
        return 2
    import jax

    from muse_common.files import atomic_write_text
    from muse_jax.loops.pretrain import pretrain
    from muse_jax.parallel import enable_compilation_cache

    enable_compilation_cache(os.environ.get("JAX_COMPILATION_CACHE_DIR", "~/.cache/muse_jax/xla"))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = f"{jax.devices()[0].platform}:{jax.devices()[0].device_kind}"
    t0 = time.time()
    mode = "muse" if args.agent == "muse" else "dreamer"
    pretrain(cfg, out / "run", echo=lambda s: print(s, file=sys.stderr), act_mode=mode)
    wall = time.time() - t0
    points = curve_points(out / "run" / "metrics.jsonl", cfg, args.agent, device)
    atomic_write_text(out / "curve.jsonl", "".join(json.dumps(p) + "\n" for p in points))
    for p in points:
        print(json.dumps(p))
    published = PUBLISHED_DREAMERV3_100K.get(args.task)
    title = (f"{args.task}, {args.agent}, {cfg.model.size}, train ratio {cfg.train.train_ratio:g}, "
             f"{device} ({'GPU' if accelerator else 'CPU'})")
    random_level = random_policy_success(cfg, args.random_episodes, args.seed)
    if points:
        plot(points, out / "curve.png", title, published, random_level)
    trained = [p for p in points if not p["prefill"]]
    last = trained[-1] if trained else None
    summary = {"task": args.task, "agent": args.agent, "env_steps": args.env_steps, "points": len(points),
               "final_success_rate": last["success_rate"] if last else None,
               "final_episodes": last["episodes"] if last else 0,
               "published_dreamerv3_100k": published, "random_policy_success_rate": random_level,
               "random_episodes": args.random_episodes, "device": device, "accelerator": accelerator,
               "size": cfg.model.size, "train_ratio": cfg.train.train_ratio, "wall_s": round(wall, 1),
               "curve": str(out / "curve.jsonl"), "plot": str(out / "curve.png") if points else None}
    if last is None:
        summary["note"] = "no episode finished after the prefill: the run is too short to show learning"
    emit_record(summary, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
