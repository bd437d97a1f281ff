"""DeepMind Control Suite tasks as gymnasium envs with the project's observation dict.

DreamerV3's DMC setting (danijar/dreamerv3 `embodied/envs/dmc.py`, `from_dm.py`; its 2023-24 configs
`env.dmc.repeat: 2`): the suite's own 1000-frame time limit, no termination (suite tasks end only by
the time limit; a last step with discount 0 would be terminal, as in dreamerv3's `from_dm`), action
repeat 2 (set by the `dmc` suite preset of `muse_jax.config.load`), rewards summed over the repeated
frames. Task names are `domain-task` with dashes (`cartpole-swingup`, `walker-walk`,
`ball_in_cup-catch`); dreamerv3 and the published score files spell them `cartpole_swingup`.

Observations: `proprio` float32 [D] = every array of the suite's observation dict flattened and
concatenated in the suite's order (dreamerv3 feeds them as separate vector keys that its encoder
concatenates); `image` uint8 [H,W,3] from `physics.render` when `env.image` (camera `-1` = dreamerv3's
default per domain: 2 for quadruped, else 0); `task_id`, `is_first` and `success` as in Meta-World.
DMC defines no success: `success` is always False, and the suite is Dreamer-only (see `envs.suite`).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

DEFAULT_CAMERAS = {"quadruped": 2}
"""dreamerv3 `DMC.DEFAULT_CAMERAS` (suite domains only); other domains use camera 0."""


def split_task(name: str) -> tuple[str, str]:
    """`cartpole-swingup` -> ("cartpole", "swingup"); the domain is the part before the first dash."""
    domain, sep, task = name.partition("-")
    if not sep or not task:
        raise ValueError(f"'{name}' is not a DMC task name; write domain-task, e.g. cartpole-swingup or walker-walk.")
    return domain, task


def check_task(name: str) -> None:
    """Raise a clear error for a name the dm_control suite does not have, suggesting close ones."""
    import warnings

    with warnings.catch_warnings():
        # with no MUJOCO_GL set, importing dm_control tries GLFW, whose two warning lines on a machine without a
        # display came before the one-line error; a task check renders nothing (an image run sets its backend first)
        warnings.filterwarnings("ignore", message=r".*The DISPLAY environment variable is missing")
        from dm_control import suite

    names = [f"{d}-{t}" for d, t in suite.ALL_TASKS]
    if name not in names:
        import difflib

        close = difflib.get_close_matches(name, names, n=3)
        hint = f" Did you mean {close}?" if close else ""
        raise ValueError(f"'{name}' is not a dm_control suite task.{hint} Names look like 'cartpole-swingup'.")


class DMCEnv(gym.Env):
    """One dm_control suite task; see the module docstring for the observation keys."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, task: str, task_id: int, *, image: bool = False, proprio: bool = True, image_size: int = 64,
                 max_episode_steps: int = 1000, camera: str = "-1", action_repeat: int = 2,
                 render_backend: str = "egl", seed: int = 0) -> None:
        if not image and not proprio:
            raise ValueError("DMCEnv needs image or proprio observations (env.image / env.proprio).")
        if image:
            from muse_jax.envs.metaworld import configure_gl

            configure_gl(render_backend)
        else:
            os.environ.setdefault("MUJOCO_GL", render_backend)
        check_task(task)
        from dm_control import suite

        domain, name = split_task(task)
        self.task, self.task_id = task, int(task_id)
        self._env = suite.load(domain, name, task_kwargs={"random": int(seed)})
        limit = self._env._step_limit  # frames per episode (the suite's time limit / control timestep)
        if not 1 <= max_episode_steps <= limit:
            raise ValueError(f"env.max_episode_steps={max_episode_steps} must be in 1..{limit}, the frames of one "
                             f"'{task}' episode (DreamerV3's DMC setting uses all {limit}).")
        self._max_frames = int(max_episode_steps)
        self._image, self._proprio, self._repeat, self._size = image, proprio, int(action_repeat), int(image_size)
        try:
            cam = int(camera)
        except ValueError:
            raise ValueError(f"env.camera='{camera}': DMC cameras are integers (-1 = the domain's default).") from None
        self._camera = DEFAULT_CAMERAS.get(domain, 0) if cam == -1 else cam
        spec = self._env.action_spec()
        if not (np.allclose(spec.minimum, -1.0) and np.allclose(spec.maximum, 1.0)):
            raise ValueError(f"'{task}' has actions in [{spec.minimum}, {spec.maximum}]; only [-1, 1] is supported.")
        self.proprio_dim = int(sum(int(np.prod(s.shape)) for s in self._env.observation_spec().values()))
        obs_space: dict[str, spaces.Space] = {}
        if image:
            obs_space["image"] = spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
        if proprio:
            obs_space["proprio"] = spaces.Box(-np.inf, np.inf, (self.proprio_dim,), np.float32)
        obs_space["task_id"] = spaces.Box(0, np.iinfo(np.int32).max, (), np.int32)
        obs_space["is_first"] = spaces.Box(0, 1, (), np.bool_)
        obs_space["success"] = spaces.Box(0, 1, (), np.bool_)
        self.observation_space = spaces.Dict(obs_space)
        self.action_space = spaces.Box(-1.0, 1.0, spec.shape, np.float32)
        self._frames = 0

    def _obs(self, timestep: Any, is_first: bool) -> dict[str, np.ndarray]:
        obs: dict[str, np.ndarray] = {}
        if self._image:
            obs["image"] = np.ascontiguousarray(
                self._env.physics.render(self._size, self._size, camera_id=self._camera), dtype=np.uint8)
        if self._proprio:
            obs["proprio"] = np.concatenate(
                [np.asarray(v, np.float32).reshape(-1) for v in timestep.observation.values()])
        obs["task_id"] = np.asarray(self.task_id, np.int32)
        obs["is_first"] = np.asarray(is_first, np.bool_)
        obs["success"] = np.asarray(False, np.bool_)
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        if seed is not None:  # dm_control draws initial states from the task's own RandomState
            self._env.task.random.seed(seed)
        self._frames = 0
        return self._obs(self._env.reset(), True), {"task": self.task}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        action = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        if action.shape != self.action_space.shape:
            raise ValueError(f"action must have shape {self.action_space.shape}, got {action.shape}.")
        total, terminated, truncated = 0.0, False, False
        for _ in range(self._repeat):
            ts = self._env.step(action)
            self._frames += 1
            total += float(ts.reward or 0.0)
            if ts.last() or self._frames >= self._max_frames:
                terminated = bool(ts.last() and ts.discount == 0.0)
                truncated = not terminated
                break
        return self._obs(ts, False), total, terminated, truncated, {"success": False}

    def close(self) -> None:
        self._env.close()
        super().close()


def make_env(task: str, task_id: int, env_cfg: Any, seed: int) -> DMCEnv:
    """One env from an EnvConfig (module-level so AsyncVectorEnv can pickle it under spawn)."""
    return DMCEnv(task, task_id, image=env_cfg.image, proprio=env_cfg.proprio, image_size=env_cfg.image_size,
                  max_episode_steps=env_cfg.max_episode_steps, camera=env_cfg.camera,
                  action_repeat=env_cfg.action_repeat, render_backend=env_cfg.render_backend, seed=seed)
