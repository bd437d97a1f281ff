"""Any gymnasium env with Box observations and Box actions, behind the project's observation dict.

`gym.make(task)` with the task spelled as gymnasium registers it (`InvertedPendulum-v5`, `Pendulum-v1`,
`HalfCheetah-v5`). The agent acts in [-1, 1]; actions are mapped linearly onto the env's bounds
(dreamerv3 `embodied.wrappers.NormalizeAction`), so the bounds must be finite. Observations are
flattened into `proprio` float32 [D]; pixels are not offered for this suite (`env.image` must be false).
Terminal and truncation stay apart: `terminated` (the MDP ended, the continue target is 0) and
`truncated` (a time limit: the value bootstraps) come from the env unchanged.

Episode length: `env.max_episode_steps` 0 (the `gym` suite preset) keeps the env's registered time
limit; a positive value replaces it (frames, before action repeat). `success` is the env's
`info["is_success"]` when it reports one (gymnasium-robotics style), else always False; the suite is
Dreamer-only (see `envs.suite`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


def check_task(name: str) -> None:
    """Raise a clear error for an id gymnasium has not registered, suggesting close ones."""
    if name not in gym.registry:
        import difflib

        close = difflib.get_close_matches(name, list(gym.registry), n=3)
        hint = f" Did you mean {close}?" if close else ""
        raise ValueError(f"'{name}' is not a registered gymnasium env id.{hint} Ids look like 'InvertedPendulum-v5'.")


class GymEnv(gym.Env):
    """One gymnasium env with the dict observations of the other suites (`proprio`, `task_id`, `is_first`,
    `success`)."""

    def __init__(self, task: str, task_id: int, *, image: bool = False, proprio: bool = True,
                 max_episode_steps: int = 0, action_repeat: int = 1, seed: int = 0) -> None:
        if image or not proprio:
            raise ValueError("the gym suite offers proprio observations only: "
                             "set env.image=false and env.proprio=true.")
        check_task(task)
        self.task, self.task_id, self._repeat = task, int(task_id), int(action_repeat)
        kwargs = {"max_episode_steps": int(max_episode_steps)} if max_episode_steps > 0 else {}
        self._env = gym.make(task, disable_env_checker=True, **kwargs)
        obs, act = self._env.observation_space, self._env.action_space
        if not isinstance(obs, spaces.Box) or not isinstance(act, spaces.Box):
            raise ValueError(f"'{task}' has {type(obs).__name__} observations and {type(act).__name__} actions; the "
                             "gym suite needs Box observations and Box actions.")
        if not (np.isfinite(act.low).all() and np.isfinite(act.high).all()):
            raise ValueError(f"'{task}' has unbounded actions; the gym suite maps [-1, 1] onto finite bounds only.")
        self._low, self._high = act.low.astype(np.float64), act.high.astype(np.float64)
        self.proprio_dim = int(np.prod(obs.shape))
        self.observation_space = spaces.Dict({
            "proprio": spaces.Box(-np.inf, np.inf, (self.proprio_dim,), np.float32),
            "task_id": spaces.Box(0, np.iinfo(np.int32).max, (), np.int32),
            "is_first": spaces.Box(0, 1, (), np.bool_),
            "success": spaces.Box(0, 1, (), np.bool_),
        })
        self.action_space = spaces.Box(-1.0, 1.0, act.shape, np.float32)
        self._env.action_space.seed(seed)
        self._seed = int(seed)

    def _obs(self, vec: np.ndarray, is_first: bool, success: bool) -> dict[str, np.ndarray]:
        return {"proprio": np.asarray(vec, np.float32).reshape(-1), "task_id": np.asarray(self.task_id, np.int32),
                "is_first": np.asarray(is_first, np.bool_), "success": np.asarray(success, np.bool_)}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        vec, _ = self._env.reset(seed=seed if seed is not None else self._seed)
        self._seed = None  # seed the first reset only; later resets continue the env's own generator
        return self._obs(vec, True, False), {"task": self.task}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        a = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action must have shape {self.action_space.shape}, got {a.shape}.")
        a = (self._low + (a + 1.0) / 2.0 * (self._high - self._low)).astype(self._env.action_space.dtype)
        total, success, terminated, truncated = 0.0, False, False, False
        for _ in range(self._repeat):
            vec, reward, terminated, truncated, info = self._env.step(a)
            total += float(reward)
            success = success or bool(info.get("is_success", False))
            if terminated or truncated:
                break
        return self._obs(vec, False, success), total, bool(terminated), bool(truncated), {"success": success}

    def close(self) -> None:
        self._env.close()
        super().close()


def make_env(task: str, task_id: int, env_cfg: Any, seed: int) -> GymEnv:
    """One env from an EnvConfig (module-level so AsyncVectorEnv can pickle it under spawn)."""
    return GymEnv(task, task_id, image=env_cfg.image, proprio=env_cfg.proprio,
                  max_episode_steps=env_cfg.max_episode_steps, action_repeat=env_cfg.action_repeat, seed=seed)
