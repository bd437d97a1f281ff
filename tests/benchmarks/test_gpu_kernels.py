"""benchmarks/gpu_kernels.py: the kernel counts of the real train step (compiled for the CPU here) follow the
scans' lengths and unroll factors, and the thunk-sequence reader multiplies loops and counts command buffers once."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from benchmarks import gpu_kernels  # noqa: E402

T, HORIZON = 6, 15  # T unlike every other loop length in the step, so its trip counts are recognisable


def _counts(*extra: str) -> dict:
    [record] = gpu_kernels.run(gpu_kernels.parse_args(
        ["--platform", "cpu", "--size", "nano", "--batch", "2", "--seq", str(T), *extra]))
    return record


def test_train_step_loops_follow_seq_horizon_and_unroll():
    plain = _counts()  # `auto` loop settings written out for the CPU it compiles for: rolled scans
    assert (plain["observe_unroll"], plain["imag_unroll"], plain["observe_remat"]) == (1, 1, "none")
    trips = plain["hlo_trip_counts"]
    assert plain["unknown_trip_whiles"] == 0
    assert trips.count(T) == 2, trips  # the observe scan, forward and backward
    imag = max((w for w in plain["hlo_whiles"] if w["trip_count"] == HORIZON), key=lambda w: w["body_kernels"])
    per_step = plain["hlo_entry_kernels"] + sum(w["body_kernels"] * w["trip_count"] for w in plain["hlo_whiles"]
                                                if w["depth"] == 0)
    assert plain["hlo_kernels_per_step"] == per_step

    unrolled = _counts("--set", "model.observe_unroll=3", "--set", "behavior.imag_unroll=5")
    assert unrolled["observe_unroll"] == 3 and unrolled["imag_unroll"] == 5
    u_trips = unrolled["hlo_trip_counts"]
    assert T not in u_trips and u_trips.count(T // 3) == 2, u_trips  # unroll k divides the trip count by k
    assert HORIZON // 5 in u_trips, u_trips
    # imagination's loop is gone at 15 trips (a loop left there, the lambda return, is not the rollout)
    assert all(w["body_kernels"] < imag["body_kernels"] for w in unrolled["hlo_whiles"] if w["trip_count"] == HORIZON)
    # fewer loop iterations, so fewer launched kernels (each unrolled body is longer but runs k times less)
    assert unrolled["hlo_kernels_per_step"] < plain["hlo_kernels_per_step"]


SEQUENCE = """\
000: kCommandBuffer  [source       | next=003 (1)]
    001: kCustomKernel [source       | next=002 (1)] loop_broadcast_fusion grid: [64, 1, 1] threads: [128, 1, 1]
    002: kCustomKernel [prev=001 (1) | sink        ] wrapped_iota grid: [1, 1, 1] threads: [4, 1, 1]
003: kWhile          [prev=000 (1) | next=008 (1)]
condition:
    004: kCustomKernel [source | sink] loop_compare_fusion grid: [1, 1, 1] threads: [1, 1, 1]
  body:
    000: kCommandBuffer      [source        | next=007 (1) ]
        005: kCustomKernel [source       | next=006 (1) ] gemm_fusion_dot grid: [8, 1, 1] threads: [64, 1, 1]
        006: kCustomKernel [prev=005 (1) | next=007 (1) ] input_reduce_fusion grid: [2, 1, 1] threads: [256, 1, 1]
    007: kCopy         [prev=006 (1) | sink        ] kCopy
008: kCopy  [prev=003 (1) | sink] kCopy
"""
METADATA = 'thunk_metadata {\n  thunk_info {\n    profile_annotation: "while.5"\n    thunk_id: 3\n  }\n}\n'


def test_thunk_counts_multiply_loops_and_count_a_command_buffer_once():
    known = gpu_kernels.count_thunks(SEQUENCE, METADATA, {"while.5": 10})
    assert known["thunk_kernels_per_step"] == 2 + 10 * 3 + 1  # the condition does not run: the trip count is known
    assert known["thunk_launches_per_step"] == 1 + 10 * 2 + 1  # each command buffer is one launch
    assert known["command_buffers"] == 2 and known["entry_command_buffers"] == 1
    assert known["thunk_whiles"] == [{"name": "while.5", "trip_count": 10, "body_kernels": 3, "body_launches": 2,
                                      "body_command_buffers": 1}]
    unknown = gpu_kernels.count_thunks(SEQUENCE, METADATA, {})
    assert unknown["thunk_kernels_per_step"] == 2 + (3 + 1) + 1  # one pass, condition included


def test_a_target_config_that_cannot_be_read_or_names_no_device_is_refused_in_one_line(tmp_path, capsys):
    unnamed = tmp_path / "unnamed.txtpb"
    unnamed.write_text('platform_name: "CUDA"\n')
    for path in (tmp_path / "missing.txtpb", unnamed):
        with pytest.raises(SystemExit):
            gpu_kernels.parse_args(["--target-config", str(path)])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--target-config" in err[0] and "Traceback" not in err[0]
    named = tmp_path / "named.txtpb"
    named.write_text('device_description_str: "Some GPU"\n')
    assert gpu_kernels.target_name(gpu_kernels.parse_args(["--target-config", str(named)]).target_config) == "Some GPU"
