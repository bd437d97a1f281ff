"""The one env contract, whichever suite `env.suite` names: Meta-World, DeepMind Control or gymnasium.

Every suite's env returns the same observation dict (`proprio` and/or `image`, `task_id`, `is_first`,
`success`), rewards summed over the action repeat, and terminal and truncation apart, so the
collector, replay and pre-training loop never ask which suite they run. This module picks the suite's
env factory, checks task names, reads the observation and action sizes the networks are built for,
and builds the vector env (gymnasium, NEXT_STEP autoreset, as `metaworld.make_vector_env`).

Only Meta-World defines success, which MUSE's competence head learns from; DMC and gym runs are
Dreamer-only (the config refuses `agent: muse` there) and `adapt` stays Meta-World only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

SUITES = ("metaworld", "dmc", "gym")
SUITES_WITH_SUCCESS = ("metaworld",)
"""Suites whose envs report a task success (MUSE's competence head and success rates need it)."""


def _module(suite: str) -> Any:
    if suite == "metaworld":
        from muse_jax.envs import metaworld as m
    elif suite == "dmc":
        from muse_jax.envs import dmc as m
    elif suite == "gym":
        from muse_jax.envs import gym as m
    else:
        raise ValueError(f"env.suite='{suite}' is unknown; use one of {list(SUITES)}.")
    return m


def check_tasks(suite: str, tasks: Sequence[str]) -> None:
    """Raise one clear ValueError for a task name the suite does not have (or several tasks where the suite
    runs one: DMC and gym tasks differ in observation and action sizes)."""
    if suite != "metaworld" and len(tasks) != 1:
        raise ValueError(f"env.suite={suite} runs one task per run, got env.tasks={list(tasks)}; give one, "
                         "e.g. --set env.tasks=[cartpole-swingup].")
    for t in tasks:
        _module(suite).check_task(t)


def make_env(env_cfg: Any, task: str, task_id: int, seed: int) -> gym.Env:
    """One env of the configured suite."""
    return _module(env_cfg.suite).make_env(task, task_id, env_cfg, seed)


@functools.lru_cache(maxsize=32)
def _dims(suite: str, task: str, env_cfg: Any) -> tuple[int, int]:
    env = make_env(env_cfg, task, 1, 0)
    try:
        proprio = env.observation_space["proprio"].shape[0] if "proprio" in env.observation_space.spaces else 0
        return int(proprio), int(env.action_space.shape[0])
    finally:
        env.close()


def obs_dims(env_cfg: Any) -> tuple[int, int]:
    """(proprio_dim, act_dim) of the configured suite and task: Meta-World's constants, else read from one env."""
    if env_cfg.suite == "metaworld":
        from muse_jax.envs.metaworld import ACT_DIM, PROPRIO_DIM

        return PROPRIO_DIM, ACT_DIM
    check_tasks(env_cfg.suite, env_cfg.tasks)
    return _dims(env_cfg.suite, env_cfg.tasks[0], env_cfg)


def make_vector_env(tasks: Sequence[str], task_ids: Sequence[int], env_cfg: Any, seed: int,
                    num_envs: int | None = None, *, round_robin: bool = False) -> gym.vector.VectorEnv:
    """`num_envs` envs of the configured suite (Meta-World: `metaworld.make_vector_env`, with its round-robin
    task schedule; DMC and gym: copies of the one task, env i seeded `seed + 7919 * i`)."""
    if env_cfg.suite == "metaworld":
        from muse_jax.envs.metaworld import make_vector_env as mw

        return mw(tasks, task_ids, env_cfg, seed, num_envs, round_robin=round_robin)
    check_tasks(env_cfg.suite, tasks)
    n = num_envs or env_cfg.num_envs
    factory = _module(env_cfg.suite).make_env
    fns: list[Callable[[], gym.Env]] = [
        functools.partial(factory, tasks[0], int(task_ids[0]), env_cfg, seed + 7919 * i) for i in range(n)]
    mode = gym.vector.AutoresetMode.NEXT_STEP
    if env_cfg.vector == "async" and n > 1:
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, context="spawn")
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
