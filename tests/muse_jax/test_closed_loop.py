"""Every acting policy is closed-loop: what it does depends on what it sees.

Why: with a carried regulated state and z from the prior, no observation ever entered MUSE's acting chain
(two observation streams gave the same actions). These tests act with each strategy on two observation
streams from the same start and keys and require different actions; on a real Meta-World observation, a
change of the goal position alone must change the next action. The open-loop setting is refused.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from muse_jax import agent as ag
from muse_jax.config import ConfigError, closed_loop, from_dict

PROPRIO, ACT = 4, 2  # the conftest's synthetic data
SPEC = ag.ObsSpec(image_shape=None, proprio_dim=PROPRIO, act_dim=ACT, num_tasks=1)

SETTINGS = {
    "gradient (Algorithm 1 as written)": {"regulation.strategy": "gradient"},
    "gradient, posterior z, carried state": {"regulation.strategy": "gradient", "regulation.z_source": "posterior",
                                             "regulation.carry_regulated_state": True},
    "gradient, in place": {"regulation.strategy": "gradient", "regulation.rollout": "in_place"},
    "rollouts": {"regulation.strategy": "rollouts"},
    "mcts": {"regulation.strategy": "mcts"},
    "plain actor": {"regulation.strategy": "none"},
    "actor mean": {"regulation.strategy": "mean"},
}


def _acting(trained, overrides: dict):
    learner = trained[0]
    cfg = learner.cfg.replace(overrides)
    return ag.create_learner(cfg, SPEC, seed=0).graphdef, learner.state


def _run(graphdef, state, stream: np.ndarray, mode: str = "muse") -> np.ndarray:
    """Actions [T, B, A] for an observation stream [T, B, PROPRIO], same keys whatever the stream."""
    T, B = stream.shape[:2]
    carry = ag.initial_carry(graphdef, state, B)
    step = ag.make_policy_step(graphdef, mode)
    out = []
    for t in range(T):
        obs = {"proprio": stream[t], "task_id": np.ones(B, np.int32), "is_first": np.full(B, t == 0)}
        action, carry, _ = step(state, carry, obs, jax.random.key(100 + t))
        out.append(np.asarray(action))
    return np.stack(out)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_actions_depend_on_the_observations(trained, name):
    graphdef, state = _acting(trained, SETTINGS[name])
    rng = np.random.default_rng(0)
    T, B = 6, 3
    a = rng.normal(0, 1, (T, B, PROPRIO)).astype(np.float32)
    b = a.copy()
    b[1:] = rng.normal(0, 1, (T - 1, B, PROPRIO))  # the same first observation, then another stream
    act_a, act_b = _run(graphdef, state, a), _run(graphdef, state, b)
    np.testing.assert_array_equal(act_a[:1], act_b[:1])  # same start, same keys: same first action
    assert np.abs(act_a[2:] - act_b[2:]).max() > 1e-3, f"{name}: actions ignore the observations"


def test_dreamer_actor_depends_on_the_observations(trained):
    learner = trained[0]
    rng = np.random.default_rng(1)
    a = rng.normal(0, 1, (4, 2, PROPRIO)).astype(np.float32)
    b = a.copy()
    b[1:] += 1.0
    act_a = _run(learner.graphdef, learner.state, a, "dreamer")
    act_b = _run(learner.graphdef, learner.state, b, "dreamer")
    assert np.abs(act_a[1:] - act_b[1:]).max() > 1e-3


def test_open_loop_setting_is_refused_in_one_line(tiny_cfg):
    with pytest.raises(ConfigError, match="carry_regulated_state.*open loop"):
        from_dict(tiny_cfg.to_dict(), {"regulation.carry_regulated_state": True})
    # runs saved with the old open-loop default are restored closed-loop, the rest kept
    saved = tiny_cfg.to_dict()
    saved["regulation"]["carry_regulated_state"] = True
    fixed = closed_loop(saved)
    assert fixed["regulation"]["carry_regulated_state"] is False
    assert from_dict(fixed).regulation.z_source == "prior"
    saved["regulation"]["z_source"] = "posterior"
    assert closed_loop(saved)["regulation"]["carry_regulated_state"] is True  # closed-loop: kept


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["gradient", "rollouts", "mcts"])
def test_goal_position_alone_changes_the_next_action_on_metaworld(tiny_cfg, strategy):
    """A real reach-v3 observation; only the goal coordinates (the last three of the 39) differ.

    Untrained weights: the observation reaches the action through the sampled discrete z, whose class
    a goal change flips in some rows only (9 of 32 at `tiny`), so 16 rows with their own noise act."""
    from muse_jax.envs.metaworld import make_vector_env
    from muse_jax.loops.restore import obs_spec

    cfg = from_dict({"model": {"size": "tiny"}, "env": {"tasks": ["reach-v3"], "image": False, "max_episode_steps": 10},
                     "regulation": {**tiny_cfg.to_dict()["regulation"], "strategy": strategy}})
    spec = obs_spec(cfg)
    learner = ag.create_learner(cfg, spec, seed=0)  # untrained: the wiring alone must carry the goal
    venv = make_vector_env(["reach-v3"], [1], cfg.env, 0, 1)
    try:
        base = np.asarray(venv.reset(seed=0)[0]["proprio"], np.float32)
        other = np.asarray(venv.reset(seed=1)[0]["proprio"], np.float32)
    finally:
        venv.close()
    moved = base.copy()
    moved[:, -3:] = other[:, -3:]  # another reset's goal: a placement Meta-World itself draws
    assert np.abs(moved - base).max() > 0.01
    B = 16
    stream_a = np.stack([np.repeat(base, B, 0)] * 3)
    stream_b = np.stack([np.repeat(moved, B, 0)] * 3)
    step = ag.make_policy_step(learner.graphdef, "muse")

    def act(stream):
        carry, acts = ag.initial_carry(learner.graphdef, learner.state, B), []
        for t in range(3):
            o = {"proprio": stream[t], "task_id": np.ones(B, np.int32), "is_first": np.full(B, t == 0)}
            a, carry, _ = step(learner.state, carry, o, jax.random.key(7 + t))
            acts.append(np.asarray(a))
        return np.stack(acts)

    # the actions after observing the moved goal (with z from the prior, h_{t+1} has seen x_t)
    assert np.abs(act(stream_a)[1:] - act(stream_b)[1:]).max() > 1e-4
