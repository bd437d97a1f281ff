"""Adaptation to novel tasks (MUSE §3.2.1): "adapted to one novel task at a time, starting with
pre-deployment trained weights, for 20 episodes per task", with the pre-training replay retained.

Per task the protocol is sequential: one env, episode k+1 starts only after episode k ended and the
training steps it owes (adapt.train_ratio, counted in that task's agent steps) have run; exactly
`episodes` episodes are collected, none thrown away. Throughput comes from running the *tasks* side
by side (`adapt.parallel_tasks`, default): the K task learners are stacked on a leading task axis
(each a copy of the pre-trained state), each task has its own replay (the pre-training episodes,
shared read-only, plus its own new episodes), and the policy step and the train step are
`jax.vmap`ped over the task axis in one jitted program, one env per task. With
`adapt.parallel_tasks: false` (`--one-task-at-a-time`) the same code runs groups of one task.
Tasks never share data or weights, so the two settings run the same experiment.

MUSE acts with self-regulation (policy mode "muse") and its signal is the competence sum; Dreamer
acts with its actor (mode "dreamer") and its signal is the critic value divided by the return scale
(§3.2.2 "with reward normalization"). Every episode's record in OUT/episodes.jsonl carries its
per-task env-step counters (`env_step_start`, `env_step_end`) and train-step counters
(`train_step_start`, `train_step_end`), so the sequencing can be checked from the file.

Exactly-once resume: whenever episodes finish, one checkpoint per task group (`group_dir`:
OUT/tasks/<task> for a group of one, OUT/tasks/together-<K>-tasks otherwise) stores the stacked
adapted states, each task's new episodes and, in its meta, all episode records and counters; only
then are the records appended to episodes.jsonl. On restart the checkpoint is restored and its
records missing from episodes.jsonl are appended, so a kill at any point neither loses nor repeats
an episode, and finished groups are skipped.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from muse_common.files import append_jsonl, atomic_write_json, read_jsonl
from muse_jax import agent as A
from muse_jax import evaluate
from muse_jax.agent_kinds import AGENT_KINDS
from muse_jax.checkpoint import Checkpointer
from muse_jax.competence import agent_steps_per_episode
from muse_jax.config import Config, ConfigError
from muse_jax.envs.metaworld import check_task, configure_gl, make_vector_env
from muse_jax.loops.collect import REGULATION_EFFECT_KEYS, Collector, Episode
from muse_jax.loops.jit_cache import memo_jit
from muse_jax.loops.restore import restore_learner
from muse_jax.loops.train_driver import DeviceMetrics, train_steps_due
from muse_jax.replay import Replay, pack_episodes, unpack_episodes
from muse_jax.run_log import RunLogger

RECORD_KEYS = ("task", "episode", "success")  # an episodes.jsonl line without them is skipped (read_jsonl)


def episode_record(agent: str, task: str, index: int, ep: Episode, counters: dict[str, int] | None = None
                   ) -> dict[str, Any]:
    """One episodes.jsonl line: outcome, step-wise self-awareness signal, and the sequencing counters.

    The record's `time_to_success` (a README field) is the episode's first-success step, -1 if none."""
    if agent == "muse":
        signal = ep.competence_T
    else:
        signal = ep.extra_T.get("value_normalized", ep.value_T)
    rec = {"task": task, "episode": index, "success": ep.success, "time_to_success": ep.first_success_step,
           "length": ep.length, "score": ep.score, "signal": [round(float(x), 5) for x in signal]}
    if agent == "muse" and "quantile" in ep.extra_T:
        rec["quantile"] = [int(x) for x in ep.extra_T["quantile"]]
    if agent == "muse" and "psi1" in ep.extra_T:
        rec["psi1"] = [round(float(x), 5) for x in ep.extra_T["psi1"]]
    for k in REGULATION_EFFECT_KEYS:  # what self-regulation changed, per step (regulation/gradient.py)
        if k in ep.extra_T:
            rec[k] = [round(float(x), 5) for x in ep.extra_T[k]]
    rec.update(counters or {})
    return rec


def _check_run_file(out: Path, settings: dict[str, Any]) -> None:
    path = out / "adapt.json"
    if path.exists():
        try:
            old = json.loads(path.read_bytes())
        except (ValueError, UnicodeDecodeError):
            old = None
        if not isinstance(old, dict):
            raise ConfigError(f"{path} is not the settings file of an adaptation run (not a JSON object); delete it "
                              "to start this --logdir afresh with the settings given, or use a new --logdir.")
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            raise ConfigError(f"{out} holds an adaptation run with other settings ({diff}: {[old.get(k) for k in diff]}"
                              f" vs {[settings[k] for k in diff]}); use a new --logdir.")
    else:
        atomic_write_json(path, settings)


# ----------------------------------------------------------------------------- task-stacked steps


def stack_states(state: Any, k: int) -> Any:
    """K copies of a learner state on a new leading task axis."""
    return jax.tree.map(lambda x: jnp.stack([x] * k), state)


def make_task_policy(graphdef: Any, mode: str) -> Callable:
    """jit(vmap(policy_step)) over the task axis, one env per task, in the Collector's calling convention:
    (state [K..], carry [K..], obs [K..], key, mode) -> (action [K,A], carry [K..], info [K..]).

    The carry looks like any batched carry (env i = task i); inside, each task sees a batch of one."""
    one = lambda st, carry, obs, key: A.policy_step(graphdef, st, carry, obs, key, mode)
    vstep = jax.vmap(one)

    @jax.jit
    def step(state, carry, obs, key):
        k = obs["is_first"].shape[0]
        add = lambda tree: jax.tree.map(lambda x: x[:, None], tree)
        drop = lambda tree: jax.tree.map(lambda x: x[:, 0], tree)
        action, carry, info = vstep(state, add(carry), add(obs), jax.random.split(key, k))
        return action[:, 0], drop(carry), drop(info)

    return lambda state, carry, obs, key, _mode: step(state, carry, obs, key)


def make_task_train_step(graphdef: Any) -> Callable:
    """jit(vmap(train_step)) over the task axis, state donated: (state [K..], batch [K,B,T..], keys [K])."""
    return jax.jit(jax.vmap(lambda st, batch, key: A.train_step(graphdef, st, batch, key)), donate_argnums=0)


def task_replay(capacity: int, seq_len: int, seed: int, pre: dict[str, np.ndarray] | None,
                context: bool = True) -> Replay:
    """A task's replay: the pre-training episodes as views of the shared arrays (no copy), room for its own.
    `context` is `replay.context` (chunks start from the stored latents, as in pre-training)."""
    replay = Replay(capacity, seq_len, seed, context=context)
    for ep in unpack_episodes(pre) if pre is not None else []:
        replay.add_episode(ep, write_back=False)  # shared by every task: their latents stay as pre-training left them
    return replay


def sample_batch(replay: Replay, novel: Replay | None, batch_size: int, novel_fraction: float | None,
                 ) -> tuple[dict[str, np.ndarray], list[tuple[Replay, tuple[dict[str, np.ndarray], int]]]]:
    """One task's adaptation batch (`adapt.novel_fraction`) and, per row, (its replay, its position) for
    `Replay.write_back`: uniform over `replay` (pre-training + new episodes) when the fraction is None;
    else round(f * B) chunks from `novel` (the task's own episodes, once one is long enough) and the rest
    from `replay`, which then holds the pre-training episodes only."""
    def one(rp: Replay, n: int) -> tuple[dict[str, np.ndarray], list]:
        batch = rp.sample(n)
        return batch, [(rp, pos) for pos in rp.last_positions]

    if novel_fraction is None or novel is None:
        return one(replay, batch_size)
    n_new = int(round(novel_fraction * batch_size)) if novel.can_sample() else 0
    if n_new == 0:
        return one(replay, batch_size)
    if n_new == batch_size or not replay.can_sample():
        return one(novel, batch_size)
    (a, pa), (b, pb) = one(replay, batch_size - n_new), one(novel, n_new)
    return {k: np.concatenate([a[k], b[k]]) for k in a if k in b}, pa + pb  # latents only where both have them


def write_back_rows(rows: list[tuple[Replay, tuple[dict[str, np.ndarray], int]]], deter: np.ndarray,
                    stoch: np.ndarray) -> None:
    """Write one task's training posteriors [B, T, ...] back, row by row, into the replay each row came from."""
    for b, (rp, pos) in enumerate(rows):
        rp.write_back([pos], deter[b : b + 1], stoch[b : b + 1])


# ----------------------------------------------------------------------------- the loop


def adapt(checkpoint: str | Path, agent: str, logdir: str | Path, *, tasks: Sequence[str] | None = None,
          episodes: int | None = None, overrides: dict[str, Any] | None = None,
          echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Adapt on each novel task and write OUT/results.json, roc.png, time_to_success.png, table.md."""
    return _adapt(checkpoint, agent, logdir, tasks=tasks, episodes=episodes, overrides=overrides, echo=echo)


def _adapt(checkpoint: str | Path, agent: str, logdir: str | Path, *, tasks: Sequence[str] | None = None,
           episodes: int | None = None, overrides: dict[str, Any] | None = None,
           stop_after_rounds: int | None = None, echo: Callable[[str], None] = print) -> dict[str, Any] | None:
    """`adapt`, with the fault tests' hook: `stop_after_rounds` stops early (as a kill would) after that many
    checkpointed rounds; returns None then.
    """
    if agent not in AGENT_KINDS:
        raise ValueError(f"--agent {agent!r} is unknown; use one of {list(AGENT_KINDS)}.")
    out = Path(logdir)
    restored = restore_learner(checkpoint, agent=agent, overrides=overrides, with_replay=True)
    cfg, learner, step = restored.cfg, restored.learner, restored.step
    if cfg.env.suite != "metaworld":  # novel-task adaptation is MUSE §3.2.1's Meta-World protocol
        raise ValueError(f"{checkpoint} was pre-trained on env.suite={cfg.env.suite}; muse-wm adapt runs Meta-World "
                         "only (novel tasks with a success signal). Use a Meta-World pretrain checkpoint.")
    tasks = list(tasks or cfg.env.novel_tasks)
    if cfg.env.image:
        configure_gl(cfg.env.render_backend)  # before check_task imports mujoco
    for t in tasks:
        check_task(t)
    n_eps = int(episodes or cfg.adapt.episodes)
    if n_eps < 1:
        raise ValueError(f"--episodes {n_eps}: adapt at least one episode per task.")
    parallel = cfg.adapt.parallel_tasks
    _check_run_file(out, {"agent": agent, "checkpoint": str(Path(checkpoint).resolve()), "step": step,
                          "tasks": tasks, "episodes": n_eps, "parallel_tasks": parallel})
    records_path = out / "episodes.jsonl"
    groups = [tasks] if parallel else [[t] for t in tasks]
    logger = RunLogger(out, total=len(tasks) * n_eps, desc=f"adapt {agent}", unit="episode",
                       initial=sum(1 for _ in read_jsonl(records_path, RECORD_KEYS)))
    rounds = [0]
    try:
        for gi, group in enumerate(groups):
            done = defaultdict(int)
            for x in read_jsonl(records_path, RECORD_KEYS):
                done[x["task"]] += 1
            if all(done[t] >= n_eps for t in group):
                continue
            finished = _adapt_group(cfg, learner, restored.replay, agent, group, n_eps, out, gi, logger,
                                    rounds, stop_after_rounds)
            if not finished:
                return None
            for t in group:
                recs = [x for x in read_jsonl(records_path, RECORD_KEYS) if x["task"] == t]
                echo(f"{t}: {sum(x['success'] for x in recs)}/{len(recs)} episodes solved")
    finally:
        logger.close()
    all_records = [x for x in read_jsonl(records_path, RECORD_KEYS) if x["task"] in tasks]
    return evaluate.write_outputs(out, agent, all_records, cfg.model.competence_quantiles,
                                  agent_steps_per_episode(cfg.env))


def group_dir(out: Path, group: Sequence[str]) -> Path:
    """Where a task group keeps its checkpoints (adapt.json fixes the grouping of a run)."""
    return out / "tasks" / (group[0] if len(group) == 1 else f"together-{len(group)}-tasks")


def _adapt_group(cfg: Config, learner: A.SplitLearner, pre_replay: dict[str, np.ndarray] | None, agent: str,
                 group: list[str], n_eps: int, out: Path, gi: int, logger: RunLogger, rounds: list[int],
                 stop_after_rounds: int | None) -> bool:
    """Adapt the K tasks of `group` side by side, each from the pre-trained `learner`; False when
    stopped by `stop_after_rounds`."""
    K, r, seed = len(group), cfg.replay, cfg.train.seed
    records_path = out / "episodes.jsonl"
    ck = Checkpointer(group_dir(out, group) / "checkpoints", keep=1)
    replays = [task_replay(r.capacity, r.seq_len, seed + 31 * k, pre_replay, r.context) for k in range(K)]
    frac = cfg.adapt.novel_fraction  # None: the new episodes join `replays` (uniform); else their own replay
    novels = [Replay(r.capacity, r.seq_len, seed + 31 * k + 7, context=r.context) for k in range(K)]
    own = novels if frac is not None else replays
    new_eps: list[list[dict[str, np.ndarray]]] = [[] for _ in range(K)]
    records: dict[str, list[dict[str, Any]]] = {t: [] for t in group}
    env_steps, train_steps = 0, 0
    state = stack_states(learner.state, K)
    if ck.latest_step() is not None:
        state, saved, meta = ck.restore(state_template=state)
        records, env_steps, train_steps = meta["records"], int(meta["env_steps"]), int(meta["train_steps"])
        for k in range(K):
            mine = {key.split("_", 1)[1]: v for key, v in (saved or {}).items() if key.split("_", 1)[0] == f"t{k}"}
            if mine:
                new_eps[k] = unpack_episodes(mine)
                for ep in new_eps[k]:
                    own[k].add_episode(ep)
        seen = {(x["task"], x["episode"]) for x in read_jsonl(records_path, RECORD_KEYS)}
        for t in group:
            for rec in records[t]:
                if (t, rec["episode"]) not in seen:
                    append_jsonl(records_path, rec)
                    logger.advance(1)
    policy = memo_jit("task_policy", learner.graphdef, agent, lambda: make_task_policy(learner.graphdef, agent))
    train_fn = memo_jit("task_train", learner.graphdef, None, lambda: make_task_train_step(learner.graphdef))
    carry = A.initial_carry(learner.graphdef, learner.state, K)
    make_venv = lambda s: make_vector_env(group, [0] * K, cfg.env, s, K)
    n_done = sum(len(v) for v in records.values())
    collector = Collector(make_venv, policy, carry, list(group), seed + 100 * n_done + 17)
    key = jax.random.key(seed + 1000 * (gi + 1))
    # each task's current episode began at the end of its previous one (all tasks run in lockstep)
    starts = {t: (records[t][-1]["env_step_end"], records[t][-1]["train_step_end"]) if records[t]
              else (env_steps, train_steps) for t in group}
    n_faults, metrics, last = 0, DeviceMetrics(), {}
    try:
        while any(len(records[t]) < n_eps for t in group):
            finished = collector.step(state, agent)
            env_steps += 1
            due = train_steps_due(env_steps, cfg.adapt.train_ratio, r.batch_size, r.seq_len)
            pairs = list(zip(replays, novels, strict=True))
            while train_steps < due and all(rp.can_sample() or nv.can_sample() for rp, nv in pairs):
                # each task from its own replay
                samples, rows = zip(*[sample_batch(rp, nv, r.batch_size, frac) for rp, nv in pairs], strict=True)
                batch = {k_: np.stack([b[k_] for b in samples]) for k_ in samples[0]}
                keys = jax.random.split(jax.random.fold_in(key, train_steps), K)
                state, step_metrics = train_fn(state, batch, keys)
                step_metrics, context = A.pop_context(step_metrics)
                if context is not None:  # write the posteriors back into each task's own new episodes
                    deter, stoch = jax.device_get(context)
                    for k_ in range(K):  # the shared pre-training episodes are read-only: skipped
                        write_back_rows(rows[k_], deter[k_], stoch[k_])
                metrics.add(step_metrics, train_steps)  # [K] per metric, kept on the device
                train_steps += 1
            new = []
            for ep in finished:
                t = ep.task
                k = group.index(t)
                if len(records[t]) >= n_eps:
                    continue  # cannot happen with equal-length episodes; never recorded
                s_env, s_train = starts[t]
                rec = episode_record(agent, t, len(records[t]), ep, {
                    "env_step_start": s_env, "env_step_end": env_steps,
                    "train_step_start": s_train, "train_step_end": train_steps})
                starts[t] = (env_steps, train_steps)
                data = ep.replay_data()
                own[k].add_episode(data)
                new_eps[k].append(data)
                records[t] = records[t] + [rec]
                new.append(rec)
            if len(collector.faults) > n_faults:  # envs rebuilt, partial episodes dropped: all restart now
                starts = {t: (env_steps, train_steps) for t in group}
            for fault in collector.faults[n_faults:]:
                append_jsonl(out / "faults.jsonl", {"tasks": group, "env_steps": env_steps, **fault})
            n_faults = len(collector.faults)
            if not new:
                continue
            last = metrics.read() or last  # raises on a NaN/inf loss before anything is saved
            saved = {f"t{k}_{key_}": v for k in range(K) if new_eps[k]
                     for key_, v in pack_episodes(new_eps[k]).items()}
            ck.save(sum(len(v) for v in records.values()), state, replay=saved,
                    meta={"records": records, "env_steps": env_steps, "train_steps": train_steps, "tasks": group})
            for rec in new:
                append_jsonl(records_path, rec)
            logger.advance(len(new), task=",".join(sorted({x["task"] for x in new})))
            logger.write({"step": train_steps, "env_steps": env_steps,
                          "episodes_done": min(len(v) for v in records.values()),
                          "success_rate": float(np.mean([x["success"] for x in new])), **last})
            rounds[0] += 1
            if stop_after_rounds is not None and rounds[0] >= stop_after_rounds:
                return False
    finally:
        collector.close()
        ck.close()
    return True

