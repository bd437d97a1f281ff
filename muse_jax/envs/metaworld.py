"""Meta-World v3 tasks as gymnasium envs with MUSE's observations (64x64 RGB + 39-dim proprio + task id).

Each env is one MT1-style task: `gym.make("Meta-World/MT1", env_name=...)` samples one of 50 seeded
object/goal placements at every reset (the paper's domain randomisation). Episodes run the full
`max_episode_steps` (no termination on success); `success` is Meta-World's built-in `info["success"]`.

The observation is a dict so that gymnasium's vector envs batch it: `image` uint8 [H,W,3] (only with
`image`), `proprio` float32 [39] (only with `proprio`), `task_id` int32 [], `is_first` bool [] and
`success` bool []. Vector envs use NEXT_STEP autoreset: the step after an episode's last one returns
the next episode's first observation (`is_first`) and ignores the action, which is exactly the
DreamerV3 convention that `action[t]` is the action taken before observation `t`.

Rendering is made cheap for CPUs: multisampling off (`offsamples = 0` before the GL context exists),
a tiny shadow map and shadows/reflections off (~65 steps/s at 64x64 instead of ~4). The `corner*`
cameras render upside down, so their images are flipped on both axes; `corner2` is moved closer to
the table so that the objects are visible at 64x64.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from muse_jax.envs.metaworld_tasks import MT10_TASKS, NOVEL_TASKS  # noqa: F401 - the task lists, named once

PROPRIO_DIM = 39
"""Meta-World v3's observation vector (hand, gripper, two objects, previous frame, goal)."""
ACT_DIM = 4
"""xyz end-effector delta + gripper, in [-1, 1]."""
MAX_PATH_LENGTH = 500
"""Meta-World refuses to step past 500 steps per episode."""
CLOSE_CORNER2_POS = (0.75, 0.075, 0.7)
"""corner2 moved towards the table: at 64x64 the stock position shows mostly wall."""


def configure_gl(backend: str) -> None:
    """Select MuJoCo's offscreen GL backend; must run before mujoco is first imported.

    An explicit MUJOCO_GL in the environment wins (so users can switch without editing configs).
    """
    if backend not in ("egl", "osmesa", "glfw"):
        raise ValueError(f"render backend {backend!r} is unknown; use egl, osmesa or glfw (env.render_backend).")
    chosen = os.environ.setdefault("MUJOCO_GL", backend)
    if chosen in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", chosen)
    if "mujoco" in sys.modules and chosen != backend:
        warnings.warn(f"MUJOCO_GL={chosen} is already set; env.render_backend={backend} is ignored.", stacklevel=2)


def check_task(name: str) -> None:
    """Raise a clear error for a task name Meta-World v3 does not have."""
    import metaworld

    if name not in metaworld.ALL_V3_ENVIRONMENTS:
        import difflib

        close = difflib.get_close_matches(name, list(metaworld.ALL_V3_ENVIRONMENTS), n=3)
        hint = f" Did you mean {close}?" if close else ""
        raise ValueError(f"'{name}' is not a Meta-World v3 task.{hint} Names look like 'reach-v3'.")


class MetaWorldEnv(gym.Env):
    """One Meta-World task with dict observations; see the module docstring for the keys."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        task: str,
        task_id: int,
        *,
        image: bool = True,
        proprio: bool = True,
        image_size: int = 64,
        max_episode_steps: int = MAX_PATH_LENGTH,
        camera: str = "corner2",
        action_repeat: int = 1,
        render_backend: str = "egl",
        seed: int = 0,
    ) -> None:
        if not image and not proprio:
            raise ValueError("MetaWorldEnv needs image or proprio observations (env.image / env.proprio).")
        if not 1 <= max_episode_steps <= MAX_PATH_LENGTH:
            raise ValueError(
                f"max_episode_steps={max_episode_steps} must be in 1..{MAX_PATH_LENGTH} (Meta-World's limit).")
        if image:
            configure_gl(render_backend)
        check_task(task)
        import metaworld  # noqa: F401  (registers the Meta-World/* ids)

        self.task, self.task_id = task, int(task_id)
        self._image, self._proprio, self._repeat = image, proprio, int(action_repeat)
        self._env = gym.make(
            "Meta-World/MT1",
            env_name=task,
            seed=seed,
            max_episode_steps=max_episode_steps,
            render_mode="rgb_array" if image else None,
            camera_name=camera,
            width=image_size,
            height=image_size,
            disable_env_checker=True,
        )
        self._flip = camera.startswith("corner")
        self._viewer = None
        if image:
            self._setup_renderer(camera)
        obs_space: dict[str, spaces.Space] = {}
        if image:
            obs_space["image"] = spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
        if proprio:
            obs_space["proprio"] = spaces.Box(-np.inf, np.inf, (PROPRIO_DIM,), np.float32)
        obs_space["task_id"] = spaces.Box(0, np.iinfo(np.int32).max, (), np.int32)
        obs_space["is_first"] = spaces.Box(0, 1, (), np.bool_)
        obs_space["success"] = spaces.Box(0, 1, (), np.bool_)
        self.observation_space = spaces.Dict(obs_space)
        self.action_space = spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
        self._env.action_space.seed(seed)

    def _setup_renderer(self, camera: str) -> None:
        import mujoco

        model = self._env.unwrapped.model
        model.vis.quality.offsamples = 0  # before the GL context is made: no 4x multisampling
        model.vis.quality.shadowsize = 64  # the default 4096^2 shadow map dominates CPU render time
        cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam < 0:
            raise ValueError(f"camera '{camera}' does not exist in Meta-World (env.camera); try corner2.")
        if camera == "corner2":
            model.cam_pos[cam] = CLOSE_CORNER2_POS
        self._env.unwrapped.render()  # creates the offscreen viewer with the settings above
        self._viewer = self._env.unwrapped.mujoco_renderer.viewer
        scn = self._viewer.scn
        scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0

    def _obs(self, vec: np.ndarray, is_first: bool, success: bool) -> dict[str, np.ndarray]:
        obs: dict[str, np.ndarray] = {}
        if self._image:
            self._viewer.make_context_current()  # several envs in one process each own a GL context
            img = self._env.render()
            obs["image"] = np.ascontiguousarray(img[::-1, ::-1] if self._flip else img, dtype=np.uint8)
        if self._proprio:
            obs["proprio"] = np.asarray(vec, np.float32)
        obs["task_id"] = np.asarray(self.task_id, np.int32)
        obs["is_first"] = np.asarray(is_first, np.bool_)
        obs["success"] = np.asarray(success, np.bool_)
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        vec, info = self._env.reset(seed=seed)
        return self._obs(vec, True, False), {"task": self.task}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        action = np.clip(np.asarray(action, np.float32), -1.0, 1.0)
        if action.shape != (ACT_DIM,):
            raise ValueError(f"action must have shape ({ACT_DIM},), got {action.shape}.")
        total, success, terminated, truncated = 0.0, False, False, False
        for _ in range(self._repeat):
            vec, reward, terminated, truncated, info = self._env.step(action)
            total += float(reward)
            success = success or bool(info.get("success", 0.0))
            if terminated or truncated:
                break
        return self._obs(vec, False, success), total, bool(terminated), bool(truncated), {"success": success}

    def close(self) -> None:
        if self._viewer is not None:
            # Free the MuJoCo GL objects inside their own context: left to the garbage collector they
            # are freed in whichever context is current then, which blanks another env's framebuffer.
            self._viewer.make_context_current()
            self._viewer.con.free()
            self._viewer = None
        self._env.close()  # frees the GL context now, not during interpreter shutdown
        super().close()


class RoundRobinEnv(gym.Env):
    """One env slot of a vector env that draws its next task round-robin at every reset.

    Slot `offset` of `stride` slots runs, at its k-th reset, task (offset + k * stride) mod len(tasks).
    Meta-World episodes all run the full `max_episode_steps` (no termination), so all slots reset
    together and the slots' k-th episodes take `stride` consecutive tasks of one global cycle: after
    any number of episode rounds every task has had the same number of episodes, give or take one,
    whatever num_envs is (balanced MT10 pre-training). One MetaWorldEnv per task is built on first use.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, tasks: Sequence[str], task_ids: Sequence[int], env_cfg: Any, seed: int, offset: int,
                 stride: int) -> None:
        self._tasks, self._ids, self._cfg, self._seed = list(tasks), list(task_ids), env_cfg, seed
        self._offset, self._stride, self._resets = int(offset), int(stride), 0
        self._envs: dict[int, MetaWorldEnv] = {}
        self._cur = self._env(self._offset % len(self._tasks))
        self.observation_space, self.action_space = self._cur.observation_space, self._cur.action_space

    def _env(self, j: int) -> MetaWorldEnv:
        if j not in self._envs:
            self._envs[j] = make_env(self._tasks[j], self._ids[j], self._cfg, self._seed + 104729 * j)
        return self._envs[j]

    @property
    def task(self) -> str:
        return self._cur.task

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        j = (self._offset + self._resets * self._stride) % len(self._tasks)
        self._resets += 1
        self._cur = self._env(j)
        return self._cur.reset(seed=seed, options=options)

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        return self._cur.step(action)

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs = {}
        super().close()


def make_env(task: str, task_id: int, env_cfg: Any, seed: int) -> MetaWorldEnv:
    """One env from an EnvConfig (module-level so AsyncVectorEnv can pickle it under spawn)."""
    return MetaWorldEnv(
        task,
        task_id,
        image=env_cfg.image,
        proprio=env_cfg.proprio,
        image_size=env_cfg.image_size,
        max_episode_steps=env_cfg.max_episode_steps,
        camera=env_cfg.camera,
        action_repeat=env_cfg.action_repeat,
        render_backend=env_cfg.render_backend,
        seed=seed,
    )


def make_vector_env(
    tasks: Sequence[str], task_ids: Sequence[int], env_cfg: Any, seed: int, num_envs: int | None = None,
    *, round_robin: bool = False,
) -> gym.vector.VectorEnv:
    """`num_envs` envs over `tasks`, sync or async per config.

    Fixed (default): env i always runs tasks[i % len(tasks)] (adaptation: one env per novel task).
    `round_robin`: every env draws its next task round-robin at each reset (`RoundRobinEnv`), so each
    task gets the same share of env steps whatever num_envs is (pre-training).

    Async workers are spawned, not forked: forking a process that already runs JAX threads can hang.
    """
    if len(tasks) != len(task_ids) or not tasks:
        raise ValueError(f"need one task id per task, got tasks={list(tasks)} task_ids={list(task_ids)}.")
    if env_cfg.image:
        configure_gl(env_cfg.render_backend)
    for t in tasks:
        check_task(t)
    n = num_envs or env_cfg.num_envs
    if round_robin and len(tasks) > 1:
        fns: list[Callable[[], gym.Env]] = [
            functools.partial(RoundRobinEnv, list(tasks), [int(x) for x in task_ids], env_cfg, seed + 7919 * i, i, n)
            for i in range(n)
        ]
    else:
        fns = [functools.partial(make_env, tasks[i % len(tasks)], int(task_ids[i % len(tasks)]), env_cfg,
                                 seed + 7919 * i) for i in range(n)]
    mode = gym.vector.AutoresetMode.NEXT_STEP
    if env_cfg.vector == "async" and n > 1:
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, context="spawn")
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
