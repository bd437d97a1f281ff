"""How often a random policy solves each Meta-World task at a config's episode shape.

Why: self-awareness is only measurable where outcomes are mixed (AUROC needs both classes), so the tasks
of a run whose budget is small are chosen where a random policy succeeds now and then: such a task gives
successes to learn from in pre-training and mixed outcomes in adaptation. The policy is the quickstart's
measurement: Gaussian actions (sigma 0.9) clipped to [-1, 1], one env per episode, fresh object and goal
placements per episode.

    python benchmarks/random_policy_tasks.py --config quickstart --episodes 10 --tasks reach-v3 drawer-close-v3

The last line printed is one JSON object (benchmarks.report.emit_record).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record  # noqa: E402
from muse_jax.config import load_config  # noqa: E402
from muse_jax.envs.metaworld import make_vector_env  # noqa: E402


def random_successes(task: str, cfg, episodes: int, seed: int, sigma: float = 0.9) -> list[bool]:
    """Success of each of `episodes` random-policy episodes of `task` (all run side by side)."""
    venv = make_vector_env([task], [0], cfg.env, seed, episodes)
    rng = np.random.default_rng(seed)
    try:
        venv.reset(seed=seed)
        success = np.zeros(episodes, bool)
        done = np.zeros(episodes, bool)
        while not done.all():
            action = np.clip(rng.normal(0.0, sigma, (episodes, venv.single_action_space.shape[0])), -1, 1)
            obs, _, term, trunc, _ = venv.step(action.astype(np.float32))
            success |= np.asarray(obs["success"], bool) & ~done
            done |= np.asarray(term, bool) | np.asarray(trunc, bool)
    finally:
        venv.close()
    return success.tolist()


def main() -> None:
    from muse_common.arg_parser import ArgumentParser, path_text_arg

    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="quickstart", help="episode shape (max_episode_steps, action_repeat)")
    p.add_argument("--tasks", nargs="+", required=True)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, type=path_text_arg, help="append the JSON record to this file")
    args = p.parse_args()
    cfg = load_config(args.config, {"env.vector": "sync", "env.image": False})
    t0 = time.time()
    rows = {}
    for task in args.tasks:
        s = random_successes(task, cfg, args.episodes, args.seed)
        rows[task] = {"successes": int(sum(s)), "episodes": len(s)}
        print(f"{task}: {sum(s)}/{len(s)}", file=sys.stderr, flush=True)
    emit_record({"benchmark": "random_policy_tasks", "config": args.config, "seed": args.seed, "sigma": 0.9,
                 "max_episode_steps": cfg.env.max_episode_steps, "action_repeat": cfg.env.action_repeat,
                 "seconds": round(time.time() - t0, 1), "tasks": rows}, args.out)


if __name__ == "__main__":
    main()
