"""The one learner-restore path (`loops/restore.py`): bit-for-bit resume, evaluation loading, and the
errors a user meets (agent kind, model overrides, a checkpoint not written by pretrain)."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx
from test_checkpoint import assert_trees_equal

from muse_jax.checkpoint import Checkpointer
from muse_jax.errors import CheckpointError, CheckpointMismatchError
from muse_jax.loops.restore import abstract_learner, load_agent, restore_learner, spec_to_meta


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A fresh smoke-size MUSE learner saved as `muse-wm pretrain` saves it, with a replay."""
    from muse_jax.agent import create_learner
    from muse_jax.config import load_config
    from muse_jax.loops.restore import obs_spec

    cfg = load_config("smoke")
    spec = obs_spec(cfg)
    learner = create_learner(cfg, spec, seed=cfg.train.seed)
    run_dir = tmp_path_factory.mktemp("restore") / "run"
    replay = {"episode_lengths": np.array([3], np.int64), "reward": np.arange(3, dtype=np.float32)}
    with Checkpointer(run_dir / "checkpoints", keep=2) as ck:
        ck.save(100, learner.state, replay=replay,
                meta={"config": cfg.to_dict(), "spec": spec_to_meta(spec), "seed": cfg.train.seed, "agent": "muse"})
    return run_dir, cfg, learner


def test_restore_learner_gives_config_weights_replay_and_step(saved_run):
    run_dir, cfg, learner = saved_run
    r = restore_learner(run_dir, agent="muse", with_replay=True)
    assert r.cfg == cfg and r.step == 100 and r.step_dir == (run_dir / "checkpoints" / "100").resolve()
    assert_trees_equal(r.learner.state, learner.state)
    assert list(r.replay["reward"]) == [0.0, 1.0, 2.0]
    assert restore_learner(run_dir / "checkpoints" / "100").replay is None  # replay only when asked for
    cfg2, graphdef, state = load_agent(run_dir)  # the evaluation entry point: same path, same result
    assert cfg2 == cfg and nnx.merge(graphdef, state).agent.spec == r.learner.agent().spec


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"agent": "dreamer"}, ["pretrain --agent dreamer`", "holds a muse agent"]),
    ({"overrides": {"agent": "dreamer"}}, ["--set agent=dreamer cannot change", "drop it"]),
    ({"overrides": {"model.deter": 64}}, ["does not fit the model asked for by --set", "(--set gives 64)"]),
])
def test_restore_learner_refuses_what_does_not_fit(saved_run, kwargs, words):
    with pytest.raises(CheckpointMismatchError) as err:
        restore_learner(saved_run[0], **kwargs)
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_loop_settings_may_differ_from_the_checkpoints(saved_run):
    """How the scans compile is no part of the model: a checkpoint adapts with other loop settings given with
    --set (runs saved before `auto` hold explicit rolled values, and take `auto` this way)."""
    over = {"model.observe_unroll": 8, "model.observe_remat": "dots", "behavior.imag_unroll": "auto"}
    r = restore_learner(saved_run[0], overrides=over)
    assert (r.cfg.model.observe_unroll, r.cfg.model.observe_remat, r.cfg.behavior.imag_unroll) == (8, "dots", "auto")
    assert_trees_equal(r.learner.state, saved_run[2].state)


def test_override_that_reshapes_the_inputs_names_the_first_parameter(saved_run):
    with pytest.raises(CheckpointMismatchError, match=r"does not fit the model built from the config: parameter '"):
        restore_learner(saved_run[0], overrides={"env.image": True})


def test_checkpoint_without_config_is_named(tmp_path, saved_run):
    with Checkpointer(tmp_path / "checkpoints", keep=1) as ck:
        ck.save(1, saved_run[2].state, meta={})
    with pytest.raises(CheckpointError, match="not written by `muse-wm pretrain`"):
        restore_learner(tmp_path)


@pytest.mark.slow
def test_real_learner_resume_and_load_agent(tmp_path):
    """Save a trained MUSE learner, resume it bit-for-bit, and load it for evaluation in one call."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.wm_throughput import synthetic_batch
    from muse_jax.agent import ObsSpec, create_learner, make_train_step
    from muse_jax.config import load_config

    cfg = load_config("smoke", {"replay.batch_size": 2, "replay.seq_len": 8, "behavior.imag_horizon": 3})
    spec = ObsSpec.from_config(cfg, proprio_dim=7, act_dim=3)
    learner = create_learner(cfg, spec, seed=0)
    step = make_train_step(cfg, learner.graphdef)
    batch = synthetic_batch(spec, 2, 8)
    k1, k2 = jax.random.split(jax.random.key(0))
    state1, _ = step(learner.state, batch, k1)

    run_dir = tmp_path / "run"
    ckpt = Checkpointer(run_dir / "checkpoints", keep=cfg.train.keep_checkpoints)
    replay = {k: v for k, v in batch.items()}
    ckpt.save(1, state1, replay=replay, meta={"config": cfg.to_dict(), "spec": spec_to_meta(spec), "env_steps": 64})

    # Resume: restore into a fresh learner's state and take the same next step.
    template = abstract_learner(cfg, spec, 1).state  # shapes only, no initialisers run
    restored, replay2, meta = ckpt.restore(state_template=template)
    assert meta["env_steps"] == 64 and set(replay2) == set(replay)
    assert_trees_equal(restored, state1)
    resumed, m_resumed = step(restored, batch, k2)
    straight, m_straight = step(state1, batch, k2)
    assert float(m_resumed["loss/total"]) == float(m_straight["loss/total"])
    assert_trees_equal(resumed, straight)

    # Evaluation: one call from the run folder rebuilds the same networks with the stored config.
    cfg2, graphdef, state = load_agent(run_dir)
    assert cfg2 == cfg
    agent = nnx.merge(graphdef, state).agent
    assert agent.spec == spec
    got = nnx.state(agent, nnx.Param)
    want = nnx.state(nnx.merge(learner.graphdef, ckpt.restore(state_template=template)[0]).agent, nnx.Param)
    assert_trees_equal(got, want)

    # The same checkpoint with a bigger model is refused with the parameter named.
    bigger = abstract_learner(cfg.replace({"model.units": 32}), spec, 0).state
    with pytest.raises(CheckpointMismatchError, match=r"expected shape .*found shape"):
        ckpt.restore(state_template=bigger)


