"""Acting in a batch of envs with the on-device policy, cutting the stream into finished episodes.

Per env the collector stores DreamerV3-style steps: observation t, the action taken BEFORE it
(zeros where is_first), the reward received on arriving at it, is_first / is_terminal, plus the
policy's self-awareness outputs at t (competence sum and critic value) and the posterior latent the
policy filtered at t (`deter`, `stoch`: the replay context training chunks start from). When an env's episode ends
(truncated or terminated), the episode is returned with its success flags so that time-to-success
labels can be computed (`Replay.add_episode(ep, success_T)`).

Env faults: if stepping raises (a MuJoCo env raising, an async worker dying) or an async step hangs
past `step_timeout_s`, the vector env is closed and rebuilt, the unfinished episodes are dropped,
and the reason is kept in `faults`; after `max_restarts` restarts in a row the error is raised.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from muse_jax.competence import steps_to_success
from muse_jax.evaluate import REGULATION_EFFECT_KEYS
from muse_jax.replay import latent_arrays

EXTRA_INFO_KEYS = ("value_normalized", "quantile", "psi1", *REGULATION_EFFECT_KEYS)
"""Per-step policy outputs kept for evaluation when the policy reports them (Episode.extra_T)."""

AGENT_OBS_KEYS = ("image", "proprio", "task_id", "is_first")
"""Observation keys the policy sees (the env also reports `success`, which the agent must not)."""


@dataclasses.dataclass
class Episode:
    """One finished episode: replay arrays [T, ...] plus what evaluation needs."""

    task: str
    data: dict[str, np.ndarray]
    success_T: np.ndarray
    competence_T: np.ndarray
    value_T: np.ndarray
    extra_T: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """EXTRA_INFO_KEYS the policy reported, per step."""

    @property
    def success(self) -> bool:
        return bool(self.success_T.any())

    @property
    def first_success_step(self) -> int:
        """Index of the first success step (= agent steps taken to succeed), or -1."""
        hits = np.flatnonzero(self.success_T)
        return int(hits[0]) if hits.size else -1

    @property
    def length(self) -> int:
        return len(self.success_T)

    @property
    def score(self) -> float:
        return float(self.data["reward"].sum())

    def replay_data(self, reading: str = "steps_left") -> dict[str, np.ndarray]:
        """The episode as the replay stores it: its arrays plus the per-step `time_to_success` labels
        (under `reading`, the config's `model.competence_reading`)."""
        return {**self.data, "time_to_success": steps_to_success(self.success_T, reading)}


class Collector:
    """Steps a gymnasium vector env (NEXT_STEP autoreset) with a batched, jitted policy.

    `policy(state, carry, obs, key, mode) -> (action, carry, info)` is e.g.
    `agent.make_policy_step(graphdef)` (one env per batch row; adapt passes its task-stacked step)."""

    def __init__(self, make_venv: Callable[[int], Any], policy: Callable, carry: Any, tasks: list[str], seed: int,
                 *, step_timeout_s: float = 120.0, max_restarts: int = 3,
                 task_names: dict[int, str] | None = None) -> None:
        """`task_names` maps the obs task id to the task name (envs that switch task at reset); without
        it env i runs tasks[i % len(tasks)]."""
        self._make_venv, self.policy, self.carry, self.tasks = make_venv, policy, carry, tasks
        self.task_names = task_names
        self._seed, self._timeout, self._max_restarts = seed, step_timeout_s, max_restarts
        self.faults: list[dict[str, Any]] = []
        # wall seconds spent in the vector env's own step so far (policy and bookkeeping excluded), public so
        # that a benchmark times env stepping without wrapping a private method (collect_overhead.py --loop)
        self.env_s = 0.0
        self._restarts_in_a_row = 0
        self.venv = make_venv(seed)
        self.num_envs = self.venv.num_envs
        self.act_dim = int(self.venv.single_action_space.shape[0])
        self._key = jax.random.key(seed)
        self._next: tuple | None = None  # the policy's outputs for the next step, dispatched by `prefetch`
        self._start()

    def _start(self) -> None:
        obs, _ = self.venv.reset(seed=self._seed + 101 * len(self.faults))
        self._obs = obs
        self._next = None  # a policy prefetched on the replaced envs' observations is not theirs
        self._reward = np.zeros(self.num_envs, np.float32)
        self._terminal = np.zeros(self.num_envs, bool)
        self._last = np.zeros(self.num_envs, bool)
        self._prev_action = np.zeros((self.num_envs, self.act_dim), np.float32)
        self._buffers: list[list[dict[str, Any]]] = [[] for _ in range(self.num_envs)]

    def _env_step(self, action: np.ndarray) -> tuple:
        t0 = time.perf_counter()
        try:
            if hasattr(self.venv, "step_async"):  # AsyncVectorEnv: a hung worker becomes a timeout error
                self.venv.step_async(action)
                return self.venv.step_wait(timeout=self._timeout)
            return self.venv.step(action)
        finally:
            self.env_s += time.perf_counter() - t0

    def _restart(self, error: BaseException) -> None:
        self._restarts_in_a_row += 1
        lost = sum(len(b) for b in self._buffers)
        self.faults.append({"reason": f"{type(error).__name__}: {error}"[:500], "steps_dropped": lost,
                            "tasks": sorted(set(self.tasks))})
        if self._restarts_in_a_row > self._max_restarts:
            raise RuntimeError(f"the environments failed {self._restarts_in_a_row} times in a row; last error: "
                               f"{self.faults[-1]['reason']}") from error
        try:
            self.venv.close()
        except Exception:  # noqa: BLE001 - a broken env may fail to close; it is replaced anyway
            pass
        self.venv = self._make_venv(self._seed + 101 * len(self.faults))
        self._start()

    @property
    def prefetched(self) -> bool:
        """True when `prefetch` has dispatched the policy for the next step."""
        return self._next is not None

    def prefetch(self, state: Any, mode: str) -> None:
        """Dispatch the policy for the next step now, on the current observations, without waiting for it;
        the next `step` acts with it (whatever state it is given). JAX runs it asynchronously: work
        dispatched after it (train steps) does not delay it, and the host is free to go on."""
        self._next = self._policy(state, mode)

    def _policy(self, state: Any, mode: str) -> tuple:
        agent_obs = {k: self._obs[k] for k in AGENT_OBS_KEYS if k in self._obs}
        self._key, sub = jax.random.split(self._key)
        return self.policy(state, self.carry, agent_obs, sub, mode)

    def step(self, state: Any = None, mode: str | None = None) -> list[Episode]:
        """One env step in every env; returns the episodes that finished with this step. The policy acts
        with `state` in `mode`, or, after `prefetch`, with what was dispatched there."""
        obs = self._obs
        if self._next is not None:
            (action, self.carry, info), self._next = self._next, None
        elif mode is None:
            raise ValueError("Collector.step: give the policy's state and mode (nothing was prefetched)")
        else:
            action, self.carry, info = self._policy(state, mode)
        action = np.asarray(action, np.float32)
        has_latent = isinstance(self.carry, dict) and "deter" in self.carry and "stoch" in self.carry
        if has_latent:  # the filtering posterior after observing t, never a regulated state (agent.policy_step)
            deter, stoch = latent_arrays(self.carry["deter"], self.carry["stoch"])
        competence = np.asarray(info["competence"], np.float32)
        value = np.asarray(info["value"], np.float32)
        extra = {k: np.asarray(info[k], np.float32) for k in EXTRA_INFO_KEYS if k in info}
        finished = []
        for i in range(self.num_envs):
            first = bool(obs["is_first"][i])
            step = {k: obs[k][i] for k in ("image", "proprio", "task_id") if k in obs}
            step.update(
                action=np.zeros(self.act_dim, np.float32) if first else self._prev_action[i],
                reward=np.float32(0.0 if first else self._reward[i]),
                is_first=first,
                is_terminal=bool(self._terminal[i]),
                success=bool(obs["success"][i]),
                competence=competence[i],
                value=value[i],
                **{f"extra/{k}": v[i] for k, v in extra.items()},
            )
            if has_latent:
                step.update(deter=deter[i], stoch=stoch[i])
            if first:
                self._buffers[i] = []
            self._buffers[i].append(step)
            if self._last[i]:
                finished.append(self._finish(i))
        self._prev_action = action
        try:
            obs, reward, terminated, truncated, _ = self._env_step(action)
        except Exception as e:  # noqa: BLE001 - any env failure: rebuild the envs, drop unfinished episodes
            self._restart(e)
            return finished
        self._restarts_in_a_row = 0
        self._obs = obs
        self._reward = np.asarray(reward, np.float32)
        self._terminal = np.asarray(terminated, bool)
        self._last = np.logical_or(terminated, truncated)
        return finished

    def partial_episodes(self) -> list[Episode | None]:
        """Each env's unfinished episode so far (None where it has no step), buffers left as they are:
        a checkpoint stores these so that a resume loses no env step taken before it."""
        out: list[Episode | None] = []
        for i in range(self.num_envs):
            keep = list(self._buffers[i])
            out.append(self._finish(i) if keep else None)
            self._buffers[i] = keep
        return out

    def _finish(self, i: int) -> Episode:
        steps, self._buffers[i] = self._buffers[i], []
        evals = ("success", "competence", "value")
        data = {k: np.stack([s[k] for s in steps]) for k in steps[0] if k not in evals and not k.startswith("extra/")}
        data["action"] = data["action"].astype(np.float32)
        data["reward"] = data["reward"].astype(np.float32)
        data["task_id"] = data["task_id"].astype(np.int32)
        task = self.task_names[int(data["task_id"][0])] if self.task_names else self.tasks[i % len(self.tasks)]
        return Episode(
            task=task,
            data=data,
            success_T=np.array([s["success"] for s in steps], bool),
            competence_T=np.array([s["competence"] for s in steps], np.float32),
            value_T=np.array([s["value"] for s in steps], np.float32),
            extra_T={k.removeprefix("extra/"): np.array([s[k] for s in steps], np.float32)
                     for k in steps[0] if k.startswith("extra/")},
        )

    def close(self) -> None:
        self.venv.close()


def episode_record(agent: str, task: str, index: int, ep: Episode, counters: dict[str, int] | None = None
                   ) -> dict[str, Any]:
    """One episodes.jsonl line: outcome, step-wise self-awareness signal, and the sequencing counters.

    The record's `time_to_success` (a field of docs/world-model/index.md) is the episode's first-success
    step, -1 if none.
    MUSE's `signal` is the competence sum (with `psi1` and `quantile`), Dreamer's the critic value over the
    return scale (with the raw `value`); adaptation and pre-training (its `sa/*` metrics) both write these."""
    if agent == "muse":
        signal = ep.competence_T
    else:
        signal = ep.extra_T.get("value_normalized", ep.value_T)
    rec = {"task": task, "episode": index, "success": ep.success, "time_to_success": ep.first_success_step,
           "length": ep.length, "score": ep.score, "signal": [round(float(x), 5) for x in signal]}
    if agent == "dreamer":  # the raw critic value beside the normalised signal (evaluate: sa_auroc_raw_value)
        rec["value"] = [round(float(x), 5) for x in ep.value_T]
    if agent == "muse" and "quantile" in ep.extra_T:
        rec["quantile"] = [int(x) for x in ep.extra_T["quantile"]]
    if agent == "muse" and "psi1" in ep.extra_T:
        rec["psi1"] = [round(float(x), 5) for x in ep.extra_T["psi1"]]
    for k in REGULATION_EFFECT_KEYS:  # what self-regulation changed, per step (regulation/gradient.py)
        if k in ep.extra_T:
            rec[k] = [round(float(x), 5) for x in ep.extra_T[k]]
    rec.update(counters or {})
    return rec
