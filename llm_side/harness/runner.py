"""run_eval: tasks x episodes of one agent on one text env, recorded line by line, resumable.

The agent's memory is carried across a task's episodes; on resume it is restored from the last
finished record of that task. Env failures and stray agent exceptions end the episode as failed
with a `reason`; the run goes on.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llm_side.harness import records as rec
from llm_side.harness.contracts import Agent, EpisodeOutcome, TextEnv
from llm_side.harness.progress import Progress
from llm_side.harness.summary import summarize
from muse_common.files import append_jsonl, atomic_write_json
from muse_common.machine import cpu_model, utc_now


def episode_seed(seed: int, episode: int) -> int:
    """Seed of one episode: distinct per episode, the same on every rerun."""
    return int(seed) * 1000 + int(episode)


def is_fatal(exc: BaseException) -> bool:
    """Errors that must stop the run rather than fail one episode: a backend that is down or a
    model that is not installed (marked `fatal = True`), memory exhaustion, or a transport/protocol error
    from any backend (a dropped connection, a reply cut mid-body: never the agent's outcome). The episode
    is not recorded, so a resumed run redoes it."""
    import http.client
    import urllib.error

    transport = (http.client.HTTPException, urllib.error.URLError, ConnectionError)
    return bool(getattr(exc, "fatal", False)) or isinstance(exc, (MemoryError, *transport))


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    loc = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{loc}"


def run_episode(env: TextEnv, agent: Agent, *, task_id: str, episode: int, max_steps: int, seed: int,
                on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Play one episode and return its record fields (without memory/identity keys); `on_step(t)` is
    called after each step (the progress bar)."""
    actions: list[str] = []
    observations: list[str] = []
    competence: list[float | None] = []
    step_info: list[dict[str, Any]] = []
    success, score, reason, task_text, first_obs = False, None, None, "", ""
    t0 = time.monotonic()
    try:
        obs = env.reset(task_id, seed=seed)
    except Exception as exc:  # noqa: BLE001 - any env failure ends the episode, never the run
        return _crashed(env, f"env reset failed: {_describe(exc)}", t0)
    task_text, first_obs = obs.task, obs.text
    observation, admissible = obs.text, obs.admissible_actions
    try:
        agent.begin_episode(obs, task_id=task_id, episode=episode, env=env)
    except Exception as exc:  # noqa: BLE001
        if is_fatal(exc):
            raise
        reason = f"agent error: {_describe(exc)}"
    for _ in range(max_steps if reason is None else 0):
        try:
            decision = agent.act(observation, admissible)
        except Exception as exc:  # noqa: BLE001 - malformed LLM output must not kill the run
            if is_fatal(exc):
                raise
            reason = f"agent error: {_describe(exc)}"
            break
        try:
            result = env.step(decision.action)
        except Exception as exc:  # noqa: BLE001
            reason = f"env crashed: {_describe(exc)}"
            _restart(env)
            break
        observe = getattr(agent, "observe", None)  # agents that learn from per-step reward (RefRea)
        if callable(observe):
            observe(result)
        actions.append(decision.action)
        observations.append(result.observation)
        competence.append(None if decision.competence is None else float(decision.competence))
        step_info.append(dict(decision.info or {}))
        observation, admissible = result.observation, result.admissible_actions
        score = result.score if result.score is not None else score
        if on_step is not None:
            on_step(len(actions))
        if result.done:
            success = bool(result.won)
            break
    outcome = EpisodeOutcome(
        task_id=task_id,
        episode=episode,
        success=success,
        steps=len(actions),
        score=score,
        trajectory=list(zip(actions, observations, strict=True)),
        task=task_text,
        reason=reason,
    )
    try:
        agent.end_episode(outcome)
    except Exception as exc:  # noqa: BLE001
        if is_fatal(exc):
            raise
        reason = (reason + "; " if reason else "") + f"agent end_episode error: {_describe(exc)}"
    return {
        "success": success,
        "steps": len(actions),
        "score": score,
        "actions": actions,
        "observations": observations,
        "competence": competence if any(c is not None for c in competence) else None,
        "step_info": step_info if any(step_info) else None,
        "reason": reason,
        "task_text": task_text,
        "first_observation": first_obs,
        "time_s": round(time.monotonic() - t0, 3),
    }


def _restart(env: TextEnv) -> None:
    try:
        env.restart()
    except Exception as exc:  # noqa: BLE001
        raise RuntimeError(f"env '{getattr(env, 'name', env)}' crashed and could not restart: {exc}") from exc


def _crashed(env: TextEnv, reason: str, t0: float) -> dict[str, Any]:
    _restart(env)
    return {
        "success": False,
        "steps": 0,
        "score": None,
        "actions": [],
        "observations": [],
        "competence": None,
        "step_info": None,
        "reason": reason,
        "task_text": "",
        "first_observation": "",
        "time_s": round(time.monotonic() - t0, 3),
        "env_crashed": True,
    }


def run_eval(
    env: TextEnv,
    agent: Agent,
    *,
    env_name: str,
    agent_name: str,
    task_ids: Sequence[str],
    episodes: int,
    max_steps: int | None,
    out_dir: str | Path,
    seed: int = 0,
    progress: bool = True,
    provenance: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run every (task, episode) not yet recorded in `out_dir`, append one line per finished episode
    to episodes.jsonl, keep summary.json current, and return the summary.

    Each line says where and when it was made (`finished`, UTC; `cpu_model`, the processor, which a CPU step's
    seconds depend on), plus `provenance` (e.g. `server`, the local server a model went through), because a run
    folder is resumed across sessions and machines."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if not task_ids:
        raise ValueError("no tasks to run: check --split / --tasks / --limit")
    max_steps = int(max_steps or env.default_max_steps)
    made_on = {"cpu_model": cpu_model(), **(provenance or {})}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = rec.episodes_path(out_dir)
    # a torn last line is cut (and said: that episode is redone), a duplicate dropped from the file (said);
    # a malformed line stops here in one line (RecordError), before anything runs (docs/reliability.md)
    records = rec.load_records(out_dir, resume=True)
    rec.check_same_run(records, env_name, agent_name, out_dir)
    done = rec.done_pairs(records)
    wanted = [(str(t), e) for t in task_ids for e in range(episodes)]
    expected = len(wanted)
    prior = [r for r in records if (str(r["task"]), int(r["episode"])) in set(wanted)]
    bar = Progress(
        total=expected,
        done=len(prior),
        successes=sum(bool(r["success"]) for r in prior),
        enabled=progress,
        desc=f"{env_name}/{agent_name}",
    )
    try:
        until_success = bool(getattr(agent, "stop_after_success", False))  # RefRea: trials until solved
        for task in dict.fromkeys(str(t) for t in task_ids):
            ran_previous = False
            for e in range(episodes):
                if (task, e) in done:
                    ran_previous = False
                    continue
                if until_success and any(r["success"] for r in records if str(r["task"]) == task):
                    bar.update(True)
                    continue
                if not ran_previous:
                    agent.load_memory(_memory_to_load(agent, records, task, e))
                fields = run_episode(
                    env, agent, task_id=task, episode=e, max_steps=max_steps, seed=episode_seed(seed, e),
                    on_step=lambda t: bar.step(t, max_steps),
                )
                record = {
                    "env": env_name,
                    "task": task,
                    "agent": agent_name,
                    "episode": e,
                    "seed": episode_seed(seed, e),
                    **fields,
                    "memory": agent.memory(),
                    "finished": utc_now(),
                    **made_on,
                }
                extras = getattr(agent, "episode_extras", None)
                rec.merge_extras(record, extras() if callable(extras) else None)
                append_jsonl(path, record)
                records.append(record)
                done.add((task, e))
                ran_previous = True
                bar.update(bool(record["success"]))
                atomic_write_json(out_dir / rec.SUMMARY_FILE, summarize(_of(records, wanted), expected=expected))
    finally:
        bar.close()
    summary = summarize(_of(records, wanted), expected=expected)
    atomic_write_json(out_dir / rec.SUMMARY_FILE, summary)
    return summary


def _memory_to_load(agent: Agent, records: list[dict[str, Any]], task: str, episode: int) -> dict[str, Any]:
    """The task's own memory; agents whose memory is knowledge of the world (Metagent-P's pools,
    `cross_task_memory = True`) start a new task from the latest record of any task."""
    memory = rec.memory_before(records, task, episode)
    if not memory and getattr(agent, "cross_task_memory", False) and records:
        memory = dict(records[-1].get("memory") or {})
    return memory


def _of(records: list[dict[str, Any]], wanted: list[tuple[str, int]]) -> list[dict[str, Any]]:
    keep = set(wanted)
    return [r for r in records if (str(r["task"]), int(r["episode"])) in keep]
