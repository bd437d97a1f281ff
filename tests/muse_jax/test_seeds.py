"""Several seeds in one process (`muse-wm pretrain --seeds 0 1`, loops/seeds.py): each seed's folder is the
run a 1-seed run of that seed writes, killed and resumed the same way, to float tolerance.

Why a tolerance and not equality: the seeds train through one jit(vmap(train_step)), whose batched
contractions XLA sums in another order than the 1-seed step's, so the last float32 bits differ and
training and acting carry them on (the module docstring of loops/seeds.py). Measured on the CPU here:
losses equal to 2e-7 relative, parameters to 2e-9 absolute after the run below (28 train steps, a
kill and a resume); the asserts allow 50x and 5000x that.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import jax
import numpy as np
import pytest
from flax import nnx

from muse_common.files import read_jsonl
from muse_jax import cli
from muse_jax.config import load_config
from muse_jax.errors import CheckpointError
from muse_jax.loops import pretrain as pre
from muse_jax.loops import seeds as S
from muse_jax.loops.restore import restore_learner

pytestmark = pytest.mark.slow

SEEDS = (0, 1)
SMALL = ["env.max_episode_steps=20", "train.env_steps=120", "train.prefill=40", "train.log_every=40",
         "train.save_every=60"]
"""smoke, shorter: 21-step episodes, training from env step 64, ~28 train steps per seed."""
KILL = 60
ALONE = 1


def _cfg(seed: int):
    return load_config("smoke", [*SMALL, f"train.seed={seed}"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A 1-seed run of seed ALONE (the second lane of the stack, where a lane mix-up would show) and one
    2-seed run (the CLI), each killed at KILL and resumed (a resumed run logs one more row, so both are)."""
    root = tmp_path_factory.mktemp("seeds")
    quiet = lambda s: None
    pre._pretrain(_cfg(ALONE), root / f"alone{ALONE}", stop_at=KILL, echo=quiet)
    pre.pretrain(_cfg(ALONE), root / f"alone{ALONE}", echo=quiet)
    argv = ["pretrain", "--config", "smoke", "--seeds", *map(str, SEEDS), "--logdir", str(root / "together"),
            "--no-compile-cache", *[a for s in SMALL for a in ("--set", s)]]
    assert cli.main([*argv, "--stop-at", str(KILL)]) == 0
    assert cli.main(argv) == 0
    return root


def _params(path):
    restored = restore_learner(path)
    return restored, nnx.state(nnx.merge(restored.learner.graphdef, restored.learner.state), nnx.Param)


def test_each_seed_of_a_multi_seed_run_is_its_one_seed_run(runs):
    seed = ALONE
    alone, together = runs / f"alone{seed}", runs / "together" / f"seed{seed}"
    a, b = list(read_jsonl(alone / "metrics.jsonl")), list(read_jsonl(together / "metrics.jsonl"))
    assert [set(x) for x in a] == [set(x) for x in b]
    assert any("loss/total" in x for x in a)
    for x, y in zip(a, b, strict=True):
        for k in ("step", "env_steps", "train_steps", "episodes", "replay_steps", "episodes_finished"):
            assert x.get(k) == y.get(k), (k, x, y)
        for k, v in x.items():
            if k.startswith(("loss/", "grad_norm/", "success", "episode_")) and v is not None:
                assert math.isclose(v, y[k], rel_tol=1e-5, abs_tol=1e-6), (k, v, y[k])
    ra, pa = _params(alone)
    rb, pb = _params(together)
    assert rb.meta["seed"] == seed and rb.cfg.train.seed == seed
    assert ra.meta["counters"] == rb.meta["counters"]
    worst = max(float(np.abs(np.asarray(u) - np.asarray(v)).max())
                for u, v in zip(jax.tree.leaves(pa), jax.tree.leaves(pb), strict=True))
    assert worst < 1e-5, worst
    files = lambda d: sorted(p.name for p in d.iterdir() if p.name != ".run.lock")  # the CLI holds a lock
    assert files(together) == files(alone)


def test_seeds_differ_and_the_top_folder_holds_only_seed_folders(runs):
    assert sorted(p.name for p in (runs / "together").iterdir()) == ["seed0", "seed1"]
    _, p0 = _params(runs / "together" / "seed0")
    _, p1 = _params(runs / "together" / "seed1")
    assert any(not np.allclose(u, v) for u, v in zip(jax.tree.leaves(p0), jax.tree.leaves(p1), strict=True))


def test_seeds_a_kill_left_one_save_apart_are_brought_level(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "verify_integrity", lambda path: None)
    dirs = S.seed_logdirs(tmp_path, [0, 1, 2])
    for d, steps in zip(dirs, ([60, 120], [60], [60, 120]), strict=True):
        for s in steps:
            (d / "checkpoints" / str(s)).mkdir(parents=True)
    said = []
    S.level_checkpoints(dirs, save_every=60, echo=said.append)
    assert [sorted(p.name for p in (d / "checkpoints").iterdir()) for d in dirs] == [["60"]] * 3
    assert (dirs[0] / "checkpoints_set_aside" / "120").is_dir() and len(said) == 2


def test_a_kill_during_the_first_save_starts_every_seed_afresh(tmp_path):
    dirs = S.seed_logdirs(tmp_path, [0, 1])
    (dirs[0] / "checkpoints" / "60").mkdir(parents=True)
    S.level_checkpoints(dirs, save_every=60, echo=lambda s: None)
    assert not any((dirs[0] / "checkpoints").iterdir())
    assert (dirs[0] / "checkpoints_set_aside" / "60").is_dir()


def test_seed_folders_further_apart_are_refused(tmp_path):
    dirs = S.seed_logdirs(tmp_path, [0, 1])
    for s in (60, 120):
        (dirs[0] / "checkpoints" / str(s)).mkdir(parents=True)
    with pytest.raises(CheckpointError, match="more than one save apart"):
        S.level_checkpoints(dirs, save_every=60, echo=lambda s: None)
    assert (dirs[0] / "checkpoints" / "120").is_dir()


def test_cli_refuses_a_repeated_seed(tmp_path, capsys):
    assert cli.main(["pretrain", "--config", "smoke", "--seeds", "1", "1", "--logdir", str(tmp_path),
                     "--no-compile-cache"]) == 2
    assert "name each seed once" in capsys.readouterr().err


def test_masked_lanes_keep_their_state_exactly(tiny_cfg, make_batch):
    from muse_jax import agent as A

    spec = A.ObsSpec(image_shape=None, proprio_dim=4, act_dim=2, num_tasks=1)
    learners = [A.create_learner(tiny_cfg, spec, s) for s in (0, 1)]
    stacked = jax.tree.map(lambda *x: np.stack(x), *[lr.state for lr in learners])
    batch = jax.tree.map(lambda *x: np.stack(x), make_batch(0), make_batch(1))
    keys = jax.numpy.stack([jax.random.key(1), jax.random.key(2)])
    masked = S.make_masked_seed_step(learners[0].graphdef)
    state, _ = masked(stacked, batch, keys, jax.numpy.asarray([False, True]))
    for k, moved in ((0, False), (1, True)):
        before = nnx.state(nnx.merge(learners[k].graphdef, learners[k].state), nnx.Param)
        after = jax.tree.map(lambda x, k=k: x[k], state)
        after = nnx.state(nnx.merge(learners[k].graphdef, after), nnx.Param)
        same = [np.array_equal(u, v) for u, v in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True)]
        assert (not all(same)) if moved else all(same)


def test_a_tick_with_no_step_owed_leaves_the_posteriors_queued(tiny_cfg):
    """Queued training posteriors are written back before a seed's next batch, and only then: a tick where
    a seed owes no step does not read them from the device (as the 1-seed `TrainDriver.train`)."""

    class Source:
        written: list = []

        def write_back(self, where, context):
            self.written.append(where)

    class Context:
        def lane(self, k):
            return k

    stack = S.SeedStack(tiny_cfg, (0, 1))
    stack.train_steps = [5, 5]
    source = Source()
    stack._pending = [[(source, "seed0-step4", Context())], [(source, "seed1-step4", Context())]]
    stack._requests = {0: (source, 5), 1: (source, 5)}  # both have reached `due`: nothing owed
    stack.train_requested()
    assert source.written == [] and all(stack._pending)
    stack.flush(1)  # a checkpoint's flush_context still writes them
    assert source.written == ["seed1-step4"] and stack._pending[1] == [] and stack._pending[0]
