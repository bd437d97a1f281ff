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
The loop and the train driver are pre-training's (`run_loop.RunLoop`, `TrainDriver.task_stacked`;
`adapt.overlap_collect` acts while the train steps run, as `train.overlap_collect` does there);
what differs is the callbacks: the owed steps count from the group's first step (`train_steps_due`),
and a checkpoint and log line follow each step that finished episodes.

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

import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from muse_common.files import RunFileError, append_jsonl, atomic_write_json, read_json_object
from muse_common.records import ADAPT_EPISODE, read_records
from muse_jax import agent as A
from muse_jax import evaluate
from muse_jax.agent_kinds import AGENT_KINDS
from muse_jax.checkpoint import Checkpointer
from muse_jax.competence import agent_steps_per_episode
from muse_jax.config import Config, ConfigError
from muse_jax.envs.metaworld import check_task, configure_gl, make_vector_env
from muse_jax.loops.collect import Collector, episode_record
from muse_jax.loops.jit_cache import memo_jit
from muse_jax.loops.restore import restore_learner
from muse_jax.loops.run_loop import RunLoop, Tick
from muse_jax.loops.train_driver import TrainDriver, train_steps_due
from muse_jax.replay import Replay, pack_episodes, unpack_episodes
from muse_jax.run_log import RunLogger

RECORD_KEYS = ("task", "episode", "success")  # the fields every record has (muse_common.records.ADAPT_EPISODE)


def read_episodes(path: Path, resume: bool = False) -> list[dict[str, Any]]:
    """episodes.jsonl through the one reader of its kind: a record failing the schema stops adapt in one line
    naming file and line; a duplicate (task, episode) is dropped and said; on resume a torn last line is cut."""
    return read_records(path, ADAPT_EPISODE, resume=resume,
                        say=lambda m: print(f"muse-wm: {m}", file=sys.stderr))


def _check_run_file(out: Path, settings: dict[str, Any]) -> None:
    path = out / "adapt.json"
    if path.exists():
        try:
            old = read_json_object(path, "the settings file of an adaptation run", "delete it to start this "
                                   "--logdir afresh with the settings given, or use a new --logdir.")
        except RunFileError as e:
            raise ConfigError(str(e)) from None
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


class TaskBatches:
    """The K tasks' batches for the task-stacked `TrainDriver`: one `sample_batch` per task, stacked
    [K, B, T, ...]; each task's training posteriors go back, row by row, into the replay the row came from."""

    def __init__(self, replays: list[Replay], novels: list[Replay], batch_size: int,
                 novel_fraction: float | None) -> None:
        self.pairs = list(zip(replays, novels, strict=True))
        self.batch_size, self.novel_fraction = batch_size, novel_fraction

    def can_sample(self) -> bool:
        return all(rp.can_sample() or nv.can_sample() for rp, nv in self.pairs)

    def sample(self) -> tuple[dict[str, np.ndarray], tuple[list, ...]]:
        samples, rows = zip(*[sample_batch(rp, nv, self.batch_size, self.novel_fraction) for rp, nv in self.pairs],
                            strict=True)
        return {k: np.stack([b[k] for b in samples]) for k in samples[0]}, rows

    def write_back(self, rows: tuple[list, ...], context: Any) -> None:
        deter, stoch = jax.device_get(context)
        for k, task_rows in enumerate(rows):  # the shared pre-training episodes are read-only: skipped
            write_back_rows(task_rows, deter[k], stoch[k])


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
    problem = task_list_problem(tasks, list(cfg.env.tasks))
    if problem:
        raise ValueError(problem)
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
                       initial=len(read_episodes(records_path, resume=True)))
    rounds = [0]
    try:
        for gi, group in enumerate(groups):
            done = defaultdict(int)
            for x in read_episodes(records_path):
                done[x["task"]] += 1
            if all(done[t] >= n_eps for t in group):
                continue
            finished = _adapt_group(cfg, learner, restored.replay, agent, group, n_eps, out, gi, logger,
                                    rounds, stop_after_rounds)
            if not finished:
                return None
            for t in group:
                recs = [x for x in read_episodes(records_path) if x["task"] == t]
                echo(f"{t}: {sum(x['success'] for x in recs)}/{len(recs)} episodes solved")
    finally:
        logger.close()
    all_records = [x for x in read_episodes(records_path) if x["task"] in tasks]
    return evaluate.write_outputs(out, agent, all_records, cfg.model.competence_quantiles,
                                  agent_steps_per_episode(cfg.env), reading=cfg.model.competence_reading)


def task_list_problem(novel: Sequence[str], trained: Sequence[str]) -> str | None:
    """Why adapting on `novel` after pre-training on `trained` measures nothing the paper measures, or None:
    no novel task (0 episodes, exit 0 before), a task named twice, or a task the checkpoint was trained on
    (not novel). Checked before any episode."""
    if not novel:
        return ("no novel tasks to adapt on (--tasks is empty and the checkpoint's env.novel_tasks is empty); "
                "give --tasks")
    twice = sorted({t for t in novel if list(novel).count(t) > 1})
    if twice:
        return f"novel task(s) {twice} named twice; give each task once"
    seen = sorted(set(novel) & set(trained))
    if seen:
        return (f"task(s) {seen} are pre-training tasks of this checkpoint (env.tasks), not novel ones; adapt "
                "measures adaptation to tasks the model has not seen: give others with --tasks")
    return None


def group_dir(out: Path, group: Sequence[str]) -> Path:
    """Where a task group keeps its checkpoints (adapt.json fixes the grouping of a run)."""
    return out / "tasks" / (group[0] if len(group) == 1 else f"together-{len(group)}-tasks")


def _adapt_group(cfg: Config, learner: A.SplitLearner, pre_replay: dict[str, np.ndarray] | None, agent: str,
                 group: list[str], n_eps: int, out: Path, gi: int, logger: RunLogger, rounds: list[int],
                 stop_after_rounds: int | None) -> bool:
    """Adapt the K tasks of `group` side by side, each from the pre-trained `learner`; False when
    stopped by `stop_after_rounds`."""
    run = _GroupAdaptation(cfg, learner, pre_replay, agent, group, n_eps, out, gi, logger)
    try:
        loop = run.loop(rounds, stop_after_rounds)
        return loop.run(done=lambda _: all(len(run.records[t]) >= n_eps for t in group))
    finally:
        run.collector.close()
        run.ck.close()


class _GroupAdaptation:
    """One task group's adaptation: its replays, envs, stacked learners and train driver, and the
    callbacks the shared `RunLoop` calls after each step (train by `adapt.train_ratio`, record the
    finished episodes, checkpoint then log each round of them)."""

    def __init__(self, cfg: Config, learner: A.SplitLearner, pre_replay: dict[str, np.ndarray] | None, agent: str,
                 group: list[str], n_eps: int, out: Path, gi: int, logger: RunLogger) -> None:
        K, r, seed = len(group), cfg.replay, cfg.train.seed
        self.cfg, self.agent, self.group, self.n_eps, self.out, self.logger = cfg, agent, group, n_eps, out, logger
        self.ck = Checkpointer(group_dir(out, group) / "checkpoints", keep=1)
        replays = [task_replay(r.capacity, r.seq_len, seed + 31 * k, pre_replay, r.context) for k in range(K)]
        frac = cfg.adapt.novel_fraction  # None: the new episodes join `replays` (uniform); else their own replay
        novels = [Replay(r.capacity, r.seq_len, seed + 31 * k + 7, context=r.context) for k in range(K)]
        self.batches = TaskBatches(replays, novels, r.batch_size, frac)
        self.own = novels if frac is not None else replays
        self.new_eps: list[list[dict[str, np.ndarray]]] = [[] for _ in range(K)]
        self.records: dict[str, list[dict[str, Any]]] = {t: [] for t in group}
        env_steps, train_steps, state = 0, 0, stack_states(learner.state, K)
        if self.ck.latest_step() is not None:
            state, env_steps, train_steps = self._restore(state)
        policy = memo_jit("task_policy", learner.graphdef, agent, lambda: make_task_policy(learner.graphdef, agent))
        carry = A.initial_carry(learner.graphdef, learner.state, K)
        make_venv = lambda s: make_vector_env(group, [0] * K, cfg.env, s, K)
        n_done = sum(len(v) for v in self.records.values())
        self.collector = Collector(make_venv, policy, carry, list(group), seed + 100 * n_done + 17)
        self.driver = TrainDriver.task_stacked(learner.graphdef, state, train_steps,
                                               jax.random.key(seed + 1000 * (gi + 1)), K)
        self.env_steps0 = env_steps
        # each task's current episode began at the end of its previous one (all tasks run in lockstep)
        self.starts = {t: (self.records[t][-1]["env_step_end"], self.records[t][-1]["train_step_end"])
                       if self.records[t] else (env_steps, train_steps) for t in group}
        self.new: list[dict[str, Any]] = []  # records of the episodes finished in the current step
        self.last: dict[str, float] = {}

    def _restore(self, state: Any) -> tuple[Any, int, int]:
        """The group's checkpoint: stacked states, each task's new episodes back into its replay, records
        missing from episodes.jsonl appended (exactly-once, see the module docstring)."""
        state, saved, meta = self.ck.restore(state_template=state)
        self.records = meta["records"]
        for k in range(len(self.group)):
            mine = {key.split("_", 1)[1]: v for key, v in (saved or {}).items() if key.split("_", 1)[0] == f"t{k}"}
            if mine:
                self.new_eps[k] = unpack_episodes(mine)
                for ep in self.new_eps[k]:
                    self.own[k].add_episode(ep)
        records_path = self.out / "episodes.jsonl"
        seen = {(x["task"], x["episode"]) for x in read_episodes(records_path)}
        for t in self.group:
            for rec in self.records[t]:
                if (t, rec["episode"]) not in seen:
                    append_jsonl(records_path, rec)
                    self.logger.advance(1)
        return state, int(meta["env_steps"]), int(meta["train_steps"])

    def loop(self, rounds: list[int], stop_after_rounds: int | None) -> RunLoop:
        """The shared loop with adaptation's callbacks; `rounds` counts checkpointed rounds over groups."""
        loop = RunLoop(self.collector, lambda _: (self.driver.state, self.agent), self.env_steps0, 1,
                       overlap=self.cfg.adapt.overlap_collect)
        loop.on_step(self.train)
        loop.on_step(self.record_episodes)

        def save_round(tick: Tick) -> None:
            self.save_and_log(tick)
            rounds[0] += 1
            if stop_after_rounds is not None and rounds[0] >= stop_after_rounds:
                loop.stop()

        loop.on_step(save_round, clock=lambda tick: bool(self.new))
        return loop

    def train(self, tick: Tick) -> None:
        """The gradient steps owed at this task step: `adapt.train_ratio` counted from the group's first step."""
        r = self.cfg.replay
        self.driver.train(self.batches, train_steps_due(tick.env_step, self.cfg.adapt.train_ratio, r.batch_size,
                                                        r.seq_len))

    def record_episodes(self, tick: Tick) -> None:
        """Each finished episode's record (with its sequencing counters) and its data into its task's replay."""
        env_steps, train_steps = tick.env_step, self.driver.train_steps
        self.new = []
        for ep in tick.episodes:
            t = ep.task
            k = self.group.index(t)
            if len(self.records[t]) >= self.n_eps:
                continue  # cannot happen with equal-length episodes; never recorded
            s_env, s_train = self.starts[t]
            rec = episode_record(self.agent, t, len(self.records[t]), ep, {
                "env_step_start": s_env, "env_step_end": env_steps,
                "train_step_start": s_train, "train_step_end": train_steps})
            self.starts[t] = (env_steps, train_steps)
            data = ep.replay_data(self.cfg.model.competence_reading)
            self.own[k].add_episode(data)
            self.new_eps[k].append(data)
            self.records[t] = self.records[t] + [rec]
            self.new.append(rec)
        if tick.faults:  # envs rebuilt, partial episodes dropped: all restart now
            self.starts = {t: (env_steps, train_steps) for t in self.group}
        for fault in tick.faults:
            append_jsonl(self.out / "faults.jsonl", {"tasks": self.group, "env_steps": env_steps, **fault})

    def save_and_log(self, tick: Tick) -> None:
        """Checkpoint the round, then append its records to episodes.jsonl and log it (exactly-once order)."""
        self.last = self.driver.metrics.read() or self.last  # raises on a NaN/inf loss before anything is saved
        saved = {f"t{k}_{key_}": v for k in range(len(self.group)) if self.new_eps[k]
                 for key_, v in pack_episodes(self.new_eps[k]).items()}
        train_steps = self.driver.train_steps
        self.ck.save(sum(len(v) for v in self.records.values()), self.driver.state, replay=saved,
                     meta={"records": self.records, "env_steps": tick.env_step, "train_steps": train_steps,
                           "tasks": self.group})
        for rec in self.new:
            append_jsonl(self.out / "episodes.jsonl", rec)
        self.logger.advance(len(self.new), task=",".join(sorted({x["task"] for x in self.new})))
        so_far = [x for t in self.group for x in self.records[t]]
        self.logger.write({"step": train_steps, "env_steps": tick.env_step,
                           "episodes_done": min(len(v) for v in self.records.values()),
                           "episode_index": max(x["episode"] for x in self.new),
                           "success_rate": float(np.mean([x["success"] for x in self.new])), **self.last,
                           **evaluate.self_awareness(self.agent, so_far, self.cfg.model.competence_quantiles,
                                                     agent_steps_per_episode(self.cfg.env),
                                                     reading=self.cfg.model.competence_reading)})
