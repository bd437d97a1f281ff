"""DeepMind Control and gymnasium behind the Meta-World env contract: the envs, the config's suite presets
and refusals, and `muse-wm pretrain` end to end on a tiny budget (with a resume)."""

from __future__ import annotations

import json
import math
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import pytest

from muse_jax.cli import main
from muse_jax.config import ConfigError, from_dict, load_config


def test_dmc_env_follows_dreamerv3_setting():
    from muse_jax.envs.dmc import DMCEnv

    env = DMCEnv("cartpole-swingup", 1, action_repeat=2, max_episode_steps=1000, seed=3)
    obs, _ = env.reset(seed=3)
    assert obs["proprio"].shape == (5,) and obs["proprio"].dtype == np.float32  # position 3 + velocity 2
    assert bool(obs["is_first"]) and not bool(obs["success"]) and int(obs["task_id"]) == 1
    assert env.action_space.shape == (1,)
    steps, total, done = 0, 0.0, False
    while not done:
        obs, r, term, trunc, info = env.step(np.ones(1, np.float32))
        steps, total, done = steps + 1, total + r, term or trunc
        assert not term  # DMC suite episodes end by the time limit only: truncated, never terminal
        assert not bool(obs["is_first"]) and info["success"] is False
    env.close()
    assert steps == 500 and trunc  # 1000 frames at action repeat 2
    assert 0.0 < total <= 1000.0  # reward per frame in [0, 1], summed over the repeat


def test_dmc_bad_task_names_close_ones():
    from muse_jax.envs.dmc import check_task

    with pytest.raises(ValueError, match=r"cartpole-swingup"):
        check_task("cartpole-swingupp")


def test_gym_env_keeps_terminal_and_truncation_apart_and_rescales_actions():
    from muse_jax.envs.gym import GymEnv

    env = GymEnv("Pendulum-v1", 1, seed=0)  # actions in [-2, 2], 200-step time limit, never terminal
    obs, _ = env.reset()
    assert obs["proprio"].shape == (3,) and bool(obs["is_first"])
    inner = env._env
    seen = []
    orig = inner.step
    inner.step = lambda a: (seen.append(np.asarray(a).copy()), orig(a))[1]
    n, done = 0, False
    while not done:
        _, _, term, trunc, _ = env.step(np.full(1, 1.0 if n == 0 else -0.5, np.float32))
        n, done = n + 1, term or trunc
    env.close()
    assert seen[0][0] == pytest.approx(2.0) and seen[1][0] == pytest.approx(-1.0)  # [-1, 1] -> [-2, 2]
    assert n == 200 and trunc and not term
    env = GymEnv("InvertedPendulum-v5", 1, seed=0)  # falls over under a constant push: terminal, not truncated
    env.reset()
    for _ in range(1000):
        _, _, term, trunc, _ = env.step(np.ones(1, np.float32))
        if term or trunc:
            break
    env.close()
    assert term and not trunc


def test_suite_presets_and_refusals():
    cfg = from_dict({"agent": "dreamer", "env": {"suite": "dmc", "tasks": ["walker-walk"]}})
    assert (cfg.env.action_repeat, cfg.env.max_episode_steps, cfg.env.image) == (2, 1000, False)
    cfg = from_dict({"agent": "dreamer", "env": {"suite": "dmc", "tasks": ["walker-walk"], "action_repeat": 1}})
    assert cfg.env.action_repeat == 1  # an explicit key beats the preset
    assert from_dict({"agent": "dreamer", "env": {"suite": "gym", "tasks": ["Pendulum-v1"]}}).env.max_episode_steps == 0
    with pytest.raises(ConfigError, match="only Meta-World defines"):
        from_dict({"agent": "muse", "env": {"suite": "dmc", "tasks": ["walker-walk"]}})
    with pytest.raises(ConfigError, match="env.suite gym only"):
        from_dict({"env": {"max_episode_steps": 0}})
    with pytest.raises(ConfigError, match="env.suite"):
        load_config("smoke", ["env.suite=atari"])


def test_muse_on_dmc_is_refused_in_one_line(tmp_path, capsys):
    code = main(["pretrain", "--config", "smoke", "--set", "env.suite=dmc", "--set", "env.tasks=[cartpole-swingup]",
                 "--logdir", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--agent dreamer" in err[0], err
    assert not (tmp_path / "x").exists()


def _rows(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("suite,task,proprio,frames", [
    ("dmc", "cartpole-swingup", 5, 40),
    pytest.param("gym", "Pendulum-v1", 3, 40, marks=pytest.mark.long),  # long: the DMC run pins the same loop
])
def test_pretrain_on_suite_with_resume(tmp_path, capsys, suite, task, proprio, frames):
    """Tiny budget: episodes of `frames` frames, train from step 100; killed at 200, resumed to 300."""
    run = tmp_path / "run"
    args = ["pretrain", "--config", "smoke", "--agent", "dreamer", "--set", f"env.suite={suite}",
            "--set", f"env.tasks=[{task}]", "--set", f"env.max_episode_steps={frames}",
            "--set", "train.env_steps=300", "--set", "train.prefill=100", "--set", "train.log_every=100",
            "--set", "train.save_every=100", "--set", "replay.seq_len=8", "--logdir", str(run)]
    assert main([*args, "--stop-at", "200"]) == 0
    assert [r["env_steps"] for r in _rows(run)] == [100, 200]
    assert main(args) == 0
    assert "resuming" in capsys.readouterr().out
    rows = _rows(run)
    assert [r["env_steps"] for r in rows] == [100, 200, 300]  # resumed, no row twice
    trained = [r for r in rows if r["train_steps"] > 0]
    assert trained and all(math.isfinite(r["loss/model"]) and math.isfinite(r["loss/actor"]) for r in trained)
    repeat = 2 if suite == "dmc" else 1
    # DreamerV3's start (loops/train_driver.TrainRatio): the first train step comes once replay can sample a
    # batch, i.e. when both envs' first episodes (frames / repeat steps plus the reset step each) are in it;
    # from there one step per env step (smoke: train ratio 32, batch 4 x seq 8), nothing owed before it
    first = 2 * (frames // repeat + 1)
    assert rows[-1]["train_steps"] == 1 + (300 - first) * 32 // (4 * 8)
    scored = [r for r in rows if r.get("episodes_finished")]
    # an episode of frames / repeat actions is stored as that many steps plus its first observation
    assert scored and all(r["episode_length"] == pytest.approx(frames / repeat + 1) for r in scored)
    assert all("success_rate" not in r for r in rows)  # no success signal in this suite: none made up
    from muse_jax.checkpoint import Checkpointer

    with Checkpointer(run / "checkpoints", read_only=True) as ck:
        spec = ck.read_meta()["spec"]
    assert spec["proprio_dim"] == proprio and spec["act_dim"] == 1 and spec["image_shape"] is None
    # adaptation stays Meta-World only: one line
    assert main(["adapt", "--checkpoint", str(run), "--agent", "dreamer", "--logdir", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Meta-World only" in err[0], err
