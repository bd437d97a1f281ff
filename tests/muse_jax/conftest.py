"""Shared tiny world-model fixtures: one nano config and one briefly trained learner per session.

The synthetic data makes competence depend on the state: each sequence has a sign g = ±1 in its
first proprio dimension; g > 0 sequences succeed a few steps later, g < 0 sequences never do.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from muse_jax.config import from_dict

TINY = {
    "model": {"size": "nano", "bins": 31, "mlp_layers": 1},
    "env": {"tasks": ["reach-v3"], "image": False, "proprio": True, "max_episode_steps": 20},
    "replay": {"batch_size": 8, "seq_len": 8},
    "behavior": {"imag_horizon": 5},
    "optim": {"lr": 3e-3, "warmup": 0},
    "regulation": {"horizon": 4, "num_rollouts": 4, "mcts_simulations": 6, "mcts_branching": 3},
}
PROPRIO, ACT = 4, 2


def tiny_config(**overrides):
    return from_dict(TINY, overrides)


def synthetic_batch(seed: int, B: int = 8, T: int = 8) -> dict[str, np.ndarray]:
    """Sequences whose success depends on the sign of proprio[..., 0]."""
    rng = np.random.default_rng(seed)
    g = np.where(rng.random(B) < 0.5, 1.0, -1.0).astype(np.float32)
    proprio = rng.normal(0, 0.1, (B, T, PROPRIO)).astype(np.float32)
    proprio[..., 0] += g[:, None]
    tts = np.where(g[:, None] > 0, 2.0, -1.0) * np.ones((1, T), np.float32)
    is_first = np.zeros((B, T), bool)
    is_first[:, 0] = True
    action = rng.uniform(-1, 1, (B, T, ACT)).astype(np.float32)
    action[:, 0] = 0.0
    return dict(proprio=proprio, task_id=np.ones((B, T), np.int32), action=action,
                reward=(g[:, None] > 0).astype(np.float32) * np.ones((1, T), np.float32),
                is_first=is_first, is_terminal=np.zeros((B, T), bool), time_to_success=tts.astype(np.float32))


@pytest.fixture(scope="session")
def tiny_cfg():
    return tiny_config()


@pytest.fixture(scope="session")
def trained(tiny_cfg):
    """A learner after 200 full train steps on synthetic data, with its metrics history."""
    from muse_jax import agent as ag

    spec = ag.ObsSpec(image_shape=None, proprio_dim=PROPRIO, act_dim=ACT, num_tasks=1)
    learner = ag.create_learner(tiny_cfg, spec, seed=0)
    step = ag.make_train_step(tiny_cfg, learner.graphdef)
    state, history = learner.state, []
    batches = [synthetic_batch(i) for i in range(4)]
    for i in range(200):
        state, metrics = step(state, batches[i % 4], jax.random.key(i))
        history.append(jax.device_get(metrics))
    return ag.SplitLearner(learner.graphdef, state), history, batches


@pytest.fixture(scope="session")
def make_config():
    return tiny_config


@pytest.fixture(scope="session")
def make_batch():
    return synthetic_batch


@pytest.fixture
def loop_overlaps(monkeypatch):
    """`record(module)`: from then on, every RunLoop that `module` builds appends its `overlap` setting to the
    list `record` returns (which setting a training loop was really built with)."""
    from muse_jax.loops.run_loop import RunLoop

    def record(module) -> list[bool]:
        seen: list[bool] = []

        class RecordingLoop(RunLoop):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                seen.append(self.overlap)

        monkeypatch.setattr(module, "RunLoop", RecordingLoop)
        return seen

    return record
