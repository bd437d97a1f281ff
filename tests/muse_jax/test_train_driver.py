"""Train metrics kept on the device: window means, and NaN/inf named with the first step it appeared at."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from muse_jax.errors import NonFiniteLossError
from muse_jax.loops.train_driver import DeviceMetrics


def test_read_gives_window_means_and_starts_a_new_window():
    m = DeviceMetrics()
    assert m.read() == {}
    for step, x in enumerate((1.0, 2.0, 6.0)):
        m.add({"loss/a": jnp.float32(x), "grad_norm/b": jnp.float32(10 * x)}, step)
    m.check()  # all finite: no error, and the window is kept
    assert m.read() == pytest.approx({"loss/a": 3.0, "grad_norm/b": 30.0})
    m.add({"loss/a": jnp.float32(5.0), "grad_norm/b": jnp.float32(0.0)}, 3)
    assert m.read() == pytest.approx({"loss/a": 5.0, "grad_norm/b": 0.0})


def test_per_task_metrics_are_averaged_over_tasks():
    m = DeviceMetrics()
    m.add({"loss/a": jnp.array([1.0, 3.0])}, 0)
    m.add({"loss/a": jnp.array([5.0, 7.0])}, 1)
    assert m.read() == pytest.approx({"loss/a": 4.0})


def test_first_non_finite_step_is_named_loss_first():
    m = DeviceMetrics()
    m.add({"loss/a": jnp.float32(1.0), "grad_norm/b": jnp.float32(1.0)}, 40)
    m.add({"loss/a": jnp.float32(1.0), "grad_norm/b": jnp.float32(jnp.inf)}, 41)
    m.add({"loss/a": jnp.float32(jnp.nan), "grad_norm/b": jnp.float32(jnp.nan)}, 42)
    with pytest.raises(NonFiniteLossError, match=r"^grad_norm/b is inf at train step 41;"):
        m.check()
    m2 = DeviceMetrics()
    m2.add({"loss/z": jnp.array([1.0, -jnp.inf]), "grad_norm/a": jnp.float32(jnp.inf)}, 7)
    with pytest.raises(NonFiniteLossError, match=r"^loss/z is -inf at train step 7;"):
        m2.read()


@pytest.mark.parametrize("context", [True, False])
def test_training_posteriors_are_written_back_into_replay_only_with_replay_context(make_config, make_batch, context):
    """dreamerv3 `replay.update(outs['replay'])`: after train steps the stored latents are the model's
    training posteriors, no longer the zeros stored at acting time."""
    import numpy as np

    from muse_jax import agent as ag
    from muse_jax.loops.train_driver import TrainDriver
    from muse_jax.replay import Replay

    cfg = make_config(**{"replay.batch_size": 4, "replay.seq_len": 8, "replay.context": context})
    spec = ag.ObsSpec(image_shape=None, proprio_dim=4, act_dim=2, num_tasks=1)
    learner = ag.create_learner(cfg, spec, seed=0)
    replay = Replay(1000, 8, seed=0, context=context)
    batch = make_batch(5, B=4, T=16)
    for b in range(4):
        ep = {k: v[b] for k, v in batch.items()}
        ep["deter"] = np.zeros((16, cfg.model.deter), np.float16)
        ep["stoch"] = np.zeros((16, cfg.model.stoch), np.uint8)
        replay.add_episode(ep)
    driver = TrainDriver.data_parallel(cfg, learner.graphdef, learner.state, 0, seed=0)
    assert driver.train(replay, 3) == 3
    driver.flush_context()
    written = sum(int(np.abs(ep["deter"]).sum() > 0) for ep in replay._episodes)
    assert (written > 0) == context
    assert not any(k.startswith("replay_context") for k in driver.metrics.read())  # not averaged as metrics


def test_step_fn_is_the_step_train_runs():
    """The public handle on the train step (benchmarks/collect_overhead.py times it alone on a batch)."""
    import jax

    from muse_jax.loops.train_driver import TrainDriver

    def step(state, batch, key):
        return state + batch, {"loss/x": jnp.float32(state)}

    class Batches:
        def can_sample(self):
            return True

        def sample(self):
            return 1, None

    driver = TrainDriver(step, 0, 0, jax.random.key(0), write_back="never")
    assert driver.step_fn is step
    assert driver.train(Batches(), 2) == 2 and driver.state == 2
    assert driver.step_fn is step  # one host: the same function train ran
    assert driver.step_fn(driver.state, 5, jax.random.key(1))[0] == 7
