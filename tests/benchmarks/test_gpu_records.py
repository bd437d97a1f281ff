"""benchmarks/gpu_records.py folds a lease's output into docs/ records: tagged, checked, once, atomically."""

import json
from pathlib import Path

import pytest

from benchmarks.gpu_records import fold, main
from benchmarks.pages import gpu_sessions

LOOPS = {"observe_unroll": 8, "imag_unroll": 15, "observe_remat": "dots"}
PAIR = {"benchmark": "official_speed", "platform": "gpu", "size": "size1m", "dtype": "float32",
        "order": "ours, official alternating",
        "device": "NVIDIA H200", "ours_jax": "0.11.2", "rounds": 3, "steps_per_round": 10, "cpu_cores": 16,
        "ours_train_step_median_s": 0.011, "ours_train_step_cpu_s": 0.008, "ours_ready_s": 67.0, "ours_loops": LOOPS,
        "official_train_step_median_s": 0.023, "official_train_step_cpu_s": 0.029, "official_ready_s": 40.0,
        "speed_ratio_official_over_ours": 2.1, "cpu_ratio_official_over_ours": 3.7}
SEEDS = {"benchmark": "wm_throughput", "backend": "gpu", "size": "size1m", "device": "NVIDIA H200", "jax": "0.11.2",
         "steps": 10,
         "batch": 16, "seq": 64, "seeds": 5, "loops": LOOPS, "train_step_median_s": 0.0099,
         "seeds_train_step_median_s": 0.0161, "seeds_ratio": 1.63, "seeds_per_seed_s": 0.0032, "compile_s": 42.0,
         "seeds_compile_s": 58.0}


LOOP = {"benchmark": "collect_overhead_loop", "backend": "gpu", "summary": True, "config": "quickstart", "sets": [],
        "size": "size1m", "num_envs": 4, "batch": 16, "seq": 32, "train_ratio": 512.0, "device": "NVIDIA H200",
        "updates": 40, "serial_loop_updates_per_s": 30.0, "serial_bench_updates_per_s": 50.0, "serial_ratio": 0.6,
        "overlap_loop_updates_per_s": 47.0, "overlap_bench_updates_per_s": 50.0, "overlap_ratio": 0.94}


def lease(tmp_path: Path) -> tuple[Path, Path, Path]:
    first, second, docs = tmp_path / "1", tmp_path / "2", tmp_path / "docs"
    for d in (first, second, docs):
        d.mkdir()
    cut = json.dumps(PAIR | {"size": "size12m"})[:-40]  # a run cut off by its timeout mid-line
    wrong = json.dumps(PAIR | {"ours_train_step_median_s": "fast"})
    dry = json.dumps(PAIR | {"platform": "cpu"})  # gpu_session.sh --dry-run's output
    nan = json.dumps(PAIR | {"ours_ready_s": float("nan")})
    flag = json.dumps(PAIR | {"official_deterministic": "no"})  # a string the page would read as true
    (first / "gpu_session.jsonl").write_text("\n".join([json.dumps(PAIR), wrong, cut, dry, nan, flag]))
    (second / "wm_seeds.jsonl").write_text(json.dumps(SEEDS) + "\n[1, 2]\n")
    per_loop = json.dumps(LOOP | {"summary": None})  # a per-loop line, not the summary the page reads
    (second / "collect_overhead_loop.jsonl").write_text(json.dumps(LOOP) + "\n" + per_loop + "\n")
    (docs / "official_speed_gpu.jsonl").write_text(json.dumps(PAIR | {"session": "lease 1"}))  # no final newline
    return first, second, docs


def test_a_lease_is_appended_tagged_and_only_whole_records_count(tmp_path: Path, capsys) -> None:
    first, second, docs = lease(tmp_path)
    assert fold([first, second], docs, "lease 2", "abc1234", 540) == {
        "official_speed_gpu.jsonl": 1, "wm_seeds_gpu.jsonl": 1, "collect_overhead_gpu.jsonl": 1}
    err = capsys.readouterr().err
    assert "gpu_session.jsonl:2: 'ours_train_step_median_s' is str" in err
    assert "gpu_session.jsonl:3: not JSON" in err and "wm_seeds.jsonl:2: not a JSON object" in err
    assert "gpu_session.jsonl:4: measured on 'cpu', not a GPU" in err
    assert "gpu_session.jsonl:5: 'ours_ready_s' is nan" in err
    assert "gpu_session.jsonl:6: 'official_deterministic' is str, not true/false" in err
    assert "collect_overhead_loop.jsonl:2: not a collect_overhead_loop summary" in err
    speed = [json.loads(x) for x in (docs / "official_speed_gpu.jsonl").read_text().splitlines()]
    assert [x["session"] for x in speed] == ["lease 1", "lease 2"]
    assert speed[1] == PAIR | {"session": "lease 2", "code": "abc1234", "session_seconds": 540}
    assert list(gpu_sessions(docs)) == ["lease 1", "lease 2"]  # the page reads them by lease
    seeds = json.loads((docs / "wm_seeds_gpu.jsonl").read_text())
    assert seeds["session"] == "lease 2" and seeds["seeds_ratio"] == 1.63


def test_a_lease_is_folded_once_and_bad_folders_are_named(tmp_path: Path, capsys) -> None:
    first, second, docs = lease(tmp_path)
    fold([first], docs, "lease 2", "abc1234", 540)
    before = (docs / "official_speed_gpu.jsonl").read_text()
    with pytest.raises(ValueError, match="already holds session 'lease 2'"):
        fold([first], docs, "lease 2", "abc1234", 540)
    assert (docs / "official_speed_gpu.jsonl").read_text() == before
    assert main([str(tmp_path / "absent"), "--session", "x", "--code", "c", "--seconds", "1",
                 "--docs", str(docs)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: ")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no records in"):
        fold([empty], docs, "lease 3", "abc1234", 540)
    assert not list(docs.glob(".*"))  # no temporary file left behind
