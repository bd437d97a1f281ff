"""Replay: bounded capacity, oldest-first eviction, chunk shapes, labels, state_dict round trip."""

from __future__ import annotations

import numpy as np
import pytest
from episode_helpers import make_episode

from muse_jax.replay import Replay, pack_episodes, step_bytes, unpack_episodes


def test_pack_and_unpack_episodes_round_trip_and_keep_only_common_keys():
    a, _ = make_episode(3, 1.0)
    b, _ = make_episode(5, 2.0)
    b["deter"] = np.zeros((5, 2), np.float16)  # a key only one episode has is dropped
    flat = pack_episodes([a, b])
    assert list(flat["episode_lengths"]) == [3, 5] and "deter" not in flat
    back = unpack_episodes(flat)
    assert len(back) == 2 and set(back[0]) == set(a)
    for got, want in zip(back, [a, b], strict=True):
        for k, v in got.items():
            np.testing.assert_array_equal(v, want[k])
    assert unpack_episodes(pack_episodes([])) == []
    with pytest.raises(ValueError, match="episode_lengths"):
        unpack_episodes({"reward": np.zeros(3)})


def test_capacity_is_bounded_and_oldest_episodes_go_first():
    rp = Replay(capacity=25, seq_len=4)
    for tag in range(4):
        rp.add_episode(*make_episode(10, float(tag)))
    assert len(rp) <= 25
    assert rp.num_episodes == 2
    kept = sorted({float(x) for x in rp.state_dict()["reward"]})
    assert kept == [2.0, 3.0]  # episodes 0 and 1 were evicted


def test_chunks_have_shape_and_stay_inside_one_episode():
    rp = Replay(capacity=1000, seq_len=5, seed=1)
    for tag in range(3):
        rp.add_episode(*make_episode(12, 100.0 * tag, success_at=7 if tag == 1 else None))
    b = rp.sample(64)
    assert b["proprio"].shape == (64, 5, 3)
    assert b["action"].shape == (64, 5, 4)
    assert b["time_to_success"].shape == (64, 5) and b["time_to_success"].dtype == np.float32
    assert b["is_first"][:, 0].all()
    # one episode per chunk: the reward tag is constant along T and proprio increases by 1 per step
    assert (b["reward"] == b["reward"][:, :1]).all()
    np.testing.assert_allclose(np.diff(b["proprio"][..., 0], axis=1), 1.0)
    solved = b["reward"][:, 0] == 100.0
    assert solved.any() and (~solved).any()
    assert (b["time_to_success"][~solved] == -1).all()
    assert (b["time_to_success"][solved] >= 0).all()


def test_sampling_is_uniform_over_start_positions():
    rp = Replay(capacity=1000, seq_len=2, seed=0)
    rp.add_episode(*make_episode(3, 0.0))  # 2 start positions
    rp.add_episode(*make_episode(9, 1.0))  # 8 start positions
    frac = (rp.sample(20000)["reward"][:, 0] == 1.0).mean()
    assert abs(frac - 0.8) < 0.02


def test_state_dict_round_trip():
    rp = Replay(capacity=100, seq_len=4, seed=0)
    for tag in range(3):
        rp.add_episode(*make_episode(8 + tag, float(tag), success_at=2))
    sd = rp.state_dict()
    rp2 = Replay(capacity=100, seq_len=4)
    rp2.load_state_dict(sd)
    assert len(rp2) == len(rp) and rp2.num_episodes == 3 and rp2.episodes_added == 3
    sd2 = rp2.state_dict()
    assert set(sd) == set(sd2)
    for k in sd:
        np.testing.assert_array_equal(sd[k], sd2[k])


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="capacity"):
        Replay(capacity=3, seq_len=4)
    rp = Replay(capacity=100, seq_len=4)
    ep, _ = make_episode(5, 0.0)
    with pytest.raises(ValueError, match="time_to_success"):
        rp.add_episode(ep)
    with pytest.raises(ValueError, match="seq_len"):
        rp.sample(2)


def test_step_bytes_counts_images():
    assert step_bytes((64, 64, 3), 39, 4) - step_bytes(None, 39, 4) == 64 * 64 * 3


def _with_latents(length: int, tag: float) -> dict:
    ep, success = make_episode(length, tag)
    ep = dict(ep, deter=np.zeros((length, 4), np.float16), stoch=np.zeros((length, 3), np.uint8))
    from muse_jax.competence import steps_to_success

    ep["time_to_success"] = steps_to_success(success)
    return ep


def test_training_posteriors_are_written_back_over_the_sampled_chunks():
    """dreamerv3 replay context: the posteriors of every train step replace the chunk's stored latents."""
    given = _with_latents(12, 1.0)
    replay = Replay(100, 4, seed=0)
    replay.add_episode(given)
    batch = replay.sample(3)
    positions = replay.last_positions
    offsets = [o for _, o in positions]
    deter = np.arange(3 * 4 * 4, dtype=np.float32).reshape(3, 4, 4)
    onehot = np.eye(5)[np.full((3, 4, 3), 2)]  # one-hot stoch is turned into class indices
    assert replay.write_back(positions, deter, onehot) == 3
    ep = replay._episodes[0]
    for b, o in enumerate(offsets):  # rows written in order; a later row wins where chunks overlap
        later = [c for c in range(b + 1, 3) if abs(offsets[c] - o) < 4]
        if not later:
            np.testing.assert_array_equal(ep["deter"][o : o + 4], deter[b].astype(np.float16))
    assert (ep["stoch"][min(offsets):max(offsets) + 4] == 2).all()
    assert not given["deter"].any()  # the caller's arrays are never written (own copy)
    # the next chunk starting after a written step starts from the written latent
    batch = replay.sample(50)
    for b, (_, o) in enumerate(replay.last_positions):
        if o > 0:
            np.testing.assert_array_equal(batch["start_deter"][b], ep["deter"][o - 1])


def test_write_back_skips_read_only_and_evicted_episodes():
    shared = _with_latents(8, 1.0)
    replay = Replay(16, 4, seed=0)
    replay.add_episode(shared, write_back=False)
    replay.sample(2)
    assert replay.write_back(replay.last_positions, np.ones((2, 4, 4)), np.ones((2, 4, 3))) == 0
    assert not shared["deter"].any()
    replay.add_episode(_with_latents(8, 2.0))
    replay.sample(2)
    positions = replay.last_positions
    replay.add_episode(_with_latents(8, 3.0))
    replay.add_episode(_with_latents(8, 4.0))  # capacity 16: the sampled episode is gone
    assert replay.write_back(positions, np.ones((2, 4, 4)), np.ones((2, 4, 3))) == 0


def test_online_queue_trains_every_fresh_chunk_once_first():
    """dreamerv3 `replay.online`: each new episode's non-overlapping chunks fill the next batches first,
    in arrival order, each exactly once; rows left over are uniform."""
    replay = Replay(1000, 4, seed=0, online=True)
    replay.add_episode(_with_latents(10, 1.0))  # chunks at 0 and 4 (8..9 is too short for a chunk)
    replay.add_episode(_with_latents(8, 2.0))  # chunks at 0 and 4
    first = replay._episodes[0]
    second = replay._episodes[1]
    replay.sample(3)
    got = [(ep is first, ep is second, o) for ep, o in replay.last_positions]
    assert got == [(True, False, 0), (True, False, 4), (False, True, 0)]
    batch = replay.sample(5)
    assert replay.last_positions[0][0] is second and replay.last_positions[0][1] == 4
    assert batch["reward"].shape == (5, 4)
    replay.sample(2)  # queue empty: uniform rows only, never an error
    off = Replay(1000, 4, seed=0)  # default: no queue, uniform from the first row
    off.add_episode(_with_latents(10, 1.0))
    off.add_episode(_with_latents(8, 2.0))
    rows = set()
    for _ in range(20):
        off.sample(3)
        rows |= {(id(ep), o) for ep, o in off.last_positions}
    assert len(rows) > 4  # starts drawn over every valid offset, not only the chunk grid


def test_online_queue_skips_evicted_episodes_and_is_not_restored():
    replay = Replay(16, 4, seed=0, online=True)
    for tag in (1.0, 2.0, 3.0):  # capacity 16: the first episode is evicted before it is sampled
        replay.add_episode(_with_latents(8, tag))
    batch = replay.sample(4)
    assert [(float(ep["reward"][0]), o) for ep, o in replay.last_positions] == [(2.0, 0), (2.0, 4), (3.0, 0), (3.0, 4)]
    assert (batch["reward"][:, 0] != 1.0).all()
    restored = Replay(16, 4, seed=0, online=True)
    restored.load_state_dict(replay.state_dict())
    assert not restored._queue


def test_unfinished_episodes_are_sampled_until_replaced_but_never_stored():
    """`replay.unfinished` (dreamerv3 samples every step as it arrives): the envs' episodes so far are drawn
    with the stored ones, count as chunk starts, carry time_to_success -1 (outcome unknown), and are never
    written back, saved or kept past the next `set_unfinished`."""
    replay = Replay(1000, 4, seed=0)
    replay.add_episode(_with_latents(6, 1.0))  # 3 starts
    assert replay.num_starts() == 3
    open_ep = {k: v for k, v in _with_latents(9, 2.0).items() if k != "time_to_success"}  # 6 starts
    replay.set_unfinished([open_ep])
    assert replay.num_starts() == 9 and len(replay) == 6 and replay.num_episodes == 1
    batch = replay.sample(200)
    drawn = batch["reward"][:, 0]
    assert set(np.unique(drawn)) == {1.0, 2.0}
    assert abs((drawn == 2.0).mean() - 6 / 9) < 0.1  # uniform over every start, stored or not
    np.testing.assert_array_equal(batch["time_to_success"][drawn == 2.0], -1.0)
    assert replay.write_back(replay.last_positions, np.ones((200, 4, 4)), np.ones((200, 4, 3))) == (drawn == 1.0).sum()
    assert np.all(open_ep["deter"] == 0)  # the caller's arrays are never written
    assert replay.state_dict()["episode_lengths"].tolist() == [6]
    replay.set_unfinished([])
    assert replay.num_starts() == 3 and set(np.unique(replay.sample(50)["reward"][:, 0])) == {1.0}
    short = Replay(1000, 4, seed=0)
    short.set_unfinished([{k: v[:3] for k, v in open_ep.items()}])  # shorter than T: nothing to sample
    assert not short.can_sample() and short.num_starts() == 0
