"""Episode scores of fixed action-noise policies on a DMC task (the `noise_*.jsonl` file here).

Why: before training, this project's prefill acts uniformly in [-1, 1] and both implementations' untrained
actor samples Normal(tanh(~0), std) with std = (1 - 0.1) * sigmoid(2) + 0.1 = 0.893, clipped to [-1, 1]. If
these scored differently, the early windows of the two curves would differ for that reason alone.

    .venv/bin/python docs/learning_curves/tr512/untrained_policy/action_noise_scores.py \
        --task cheetah-run --episodes 60 > docs/learning_curves/tr512/untrained_policy/noise_dmc_cheetah-run.jsonl
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from muse_jax.envs.dmc import DMCEnv

POLICIES = {
    "uniform in [-1, 1]": lambda rng, n: rng.uniform(-1.0, 1.0, n),
    "Normal(0, 0.893) clipped to [-1, 1]": lambda rng, n: np.clip(rng.normal(0.0, 0.893, n), -1.0, 1.0),
    "Normal(0, 1) clipped to [-1, 1]": lambda rng, n: np.clip(rng.normal(0.0, 1.0, n), -1.0, 1.0),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="cheetah-run")
    p.add_argument("--episodes", type=int, default=60)
    p.add_argument("--action-repeat", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    for name, draw in POLICIES.items():
        env = DMCEnv(args.task, 0, action_repeat=args.action_repeat, seed=args.seed)
        rng, scores = np.random.default_rng(args.seed), []
        for episode in range(args.episodes):
            env.reset(seed=args.seed * 100_000 + episode)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(draw(rng, env.action_space.shape[0]))
                total, done = total + reward, terminated or truncated
            scores.append(total)
        env.close()
        s = np.asarray(scores)
        print(json.dumps({"policy": name, "episodes": len(s), "mean": round(float(s.mean()), 2),
                          "std": round(float(s.std(ddof=1)), 2), "se": round(float(s.std(ddof=1) / len(s) ** 0.5), 2),
                          "min": round(float(s.min()), 2), "max": round(float(s.max()), 2),
                          "action_repeat": args.action_repeat,
                          "env": f"dm_control suite {args.task}, 1000 frames"}), flush=True)


if __name__ == "__main__":
    main()
