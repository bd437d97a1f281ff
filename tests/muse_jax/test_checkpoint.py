"""Orbax checkpoints: round trip, keep-N, atomicity, and the two errors users meet (mismatch, corruption)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from muse_jax.checkpoint import (
    INTEGRITY_FILE,
    CheckpointCorruptError,
    Checkpointer,
    CheckpointMismatchError,
    CheckpointNotFoundError,
    first_mismatch,
    manifest_of,
    resolve_checkpoint_path,
)


class Tiny(nnx.Module):
    """A small model with params, an RNG stream and (via the optimizer) Adam moments and a step."""

    def __init__(self, width: int, rngs: nnx.Rngs):
        self.encoder = nnx.Linear(3, width, rngs=rngs)
        self.head = nnx.Linear(width, 2, rngs=rngs)
        self.rngs = rngs


def make_state(width: int = 4, seed: int = 0):
    model = Tiny(width, nnx.Rngs(seed))
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    return nnx.split((model, opt))


def trained_state():
    graphdef, state = make_state()
    model, opt = nnx.merge(graphdef, state)
    grads = nnx.grad(lambda m: jnp.sum(m.head(m.encoder(jnp.ones((1, 3))))))(model)
    opt.update(model, grads)
    model.rngs.default()  # advance the rng counter so it is not its initial value
    return graphdef, nnx.state((model, opt))


def _key_safe(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


def assert_trees_equal(a, b):
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(_key_safe(x), _key_safe(y))


def test_round_trip_params_optimizer_step_replay_meta(tmp_path):
    _, state = trained_state()
    replay = {"proprio": np.random.default_rng(0).normal(size=(5, 7)).astype(np.float32),
              "is_first": np.array([True, False, False, True, False])}
    meta = {"config": {"model": {"size": "nano"}}, "env_steps": 1234, "episodes": 7, "rng": [1, 2]}
    ckpt = Checkpointer(tmp_path / "checkpoints", keep=2)
    ckpt.save(10, state, replay=replay, meta=meta)
    assert ckpt.latest_step() == 10

    _, template = make_state(seed=99)  # different values, same structure
    restored, replay2, meta2 = ckpt.restore(state_template=template)
    assert_trees_equal(restored, state)
    assert int(restored[1]["step"][...]) == 1  # optimizer step counter came back
    assert meta2 == meta
    assert set(replay2) == set(replay)
    for k in replay:
        np.testing.assert_array_equal(replay2[k], replay[k])
        assert replay2[k].dtype == replay[k].dtype


def test_restored_state_merges_into_a_working_module(tmp_path):
    graphdef, state = trained_state()
    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(1, state, meta={})
    restored, replay, _ = ckpt.restore(state_template=make_state(seed=5)[1])
    assert replay is None
    model, _ = nnx.merge(graphdef, restored)
    ref, _ = nnx.merge(graphdef, state)
    x = jnp.ones((2, 3))
    np.testing.assert_allclose(model.head(model.encoder(x)), ref.head(ref.encoder(x)))


def test_keep_two_leaves_two(tmp_path):
    _, state = make_state()
    ckpt = Checkpointer(tmp_path, keep=2)
    for step in (1, 2, 3, 4):
        ckpt.save(step, state, meta={"step": step})
    assert ckpt.all_steps() == [3, 4]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["3", "4"]
    assert ckpt.read_meta(3) == {"step": 3}


def test_half_written_checkpoint_is_never_picked_up(tmp_path):
    _, state = make_state()
    ckpt = Checkpointer(tmp_path, keep=3)
    ckpt.save(5, state, meta={})
    # What a crash mid-save leaves behind: orbax's temporary folder, never renamed to "9".
    shutil.copytree(tmp_path / "5", tmp_path / "9.orbax-checkpoint-tmp-1700000000")
    assert Checkpointer(tmp_path, keep=3).latest_step() == 5


def test_other_model_size_raises_named_mismatch(tmp_path):
    _, state = make_state(width=4)
    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(3, state, meta={})
    with pytest.raises(CheckpointMismatchError) as err:
        ckpt.restore(state_template=make_state(width=8)[1])
    msg = str(err.value)
    assert str(tmp_path / "3") in msg
    assert "'0/encoder/bias'" in msg and "expected shape (8,)" in msg and "found shape (4,)" in msg
    assert msg.count("\n") == 0


def test_first_mismatch_reports_missing_extra_and_dtype():
    a = manifest_of({"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)})
    assert first_mismatch(a, a) is None
    assert "missing" in first_mismatch({"w": a["w"]}, a)
    assert "in the checkpoint but not in the model" in first_mismatch(a, {"w": a["w"]})
    b = manifest_of({"w": np.zeros((2, 3), np.float16), "b": np.zeros(3, np.float32)})
    assert "expected dtype float32, found dtype float16" in first_mismatch(b, a)


def _data_files(step_dir: Path) -> list[Path]:
    record = json.loads((step_dir / INTEGRITY_FILE).read_text())["files"]
    return [step_dir / rel for rel in record if rel.startswith("state/") and "/d/" in rel]


def test_truncated_file_is_named(tmp_path):
    _, state = make_state()
    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(2, state, meta={})
    victim = _data_files(tmp_path / "2")[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with pytest.raises(CheckpointCorruptError, match="truncated") as err:
        ckpt.restore(state_template=make_state()[1])
    assert str(victim) in str(err.value)


def test_deleted_and_flipped_files_are_named(tmp_path):
    _, state = make_state()
    ckpt = Checkpointer(tmp_path, keep=2)
    ckpt.save(1, state, meta={})
    ckpt.save(2, state, meta={})
    victim = _data_files(tmp_path / "2")[0]
    victim.unlink()
    with pytest.raises(CheckpointCorruptError, match="missing") as err:
        ckpt.restore(state_template=make_state()[1])
    assert str(victim) in str(err.value)
    # An earlier step is still usable, as the message suggests.
    restored, _, _ = ckpt.restore(1, state_template=make_state()[1])
    assert_trees_equal(restored, state)

    victim = _data_files(tmp_path / "1")[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError, match="corrupt") as err:
        ckpt.restore(1, state_template=make_state()[1])
    assert str(victim) in str(err.value)


def test_damage_without_integrity_record_is_still_a_clear_error(tmp_path):
    _, state = make_state()
    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(4, state, meta={})
    step_dir = tmp_path / "4"
    victims = _data_files(step_dir)
    (step_dir / INTEGRITY_FILE).unlink()
    for v in victims:
        v.unlink()
    with pytest.raises(CheckpointCorruptError, match=str(step_dir)):
        ckpt.restore(state_template=make_state()[1])


def test_missing_checkpoints_and_bad_meta_are_explained(tmp_path):
    ckpt = Checkpointer(tmp_path / "empty", keep=1)
    with pytest.raises(CheckpointNotFoundError, match="no finished checkpoint"):
        ckpt.restore(state_template=make_state()[1])
    with pytest.raises(TypeError, match="JSON"):
        ckpt.save(1, make_state()[1], meta={"bad": object()})
    with pytest.raises(CheckpointNotFoundError, match="does not exist"):
        resolve_checkpoint_path(tmp_path / "nowhere")


def test_resolve_checkpoint_path_accepts_logdir_folder_and_step(tmp_path):
    ckpt = Checkpointer(tmp_path / "run" / "checkpoints", keep=2)
    ckpt.save(7, make_state()[1], meta={})
    folder = (tmp_path / "run" / "checkpoints").resolve()
    assert resolve_checkpoint_path(tmp_path / "run") == (folder, None)
    assert resolve_checkpoint_path(folder) == (folder, None)
    assert resolve_checkpoint_path(folder / "7") == (folder, 7)


def test_kill_between_rename_and_record_is_rolled_forward(tmp_path):
    _, state = make_state()
    Checkpointer(tmp_path, keep=2).save(3, state, meta={"n": 3})
    (tmp_path / "3" / INTEGRITY_FILE).unlink()  # what a kill right after orbax's rename leaves
    ckpt = Checkpointer(tmp_path, keep=2)
    assert (tmp_path / "3" / INTEGRITY_FILE).exists()
    restored, _, meta = ckpt.restore(state_template=make_state(seed=4)[1])
    assert meta == {"n": 3}
    assert_trees_equal(restored, state)
