"""Runs INSIDE .official/venv: the official DreamerV3 `train` script on this project's tasks.

Started by benchmarks/official/run.py (never imported by the project). It calls the official
`dreamerv3.main.main` unchanged, with three additions that do not touch the agent:

- `make_env` also builds the tasks the way this project does: DMC through the official `dmc.py`
  wrapper (`FromDM` + `ActionRepeat`) but without the 64x64 render the wrapper does on every step
  even when `env.dmc.image` is False (proprio runs never use that image; on a CPU it costs more than
  the physics); gymnasium and Meta-World through the official gym adapter `from_gym.FromGym`
  (gymnasium's 5-tuple step adapted to the gym API it expects, `is_terminal` kept apart from
  truncation). Meta-World is this project's own env (muse_jax/envs/metaworld.py: MT1, proprio,
  500-frame episodes, `success` at any step), its `success` passed on as `log/success`.
- a Driver callback writes one JSON line per finished episode to `--events` (agent steps summed over
  envs, score, success, train steps, wall seconds). The official `scores.jsonl` logs the same scores
  but at `step * action_repeat` and without train steps or success, so run.py reads this file.
- on resume (the official checkpoint restores its step counter), events past the restored step are
  dropped from `--events` (they are replayed by the resumed run), so no episode is counted twice.
- only with `--exact-twohot` (a named variant, never the reference run): the two-hot mean of the reward
  and value heads is computed as `exact_symmetric_twohot_mean` below. The official `TwoHot.pred` sums
  the mirrored bins pairwise so that a zero-initialised head predicts exactly 0, but under `jax.jit` the
  CPU XLA of its pinned jax 0.4.33 reorders that sum: terms of +-1.9e6 (probability 1/255 times the
  outer bins' 4.85e8) then cancel in float32 with an error of ~0.1-0.2 per state (0.175 for a fresh
  head; eager: 0), so while the outer logits stay mirrored (the first updates of a run; 0.06-0.14 over
  updates 4-62 on cheetah-run) its imagined rewards and values are noise of that size
  (docs/official_comparison.md, "Two-hot rounding noise"). The variant removes only that rounding; the
  mean is the same in exact arithmetic. Measured effect on cheetah-run: docs/learning_curves/tr512/
  twohot_noise/README.md.

    .official/venv/bin/python benchmarks/official/official_entry.py --src .official/dreamer-3.3.1 \
        --repo . --events E.jsonl --suite dmc --task cartpole-swingup --repeat 2 --episode-frames 1000 \
        -- --configs defaults size1m --logdir L ...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--src", required=True)
    p.add_argument("--repo", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--suite", required=True, choices=["dmc", "gym", "metaworld"])
    p.add_argument("--task", required=True)
    p.add_argument("--repeat", type=int, required=True)
    p.add_argument("--episode-frames", type=int, required=True)
    p.add_argument("--env-seed", type=int, default=0)
    p.add_argument("--exact-twohot", action="store_true",
                   help="variant: the two-hot mean without the float32 rounding noise (see the docstring)")
    return p.parse_known_args(argv)


def exact_symmetric_twohot_mean(probs, bins):
    """Mean of `bins` (mirror-symmetric: bins[i] == -bins[-1 - i], as DreamerV3's symexp_twohot builds
    them) under `probs`, as middle + sum_i (p_high_i - p_low_i) * b_high_i: each mirrored pair is
    subtracted before it is scaled, so equal probabilities give exactly 0 in any summation order the
    compiler picks (the official pairwise sum is exact only in the order it is written)."""
    n = probs.shape[-1]
    m = n // 2
    high = probs[..., n - m:] - probs[..., :m][..., ::-1]
    middle = (probs[..., m:n - m] * bins[m:n - m]).sum(-1)  # the 0 bin of an odd count; empty when even
    return middle + (high * bins[n - m:]).sum(-1)


class OldGymApi:
    """gymnasium env -> the gym<0.26 API that the official from_gym.FromGym calls."""

    def __init__(self, env, seed, obs_fn=None, info_fn=None):
        self.env, self._seed, self._obs_fn, self._info_fn = env, seed, obs_fn, info_fn
        self.action_space = env.action_space
        self.observation_space = env.observation_space

    def reset(self):
        obs, info = self.env.reset(seed=self._seed)
        self._seed = None  # seed the first reset only; later resets continue the env's stream
        return self._obs_fn(obs, info, True) if self._obs_fn else obs

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info, is_terminal=bool(terminated))
        if self._obs_fn:
            obs = self._obs_fn(obs, info, False)
        return obs, reward, bool(terminated or truncated), info

    def close(self):
        self.env.close()


def main(argv=None):
    args, official_argv = parse(sys.argv[1:] if argv is None else argv)
    if official_argv and official_argv[0] == "--":
        official_argv = official_argv[1:]
    sys.path.insert(0, args.src)
    os.environ.setdefault("MUJOCO_GL", "egl")
    import elements
    import embodied
    import gymnasium
    import numpy as np

    sys.modules.setdefault("gym", gymnasium)  # from_gym.py imports `gym` (spaces.Dict, make)
    from dreamerv3 import main as dmain

    if args.exact_twohot:
        from embodied.jax import outs

        outs.TwoHot.pred = lambda self: self.unsquash(exact_symmetric_twohot_mean(self.probs, self.bins))

    state = {"steps": None, "train": 0, "t0": time.time(), "wall0": 0.0, "resumed": False}
    episodes: dict[int, dict] = {}

    def build_env(index):
        if args.suite == "dmc":
            from embodied.envs import dmc as dmc_mod

            class ProprioDMC(dmc_mod.DMC):
                @property
                def obs_space(self):
                    return self._env.obs_space

                def step(self, action):
                    return self._env.step(action)

            if args.episode_frames != 1000:
                raise SystemExit("dmc: only DMC's own 1000-frame episodes are supported (episode_frames=1000).")
            # the loaded suite env, not dreamerv3's `domain_task` name: its name parser knows only one
            # multi-word domain (`cup_catch`), so `ball_in_cup-catch` or `point_mass-easy` would not load
            from dm_control import suite

            domain, task = args.task.split("-", 1)
            return ProprioDMC(suite.load(domain, task.replace("-", "_")), repeat=args.repeat, image=False,
                              proprio=True)
        from embodied.envs import from_gym

        if args.suite == "gym":
            env = gymnasium.make(args.task, max_episode_steps=args.episode_frames)
            env = OldGymApi(env, seed=args.env_seed * 1000 + index)
            env = from_gym.FromGym(env, obs_key="vector")
            return embodied.wrappers.ActionRepeat(env, args.repeat)
        sys.path.insert(0, args.repo)
        from gymnasium import spaces

        from muse_jax.envs.metaworld import MetaWorldEnv

        env = MetaWorldEnv(args.task, task_id=1, image=False, proprio=True, max_episode_steps=args.episode_frames,
                           action_repeat=args.repeat, seed=args.env_seed * 1000 + index)
        shim = OldGymApi(env, seed=args.env_seed * 1000 + index,
                         obs_fn=lambda o, info, first: {"proprio": o["proprio"], "log/success": np.bool_(o["success"])})
        shim.observation_space = spaces.Dict({
            "proprio": env.observation_space["proprio"], "log/success": spaces.Box(0, 1, (), np.bool_)})
        return from_gym.FromGym(shim)

    def make_env(config, index, **overrides):
        return dmain.wrap_env(build_env(index), config)

    loggers = []
    original_make_logger = dmain.make_logger

    def make_logger(config):
        logger = original_make_logger(config)
        loggers.append(logger)
        return logger

    def load_events():
        try:
            with open(args.events) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def on_step(tran, worker):
        if state["steps"] is None:  # first transition: the checkpoint (if any) is loaded by now
            start = int(loggers[0].step) if loggers else 0
            kept = [e for e in load_events() if e["env_steps"] <= start]
            if kept:
                state["train"], state["wall0"] = kept[-1]["train_steps"], kept[-1]["wall_s"]
            tmp = args.events + ".tmp"
            with open(tmp, "w") as f:
                f.writelines(json.dumps(e) + "\n" for e in kept)
            os.replace(tmp, args.events)
            state["steps"], state["resumed"] = start, start > 0
        state["steps"] += 1
        ep = episodes.setdefault(worker, {"score": 0.0, "success": None, "length": 0})
        if tran["is_first"]:
            ep.update(score=0.0, success=None, length=0)
        ep["score"] += float(tran["reward"])
        ep["length"] += 1
        if "log/success" in tran:
            ep["success"] = bool(ep["success"]) or bool(tran["log/success"])
        if tran["is_last"]:
            event = {"env_steps": state["steps"], "worker": worker, "score": ep["score"],
                     "success": ep["success"], "length": ep["length"], "train_steps": state["train"],
                     "wall_s": round(state["wall0"] + time.time() - state["t0"], 2), "resumed": state["resumed"]}
            with open(args.events, "a") as f:
                f.write(json.dumps(event) + "\n")
                f.flush()
                os.fsync(f.fileno())

    class Driver(embodied.Driver):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.on_step(on_step)

    from embodied.jax.agent import Agent  # the outer wrapper whose train() the loop calls per batch

    original_train = Agent.train

    def train(self, *a, **kw):
        out = original_train(self, *a, **kw)
        state["train"] = int(self.n_updates)  # the official update counter, restored with its checkpoint
        return out

    Agent.train = train
    embodied.Driver = Driver
    dmain.make_env = make_env
    dmain.make_logger = make_logger
    del elements
    dmain.main(official_argv)


if __name__ == "__main__":
    main()
