"""Smoke pre-training and adaptation on the real Meta-World env, with resume and NaN handling.

One module-scoped run is shared: pretrain to a checkpoint, "kill", resume to the end, then adapt
with a stop after the first round and a restart. Compiled steps are reused in-process (memo_jit).
"""

from __future__ import annotations

import json
import math
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import pytest

from muse_common.files import read_jsonl
from muse_jax.checkpoint import Checkpointer
from muse_jax.config import ConfigError, load_config
from muse_jax.errors import CheckpointMismatchError, NonFiniteLossError
from muse_jax.loops import adapt as adapt_mod
from muse_jax.loops import pretrain as pre
from muse_jax.loops.train_driver import DeviceMetrics, TrainRatio, check_finite, train_steps_due

pytestmark = pytest.mark.slow

TASK = "coffee-button-v3"


@pytest.fixture(scope="module")
def cfg():
    return load_config("smoke")


@pytest.fixture(scope="module")
def run(tmp_path_factory, cfg):
    logdir = tmp_path_factory.mktemp("smoke")
    first = pre._pretrain(cfg, logdir, stop_at=200, echo=lambda s: None)
    lines_first = list(read_jsonl(logdir / "metrics.jsonl"))
    second = pre.pretrain(cfg, logdir, echo=lambda s: None)
    return logdir, first, second, lines_first


def test_pretrain_resumes_with_counters_continuing(run, cfg):
    logdir, first, second, lines_first = run
    assert first["counters"]["env_steps"] == 200
    assert second["counters"]["env_steps"] == cfg.train.env_steps
    r = cfg.replay
    # DreamerV3's ratio rule: training starts once replay holds one batch and follows the ratio from there,
    # so there is no burst for the env steps before it (fewer steps than counting from env step 0)
    ratio = cfg.train.train_ratio / (r.batch_size * r.seq_len)
    steps, prev = second["counters"]["train_steps"], second["counters"]["train_ratio_prev"]
    start = prev - (steps - 1) / ratio  # the env step of the first train step
    # B * T = 64 env steps collected, then the first finished episodes (51 steps each, 2 envs) to sample from
    first_round = (cfg.env.max_episode_steps + 1) * cfg.env.num_envs
    assert start == max(r.batch_size * r.seq_len, first_round), start
    assert steps == 1 + int((cfg.train.env_steps - start) * ratio)
    assert steps < train_steps_due(cfg.train.env_steps, cfg.train.train_ratio, r.batch_size, r.seq_len)
    lines = list(read_jsonl(logdir / "metrics.jsonl"))
    env_steps = [x["env_steps"] for x in lines]
    assert env_steps == sorted(env_steps) and len(set(env_steps)) == len(env_steps), env_steps
    assert len(lines) > len(lines_first)
    ck = Checkpointer(logdir / "checkpoints", read_only=True)
    assert ck.latest_step() == cfg.train.env_steps
    _, replay, meta = ck.restore()
    partial = ck.restore_partial()
    ck.close()
    # 2 envs x 51-step episodes: 2 finished before the stop at 200, 2 after; the 2 unfinished at the stop
    # were saved with its checkpoint and the resume added them, cut there (no env step lost)
    assert meta["counters"]["episodes"] == 4 and meta["counters"]["episodes_cut"] == 2
    assert len(replay["episode_lengths"]) == 6
    assert replay["episode_lengths"].sum() + partial["episode_lengths"].sum() == cfg.train.env_steps
    assert (logdir / "tb").is_dir() and any((logdir / "tb").iterdir())


def test_metrics_lines_are_finite_and_in_range(run):
    logdir = run[0]
    lines = list(read_jsonl(logdir / "metrics.jsonl"))
    trained = [x for x in lines if "loss/total" in x]
    assert trained, "no line with losses"
    for x in trained:
        for key in ("step", "env_steps", "loss/model", "loss/competence", "loss/reward", "env_steps_per_s",
                    "train_steps_per_s"):
            assert math.isfinite(x[key]), (key, x[key])
        assert x["env_steps_per_s"] > 0
        if "success_rate" in x:
            assert 0.0 <= x["success_rate"] <= 1.0
    # self-awareness on the agent's own recent episodes is logged once episodes have finished
    with_sa = [x for x in lines if "sa/episodes" in x]
    assert with_sa, "no sa/* metrics in metrics.jsonl"
    for x in with_sa:
        assert 1 <= x["sa/episodes"] <= 64 and 0 <= x["sa/successes"] <= x["sa/episodes"]
        assert x["sa/outcome_classes"] in (1.0, 2.0)
        assert x["sa/accuracy"] is None or 0.0 <= x["sa/accuracy"] <= 1.0
        assert 0.0 <= x["sa/quantile_accuracy"] <= 1.0
        if x["sa/outcome_classes"] == 1.0:
            assert x["sa/auroc"] is None  # undefined with one outcome class, never a made-up number
        assert any(k.startswith("sa/auroc/") for k in x)  # per task


def check_sequential(records: list[dict], cfg, episodes: int) -> None:
    """From episodes.jsonl alone: per task, episodes 0..E-1, each started after the previous one ended
    (per-task env-step counters), with exactly the owed training steps run in between."""
    r = cfg.replay
    tasks = list(dict.fromkeys(x["task"] for x in records))
    for task in tasks:
        mine = sorted((x for x in records if x["task"] == task), key=lambda x: x["episode"])
        assert [x["episode"] for x in mine] == list(range(episodes)), (task, [x["episode"] for x in mine])
        assert mine[0]["env_step_start"] == 0 and mine[0]["train_step_start"] == 0
        for x in mine:
            assert x["env_step_end"] - x["env_step_start"] == x["length"]  # one env, steps counted once
            assert x["train_step_end"] == train_steps_due(x["env_step_end"], cfg.adapt.train_ratio,
                                                              r.batch_size, r.seq_len)
            assert x["train_step_end"] > x["train_step_start"]
        for prev, nxt in zip(mine, mine[1:], strict=False):
            assert nxt["env_step_start"] == prev["env_step_end"]
            assert nxt["train_step_start"] == prev["train_step_end"]


def test_adapt_end_to_end_with_exactly_once_resume(run, cfg, tmp_path):
    """Two novel tasks side by side (vmapped), 3 sequential episodes each, killed after the first round."""
    logdir = run[0]
    out = tmp_path / "adapt-muse"
    tasks = [TASK, "plate-slide-v3"]
    assert adapt_mod._adapt(logdir, "muse", out, tasks=tasks, episodes=3, stop_after_rounds=1,
                           echo=lambda s: None) is None
    first = list(read_jsonl(out / "episodes.jsonl"))
    assert sorted((r["task"], r["episode"]) for r in first) == sorted((t, 0) for t in tasks)
    assert not (out / "results.json").exists()
    res = adapt_mod.adapt(logdir, "muse", out, tasks=tasks, episodes=3, echo=lambda s: None)
    records = list(read_jsonl(out / "episodes.jsonl"))
    assert len(records) == 6
    check_sequential(records, cfg, 3)
    # the shared loop's adaptation clock: for the budget of 3 episodes per task, the group ran exactly the
    # steps the ratio owes from its first step (no start rule), and logged one line per round
    ck = Checkpointer(adapt_mod.group_dir(out, tasks) / "checkpoints", read_only=True)
    _, _, meta = ck.restore()
    ck.close()
    r_ = cfg.replay
    assert meta["env_steps"] == sum(x["length"] for x in records if x["task"] == tasks[0])
    assert meta["train_steps"] == train_steps_due(meta["env_steps"], cfg.adapt.train_ratio, r_.batch_size, r_.seq_len)
    adapt_lines = list(read_jsonl(out / "metrics.jsonl"))
    assert [x["step"] for x in adapt_lines] == sorted({x["train_step_end"] for x in records})
    assert [x["episode_index"] for x in adapt_lines] == [0, 1, 2]  # self-awareness per adaptation episode
    assert [x["sa/episodes"] for x in adapt_lines] == [2.0, 4.0, 6.0]
    L = cfg.env.max_episode_steps
    for r in records:
        assert len(r["signal"]) == L + 1 and len(r["quantile"]) == L + 1 and len(r["psi1"]) == L + 1
        assert len(r["regulation_action_change"]) == len(r["regulation_ascent_state_change"]) == L + 1
        assert all(0.0 <= s <= cfg.model.competence_quantiles for s in r["signal"])
        assert r["time_to_success"] == -1 or (r["success"] and 0 <= r["time_to_success"] <= L)
    saved = json.loads((out / "results.json").read_text())
    assert saved == json.loads(json.dumps(res))
    for key in ("agent", "sa_accuracy", "sa_auroc", "sa_quantile_accuracy", "success_rate", "mean_time_to_success",
                "tasks"):
        assert key in saved
    assert saved["agent"] == "muse" and saved["episodes"] == 6
    assert [t["task"] for t in saved["tasks"]] == tasks and saved["tasks"][0]["episodes"] == 3
    assert 0.0 <= saved["success_rate"] <= 1.0 and 0.0 <= saved["sa_quantile_accuracy"] <= 1.0
    assert saved["sa_accuracy"] is not None and 0.0 <= saved["sa_accuracy"] <= 1.0
    assert saved["sa_accuracy_rule"] == "psi_1 > 1/2" and 0.0 <= saved["sa_accuracy_n_half"] <= 1.0
    assert saved["regulation_state_change"] > 0 and saved["regulation_action_change"] >= 0  # Algorithm 1 ran
    assert saved["sa_auroc"] is None or 0.0 <= saved["sa_auroc"] <= 1.0
    assert [h["half"] for h in saved["sa_by_episode_index"]] == ["early", "late"]
    assert [h["episodes"] for h in saved["sa_by_episode_index"]] == [2, 4]  # episodes 0 | 1-2 of each task
    assert saved["regulation_grad_norm"] >= 0 and 0 <= saved["regulation_actor_mean_abs"] <= 1
    for name in ("roc.png", "time_to_success.png", "table.md", "quantiles.png"):
        assert (out / name).stat().st_size > 0
    # a finished run restarted does nothing more
    adapt_mod.adapt(logdir, "muse", out, tasks=tasks, episodes=3, echo=lambda s: None)
    assert len(list(read_jsonl(out / "episodes.jsonl"))) == 6
    with pytest.raises(ConfigError, match="other settings"):
        adapt_mod.adapt(logdir, "muse", out, tasks=tasks, episodes=4, echo=lambda s: None)


def test_adapt_with_overlap_collect_keeps_the_protocol_and_acts_one_train_call_behind(run, cfg, tmp_path,
                                                                                     loop_overlaps):
    """`adapt.overlap_collect`: the loop acts while the train steps run. The episodes and their counters are the
    protocol's (check_sequential), the first step acts with the pre-trained weights in both settings, and the
    later steps act with weights one train call staler, so the competence signal they read differs."""
    seen = loop_overlaps(adapt_mod)
    tasks = [TASK, "plate-slide-v3"]  # the shapes of the test above: its compiled programs are reused
    records = {}
    for on in (False, True):
        out = tmp_path / f"overlap-{on}"
        adapt_mod.adapt(run[0], "muse", out, tasks=tasks, episodes=1, overrides={"adapt.overlap_collect": on},
                        echo=lambda s: None)
        records[on] = sorted(read_jsonl(out / "episodes.jsonl"), key=lambda x: x["task"])
        check_sequential(records[on], cfg, 1)
    assert seen == [False, True]
    serial, overlapped = records[False], records[True]
    assert [x["train_step_end"] for x in serial] == [x["train_step_end"] for x in overlapped]
    assert all(a["signal"][0] == b["signal"][0] for a, b in zip(serial, overlapped, strict=True))
    assert any(a["signal"] != b["signal"] for a, b in zip(serial, overlapped, strict=True))


def test_dreamer_pretrain_has_no_competence_params_and_adapt_refuses_mismatch(run, cfg, tmp_path):
    dreamer_run = tmp_path / "dreamer"
    # the random prefill is enough to write a checkpoint of the Dreamer model
    pre._pretrain(cfg.replace({"agent": "dreamer"}), dreamer_run, stop_at=cfg.train.prefill, echo=lambda s: None)
    params = {}
    for path, kind in ((run[0], "muse"), (dreamer_run, "dreamer")):
        ck = Checkpointer(path / "checkpoints", read_only=True)
        state, _, meta = ck.restore()
        ck.close()
        assert meta["agent"] == kind and meta["config"]["agent"] == kind
        params[kind] = json.dumps(jax_paths(state))
    assert "competence_head" in params["muse"] and "competence" not in params["dreamer"]
    with pytest.raises(CheckpointMismatchError, match=r"pretrain --agent muse`.*holds a dreamer agent"):
        adapt_mod.adapt(dreamer_run, "muse", tmp_path / "a", tasks=[TASK], episodes=1, echo=lambda s: None)
    with pytest.raises(CheckpointMismatchError, match=r"pretrain --agent dreamer`.*holds a muse agent"):
        adapt_mod.adapt(run[0], "dreamer", tmp_path / "b", tasks=[TASK], episodes=1, echo=lambda s: None)


def jax_paths(tree) -> list[str]:
    import jax

    return ["/".join(str(k) for k in p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def test_nan_loss_stops_with_name_and_keeps_last_good_checkpoint(run, cfg, tmp_path, monkeypatch):
    """Same config as the shared run (compiled steps reused); from train step 110 (after the step-200
    save) the reward loss is NaN on the device. It is read at the next log point (env step 300), which
    names the loss and the first step it was NaN at, and nothing is saved after it."""
    logdir = tmp_path / "nan"
    real_add = DeviceMetrics.add

    def poisoned(self, metrics, step):
        if step >= 110:
            metrics = {**metrics, "loss/reward": metrics["loss/reward"] * float("nan")}
        real_add(self, metrics, step)

    monkeypatch.setattr(DeviceMetrics, "add", poisoned)
    with pytest.raises(NonFiniteLossError, match=r"^loss/reward is nan at train step 110;"):
        pre.pretrain(cfg, logdir, echo=lambda s: None)
    ck = Checkpointer(logdir / "checkpoints", read_only=True)
    assert ck.all_steps() == [cfg.train.save_every]
    ck.close()


def test_resume_refuses_another_config(run, cfg):
    units = cfg.model.units
    with pytest.raises(ConfigError, match=rf"another config \(model.units is {units} there, 8 here\); to resume it, "
                                          rf"give the run's values \(--set model.units={units}\)"):
        pre.pretrain(cfg.replace({"model.units": 8}), run[0], echo=lambda s: None)


def test_check_finite_and_train_ratio_units():
    check_finite({"loss/a": 1.0, "x": 2.0}, 0)
    with pytest.raises(NonFiniteLossError, match="loss/b"):
        check_finite({"loss/a": 1.0, "loss/b": np.inf}, 7)
    assert train_steps_due(1000, 512, 16, 64) == 500


def test_train_ratio_starts_with_one_step_then_follows_the_ratio():
    """elements.when.Ratio as dreamerv3's train loop uses it: 1 at the first call, then the ratio, no burst."""
    sched = TrainRatio(512, 16, 64)  # 0.5 grad steps per env step
    assert not sched.started
    assert sched(4000) == 1  # replay first holds a batch at env step 4000: one step, not 2000 owed ones
    owed = [sched(4000 + 4 * i) for i in range(1, 11)]
    assert owed == [2] * 10 and sched.prev == 4040
    resumed = TrainRatio(512, 16, 64, prev=sched.prev)  # the clock comes back from the checkpoint
    assert resumed.started and resumed(4043) == 1 and resumed(4044) == 1
    assert TrainRatio(16, 4, 16)(5) == 1
    assert pre.replay_megabytes(load_config("paper")) > 20_000  # 2M image steps need tens of GB


def test_collector_restarts_crashed_envs_and_records_the_reason(cfg):
    """A MuJoCo env raising mid-episode: envs rebuilt, partial episodes dropped, reason kept, run goes on."""
    import gymnasium as gym

    from muse_jax.envs.metaworld import make_env
    from muse_jax.loops.collect import Collector

    env_cfg = cfg.replace({"env.max_episode_steps": 6}).env
    calls = {"n": 0}

    class Crashing(gym.Wrapper):
        def step(self, action):
            raise RuntimeError("mujoco exploded")

    def make_venv(seed):
        calls["n"] += 1
        crash = calls["n"] == 1
        fns = [lambda: Crashing(make_env("reach-v3", 1, env_cfg, seed)) if crash else make_env("reach-v3", 1, env_cfg,
                                                                                                 seed)]
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)

    def policy(state, carry, obs, key, mode):  # a test double: zeros, fixed signals
        n = len(obs["is_first"])
        return np.zeros((n, 4), np.float32), carry, {"competence": np.full(n, 2.0), "value": np.zeros(n)}

    col = Collector(make_venv, policy, None, ["reach-v3"], seed=0)
    finished = []
    for _ in range(10):
        finished += col.step(None, "dreamer")
    col.close()
    assert calls["n"] == 2
    assert len(col.faults) == 1 and "mujoco exploded" in col.faults[0]["reason"]
    assert len(finished) == 1 and finished[0].length == 7 and finished[0].data["is_first"][0]


def test_image_episodes_flow_into_replay_batches(cfg):
    """64x64 RGB + proprio + task id from the real renderer reach the replay batch in the agreed layout."""
    from muse_jax.envs.metaworld import make_vector_env
    from muse_jax.loops.collect import Collector
    from muse_jax.replay import Replay

    env_cfg = cfg.replace({"env.image": True, "env.max_episode_steps": 8}).env

    def policy(state, carry, obs, key, mode):  # a test double standing in for the agent
        assert obs["image"].dtype == np.uint8 and "success" not in obs
        n = len(obs["is_first"])
        return np.full((n, 4), 0.5, np.float32), carry, {"competence": np.zeros(n), "value": np.zeros(n)}

    col = Collector(lambda s: make_vector_env(["push-v3", "reach-v3"], [1, 2], env_cfg, s), policy, None,
                    ["push-v3", "reach-v3"], seed=0)
    replay = Replay(capacity=1000, seq_len=4)
    for _ in range(9):
        for ep in col.step(None, "dreamer"):
            replay.add_episode(ep.data, ep.success_T)
    col.close()
    assert replay.num_episodes == 2
    b = replay.sample(3)
    assert b["image"].shape == (3, 4, 64, 64, 3) and b["image"].dtype == np.uint8
    assert b["proprio"].shape == (3, 4, 39) and b["task_id"].dtype == np.int32
    assert set(np.unique(b["task_id"])) <= {1, 2}
    first = replay.state_dict()
    np.testing.assert_array_equal(first["action"][0], 0.0)  # no action precedes an episode's first step
    np.testing.assert_array_equal(first["action"][1], 0.5)


@pytest.mark.long  # test_replay.py pins the online queue
def test_online_replay_puts_fresh_chunks_into_pretraining_batches(cfg, tmp_path, monkeypatch):
    """`replay.online: true` reaches pre-training's replay, and its batches then take the fresh chunks."""
    from muse_jax.replay import Replay

    fresh_rows: list[int] = []

    class Recording(Replay):
        def _pop_fresh(self, n):
            out = super()._pop_fresh(n)
            fresh_rows.append(len(out))
            return out

    monkeypatch.setattr(pre, "Replay", Recording)
    budget = cfg.replace({"replay.online": True, "replay.seq_len": 8, "train.train_ratio": 64})
    pre._pretrain(budget, tmp_path / "online", stop_at=150, echo=lambda s: None)
    assert fresh_rows and sum(fresh_rows) > 0  # (the default, no queue, is pinned in test_replay.py)


def test_unfinished_episodes_start_training_at_dreamerv3s_item_count(cfg, tmp_path, monkeypatch):
    """`replay.unfinished: true`: pre-training hands replay the envs' episodes so far, starts training at the
    first tick where replay holds B * T chunk starts (dreamerv3 `len(replay) >= batch_size * batch_length`)
    and samples rows from episodes that have not ended."""
    from muse_jax.replay import Replay

    seen: list[tuple[int, bool]] = []  # (chunk starts, sampled) per replay call, in order
    open_rows: list[int] = []
    shared: list[int] = []  # steps handed over per set_unfinished call

    class Recording(Replay):
        def set_unfinished(self, episodes):
            shared.append(sum(len(ep["reward"]) for ep in episodes))
            return super().set_unfinished(episodes)

        def num_starts(self):
            n = super().num_starts()
            seen.append((n, False))
            return n

        def sample(self, batch_size):
            out = super().sample(batch_size)
            seen.append((super().num_starts(), True))
            open_rows.append(sum(any(ep is u for u in self._unfinished) for ep, _ in self.last_positions))
            return out

    monkeypatch.setattr(pre, "Replay", Recording)
    budget = cfg.replace({"agent": "dreamer", "replay.unfinished": True})
    pre._pretrain(budget, tmp_path / "unfinished", stop_at=200, echo=lambda s: None)
    need = budget.replay.batch_size * budget.replay.seq_len
    first = next(i for i, (_, sampled) in enumerate(seen) if sampled)
    assert seen[first - 1] == (seen[first - 1][0], False) and seen[first - 1][0] >= need  # the start check
    assert all(n < need for n, sampled in seen[:first - 1])  # not a tick earlier
    assert sum(open_rows) > 0
    assert all(a != b for a, b in zip(shared, shared[1:], strict=False))  # one copy per tick, not two
