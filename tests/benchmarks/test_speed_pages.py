"""The GPU speed page pairs each row with the official step of its own size and dtype."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from benchmarks.pages import auto_ratios, gpu_vs_official_section, official_of, ratio_to_official
from muse_jax.config import Config
from muse_jax.config.loops import loops_for

AUTO = dataclasses.asdict(loops_for(Config(), "gpu"))
ROLLED = {"observe_unroll": 1, "imag_unroll": 1, "observe_remat": "none"}


def record(size: str, dtype: str, ours_ms: float, official_ms: float | None, loops: dict) -> dict:
    x = {"benchmark": "official_speed", "size": size, "dtype": dtype, "ours_train_step_median_s": ours_ms / 1000,
         "ours_train_step_cpu_s": 0.005, "ours_ready_s": 60.0, "ours_loops": loops, "ours_jax": "0.11.2",
         "device": "NVIDIA H200", "cpu_cores": 16, "rounds": 3, "steps_per_round": 10,
         "order": "ours only" if official_ms is None else "ours, official alternating", "session": "lease"}
    if official_ms is not None:
        x.update(official_train_step_median_s=official_ms / 1000, official_train_step_cpu_s=0.03,
                 official_ready_s=50.0, speed_ratio_official_over_ours=official_ms / ours_ms,
                 cpu_ratio_official_over_ours=6.0)
    return x


def rows() -> list[dict]:
    return [record("size12m", "float32", 18.0, 32.0, AUTO), record("size12m", "bfloat16", 15.0, 28.0, AUTO),
            record("size12m", "float32", 24.0, None, ROLLED), record("size1m", "bfloat16", 8.0, None, AUTO)]


def test_a_row_compares_with_the_official_step_of_its_own_dtype() -> None:
    r = rows()
    assert official_of(r, "size12m", "bfloat16") is r[1]
    assert ratio_to_official(r, r[1]) == pytest.approx(28 / 15)  # not 32.0 / 15.0, the float32 official's
    assert ratio_to_official(r, r[2]) == pytest.approx(32 / 24)
    assert ratio_to_official(r, r[3]) is None  # no bfloat16 pair at size1m: no ratio rather than a float32 one


def test_auto_ratios_are_per_dtype() -> None:
    r = auto_ratios(rows())
    assert r == {"float32": {"size12m": pytest.approx(32 / 18)}, "bfloat16": {"size12m": pytest.approx(28 / 15)}}


def test_a_record_from_before_a_setting_existed_counts_as_the_gpu_default_of_its_time() -> None:
    """Lease 3 timed `auto` before `model.observe_param_grads` existed: its records name three loop settings,
    all the GPU default's, and stay the headline; a record naming the fourth as something else is a variant."""
    before = {k: AUTO[k] for k in ROLLED}
    r = [record("size12m", "float32", 18.0, 32.0, before),
         record("size12m", "float32", 20.0, None, before | {"observe_param_grads": "in_loop"})]
    assert auto_ratios(r) == {"float32": {"size12m": pytest.approx(32 / 18)}}
    r[0]["ours_loops"] = before | {"observe_unroll": 4}
    assert auto_ratios(r) == {}


def test_the_section_names_each_rows_dtype(tmp_path: Path) -> None:
    (tmp_path / "official_speed_gpu.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows()))
    text = "\n".join(gpu_vs_official_section(tmp_path))
    auto = "unroll 8/15, remat dots, weight grads after the loop"
    assert f"| size12m | bfloat16 | {auto} | 15.0 ms | 28.0 ms | **1.87x**" in text
    assert f"| size1m | bfloat16 | {auto} | 8.0 ms | - |" in text
    assert "not at size12m (float32) and size12m (bfloat16)" in text


def test_the_learning_loop_rows_say_whether_the_target_is_met(tmp_path: Path) -> None:
    from benchmarks.pages import loop_section

    assert loop_section(tmp_path, "gpu") == []  # no records: no section
    run = {"benchmark": "collect_overhead_loop", "summary": True, "config": "quickstart",
           "sets": ["model.size=size1m", "train.train_ratio=512"], "size": "size1m", "num_envs": 4, "batch": 16,
           "seq": 32, "train_ratio": 512.0, "device": "NVIDIA H200", "updates": 40, "session": "lease 4",
           "serial_loop_updates_per_s": 30.0, "serial_bench_updates_per_s": 50.0, "serial_ratio": 0.6,
           "overlap_loop_updates_per_s": 47.0, "overlap_bench_updates_per_s": 50.0, "overlap_ratio": 0.94}
    (tmp_path / "collect_overhead_gpu.jsonl").write_text(json.dumps(run) + "\n")
    text = "\n".join(loop_section(tmp_path, "gpu"))
    assert "--set model.size=size1m --set train.train_ratio=512 --updates 40" in text
    assert "| lease 4 | 512 | serial | 30.0 | 50.0 | **0.60** | not met |" in text
    assert "| lease 4 | 512 | overlapped | 47.0 | 50.0 | **0.94** | **met** |" in text


def test_the_readme_quotes_the_latest_lease_that_timed_the_official(tmp_path: Path) -> None:
    from benchmarks.pages import readme_results

    docs = Path(__file__).resolve().parents[2] / "docs"
    before = readme_results(docs)
    shutil.copytree(docs, tmp_path / "docs")
    alone = record("size12m", "float32", 5.0, None, AUTO) | {"session": "a lease without the official"}
    with (tmp_path / "docs" / "official_speed_gpu.jsonl").open("a") as f:
        f.write(json.dumps(alone) + "\n")
    assert readme_results(tmp_path / "docs") == before  # not "5.0 ms", and no empty ratio phrase


def test_the_cpu_loop_rows_name_their_date_load_and_each_command(tmp_path: Path) -> None:
    from benchmarks.pages import loop_section

    base = {"benchmark": "collect_overhead_loop", "summary": True, "config": "quickstart", "size": "size1m",
            "num_envs": 4, "batch": 16, "seq": 32, "device": "cpu", "cpu_cores": 2, "updates": 40,
            "date": "2026-11-28", "loadavg_1m": 1.25, "loadavg_1m_end": 3.0}
    runs = [base | {"sets": ["model.size=size1m", f"train.train_ratio={tr}"], "train_ratio": float(tr),
                    "serial_loop_updates_per_s": 2.5, "serial_bench_updates_per_s": 3.125, "serial_ratio": 0.8,
                    "overlap_loop_updates_per_s": 3.5, "overlap_bench_updates_per_s": 3.5, "overlap_ratio": 1.0}
            for tr in (512, 64)]
    (tmp_path / "collect_overhead_cpu.jsonl").write_text("".join(json.dumps(x) + "\n" for x in runs))
    assert loop_section(tmp_path, "gpu") == []  # the CPU's records are not the GPU's
    text = "\n".join(loop_section(tmp_path, "cpu"))
    assert "on the CPU" in text and "2-core CPU" in text
    assert "train.train_ratio=512 --updates 40" in text and "train.train_ratio=64 --updates 40" in text
    assert "| 2026-11-28 | 512 | serial | 2.50 | 3.12 | **0.80** | not met | 1.2-3.0 |" in text
    assert "| 2026-11-28 | 64 | overlapped | 3.50 | 3.50 | **1.00** | **met** | 1.2-3.0 |" in text
    (tmp_path / "collect_overhead_cpu.jsonl").write_text("".join(
        json.dumps(x | {"overlap_ratio": r}) + "\n" for x, r in ((runs[0], 1.0), (runs[0], 0.95))))
    text = "\n".join(loop_section(tmp_path, "cpu"))  # two runs of one ratio: one sentence with the range
    assert ("Train ratio 512: the loop runs at 0.80x its train step's rate serially and 0.95-1.00x with "
            "`train.overlap_collect` (2 runs) (target: at least 0.9x)") in text


def test_the_readme_phrase_takes_the_most_updates_per_tick_and_the_gpu_first(tmp_path: Path) -> None:
    from benchmarks.pages import loop_phrase

    assert loop_phrase(tmp_path) == ""  # no records: nothing said
    run = {"summary": True, "serial_ratio": 0.7, "overlap_ratio": 0.95, "cpu_cores": 2}
    cpu = [run | {"train_ratio": 512.0}, run | {"train_ratio": 512.0, "overlap_ratio": 1.05},
           run | {"train_ratio": 64.0, "overlap_ratio": 0.5}, {"summary": False, "train_ratio": 4096.0}]
    (tmp_path / "collect_overhead_cpu.jsonl").write_text("".join(json.dumps(x) + "\n" for x in cpu))
    (tmp_path / "collect_overhead_gpu.jsonl").write_text(json.dumps(run | {"train_ratio": 512.0}) + "\n")
    assert loop_phrase(tmp_path) == (
        "; a learning run keeps 0.95x with `train.overlap_collect` on one GPU at train ratio 512 (0.70x serially)"
        " and 0.95-1.05x with `train.overlap_collect` on 2 CPU cores at train ratio 512 (0.70x serially) of its "
        "train step's updates/s (target: at least 0.9x)")


def test_cpu_loop_runs_on_two_processors_are_told_apart_and_the_readme_takes_the_latest_ones(tmp_path: Path) -> None:
    from benchmarks.pages import loop_phrase, loop_section

    base = {"benchmark": "collect_overhead_loop", "summary": True, "config": "quickstart", "size": "size1m",
            "num_envs": 4, "batch": 16, "seq": 32, "device": "cpu", "cpu_cores": 2, "updates": 40,
            "date": "2026-11-29", "loadavg_1m": 1.25, "loadavg_1m_end": 3.0, "train_ratio": 512.0,
            "sets": ["train.train_ratio=512"], "serial_loop_updates_per_s": 2.5, "serial_bench_updates_per_s": 3.125,
            "serial_ratio": 0.8, "overlap_loop_updates_per_s": 3.5, "overlap_bench_updates_per_s": 3.5,
            "overlap_ratio": 1.0}
    newer = base | {"cpu_model": "Acme X1 Processor (family 1 model 2; avx2)", "serial_ratio": 0.6,
                    "overlap_ratio": 0.85}
    (tmp_path / "collect_overhead_cpu.jsonl").write_text(json.dumps(base) + "\n" + json.dumps(newer) + "\n")
    text = "\n".join(loop_section(tmp_path, "cpu"))
    assert "| 2026-11-29 | not recorded | 512 | serial | 2.50 | 3.12 | **0.80** | not met | 1.2-3.0 |" in text
    assert "| 2026-11-29 | Acme X1 (family 1 model 2; avx2) | 512 | overlapped |" in text
    assert "**What it shows.** On an unrecorded processor, train ratio 512: the loop runs at 0.80x" in text
    assert ("on Acme X1 (family 1 model 2; avx2), train ratio 512: the loop runs at 0.60x its train step's rate "
            "serially and 0.85x") in text
    assert loop_phrase(tmp_path) == (
        "; a learning run keeps 0.85x with `train.overlap_collect` on 2 CPU cores of an Acme X1 (family 1 model 2; "
        "avx2) at train ratio 512 (0.60x serially) of its train step's updates/s (target: at least 0.9x)")


def test_a_pair_with_the_officials_deterministic_ops_off_is_named_and_never_the_headline(tmp_path: Path) -> None:
    r = rows()
    fast = record("size12m", "float32", 18.0, 27.0, AUTO) | {"official_deterministic": False}
    r.append(fast)
    assert official_of(r, "size12m", "float32") is r[0]  # ours-only rows compare with the official's defaults
    assert ratio_to_official(r, r[2]) == pytest.approx(32 / 24)
    assert ratio_to_official(r, fast) == pytest.approx(27 / 18)  # a pair compares with its own official
    assert auto_ratios(r)["float32"] == {"size12m": pytest.approx(32 / 18)}  # the headline: the official's defaults
    (tmp_path / "official_speed_gpu.jsonl").write_text("".join(json.dumps(x) + "\n" for x in r))
    text = "\n".join(gpu_vs_official_section(tmp_path))
    assert "| 18.0 ms | 27.0 ms (deterministic ops off) | **1.50x** |" in text
    assert "With the official's deterministic GPU ops off (its default is on; the stronger control): **1.50x**" in text
    assert ("1.50x (size12m, float32, unroll 8/15, remat dots, weight grads after the loop, the official's "
            "deterministic ops off)") in text


def test_a_bfloat16_cpu_run_is_its_own_row_and_never_the_float32_headline(tmp_path: Path) -> None:
    from benchmarks.pages import readme_results, speed

    docs = Path(__file__).resolve().parents[2] / "docs"
    before = readme_results(docs)
    shutil.copytree(docs, tmp_path / "docs")
    path = tmp_path / "docs" / "official_speed_cpu.jsonl"
    runs = [json.loads(x) for x in path.read_text().splitlines() if '"official_speed"' in x]
    last = [x for x in runs if x.get("dtype", "float32") == "float32"][-1]
    bf16 = last | {"dtype": "bfloat16", "speed_ratio_official_over_ours": 3.21}
    with path.open("a") as f:
        f.write(json.dumps(bf16) + "\n")
    page = speed(tmp_path / "docs")
    assert "at bfloat16 on both sides " in page and f"3.21x ({last['size']})" in page
    assert f"--size {last['size']}" in page and "--dtype bfloat16" in page
    assert f"| {last['size']} | bfloat16 |" in page
    after = readme_results(tmp_path / "docs")
    float32_part = f"{last['speed_ratio_official_over_ours']:.2f}x ({last['size']})"
    assert float32_part in before.split("(bfloat16")[0] and float32_part in after.split("(bfloat16")[0]
    assert f"3.21x ({last['size']})" in after and f"3.21x ({last['size']})" not in after.split("(bfloat16")[0]


def test_a_record_made_under_a_host_memory_setting_names_it(tmp_path, monkeypatch, capsys):
    """docs/speed.md, "Host memory": glibc settings move a CPU step by 15-22%, so a speed record made under one
    says so, and one made with the defaults is left as it was."""
    import json

    from benchmarks.report import HOST_MALLOC_VARIABLES, emit_record

    for name in (*HOST_MALLOC_VARIABLES, "XLA_FLAGS"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "speed.jsonl"
    assert emit_record({"benchmark": "x"}, str(out)).keys() == {"benchmark", "cpu_model"}
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    emitted = emit_record({"benchmark": "y"}, str(out))
    assert emitted["host_malloc"] == {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert "host_malloc" not in lines[0] and lines[1] == emitted
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == emitted


def _host_memory_speed_run(size: str, variant: str, rnd: int, ours: float, official: float) -> dict:
    """One `host_memory.py` record of `official/speed.py` (this project's and the official's step, seconds)."""
    return {"benchmark": "official_speed", "size": size, "variant": variant, "round": rnd, "batch": 16, "seq": 64,
            "dtype": "float32", "rounds": 3, "steps_per_round": 3, "cpu_cores": 2, "ours_jax": "0.10.2",
            "official_jax": "0.4.33", "ours_train_step_median_s": ours, "ours_train_step_cpu_s": 2 * ours,
            "official_train_step_median_s": official, "official_train_step_cpu_s": 2 * official,
            "ours_minor_faults_per_step": 100.0, "official_minor_faults_per_step": 50.0,
            "speed_ratio_official_over_ours": official / ours, "cpu_ratio_official_over_ours": official / ours,
            "loadavg_1m_min": 1.0, "loadavg_1m_max": 2.0}


def test_the_host_memory_section_takes_medians_per_size_and_variant(tmp_path: Path) -> None:
    from benchmarks.pages import host_memory_section

    run = _host_memory_speed_run
    lines = [run("size1m", "defaults", 1, 1.0, 1.4), run("size1m", "hugetlb", 1, 0.8, 1.2),
             run("size1m", "defaults", 2, 1.0, 1.6), run("size12m", "hugetlb", 1, 4.0, 4.4)]
    (tmp_path / "host_memory_speed_cpu.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    text = "\n".join(host_memory_section(tmp_path))
    assert "At size1m, with the same setting on both sides, the official's step takes 1.50x (defaults), 1.50x " \
           "(hugetlb)" in text  # the defaults' two rounds: median of 1.4 and 1.6
    assert "At size12m, with the same setting on both sides, the official's step takes 1.10x (hugetlb)" in text
    assert "| `defaults` | glibc defaults | 2 |" in text and "`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`" in text
    assert host_memory_section(tmp_path / "nothing") == []


def test_the_host_memory_loop_table_gives_each_variants_loop_over_bench_ratio_and_its_range(tmp_path: Path) -> None:
    from benchmarks.pages import host_memory_section

    def loop(variant: str, rnd: int, overlap: float, bench: float) -> dict:
        return {"benchmark": "collect_overhead_loop", "summary": True, "variant": variant, "round": rnd,
                "config": "quickstart", "sets": ["model.size=size1m"], "size": "size1m", "num_envs": 4,
                "train_ratio": 512.0, "updates": 40, "cpu_cores": 2, "loadavg_1m": 1.5, "loadavg_1m_end": 2.5,
                "serial_loop_updates_per_s": 1.0, "overlap_loop_updates_per_s": overlap,
                "overlap_bench_updates_per_s": bench, "overlap_ratio": overlap / bench}

    lines = [loop("defaults", 1, 1.6, 1.6), loop("hugetlb", 1, 2.0, 2.5), loop("defaults", 2, 2.0, 2.0),
             loop("hugetlb", 2, 2.8, 2.5)]
    (tmp_path / "host_memory_loop_cpu.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    speed = _host_memory_speed_run("size1m", "defaults", 1, 1.0, 1.4)
    (tmp_path / "host_memory_speed_cpu.jsonl").write_text(json.dumps(speed) + "\n")  # the section needs one
    text = "\n".join(host_memory_section(tmp_path))
    assert "overlapped / bench: median (runs)" in text
    assert "| `defaults` | 2 | 1.00 | **1.80** | 1.80 | 1.00x (1.00x) |" in text  # both runs at 1.00: one value
    assert "| `hugetlb` | 2 | 1.00 | **2.40** | 2.50 | 0.96x (0.80-1.12x) |" in text


def test_a_record_names_its_processor_and_any_xla_flags(tmp_path, monkeypatch):
    """Two 2-core machines of one kind differed ~2x in CPU time per step, and an XLA flag changes a step's
    time: every record names the processor, and one made with XLA_FLAGS set names them."""
    from benchmarks.report import cpu_model, emit_record

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    plain = emit_record({"benchmark": "x"}, None)
    assert plain["cpu_model"] == cpu_model() and plain["cpu_model"] not in ("", "unknown")
    assert "xla_flags" not in plain
    monkeypatch.setenv("XLA_FLAGS", " --xla_cpu_use_onednn=true ")
    flagged = emit_record({"benchmark": "y", "cpu_model": "kept"}, str(tmp_path / "r.jsonl"))
    assert flagged["xla_flags"] == "--xla_cpu_use_onednn=true" and flagged["cpu_model"] == "kept"


def test_the_cpu_table_names_processors_and_the_readme_quotes_the_latest_ones_runs_alone(tmp_path: Path) -> None:
    from benchmarks.pages import processor, readme_results, speed

    docs = Path(__file__).resolve().parents[2] / "docs"
    shutil.copytree(docs, tmp_path / "docs")
    path = tmp_path / "docs" / "official_speed_cpu.jsonl"
    runs = [json.loads(x) for x in path.read_text().splitlines() if '"official_speed"' in x]
    last = [x for x in runs if x.get("dtype", "float32") == "float32"][-1]
    other = last | {"cpu_model": "AMD EPYC 9999 64-Core Processor (family 25 model 17; avx512, avx2)",
                    "speed_ratio_official_over_ours": 9.87}
    flagged = last | {"xla_flags": "--xla_cpu_use_onednn=true", "speed_ratio_official_over_ours": 7.65}
    with path.open("a") as f:
        f.write(json.dumps(other) + "\n" + json.dumps(flagged) + "\n")
    assert processor(other) == "AMD EPYC 9999 64-Core (family 25 model 17; avx512, avx2)"
    assert processor({}) == "not recorded"
    page = speed(tmp_path / "docs")
    assert f"| {last['size']} | float32 | AMD EPYC 9999 64-Core (family 25 model 17; avx512, avx2) |" in page
    assert "on AMD EPYC 9999 64-Core (family 25 model 17; avx512, avx2): 9.87x" in page
    assert "7.65x" not in page  # a run under XLA flags is not the defaults' figure
    readme = readme_results(tmp_path / "docs")
    assert "on 2 CPU cores of an AMD EPYC 9999" in readme and f"9.87x ({last['size']})" in readme
    earlier = {x["size"] for x in runs if processor(x) == processor(last)} - {last["size"]}
    for size in earlier:  # the other sizes were timed on another processor: not quoted beside this one
        assert f"({size})" not in readme.split("of an AMD")[1].split("; on one NVIDIA")[0]


def test_the_adaptation_overlap_section_gives_each_settings_range_of_overlapped_over_serial(tmp_path: Path) -> None:
    from benchmarks.pages import adapt_overlap_section

    def run(serial: float, overlap: float, sets: list[str]) -> dict:
        return {"benchmark": "adapt_overlap", "checkpoint": "/x", "checkpoint_config": "quickstart", "agent": "muse",
                "tasks": 2, "episodes_per_task": 2, "overrides": sets, "rounds": 3, "warmup_s": 80.0,
                "serial_s": [serial] * 3, "overlap_s": [overlap] * 3, "serial_median_s": serial,
                "overlap_median_s": overlap, "speedup": serial / overlap, "device": "cpu", "cpu_cores": 2,
                "loadavg_1m_end": 2.0, "code": "abc1234", "date": "2026-11-29",
                "cpu_model": "Acme X1 Processor (family 1 model 2; avx2)"}

    lines = [run(50.0, 52.5, ["adapt.train_ratio=512"]), run(50.0, 55.0, ["adapt.train_ratio=512"]),
             run(40.0, 30.0, [])]
    (tmp_path / "adapt_overlap_cpu.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    text = "\n".join(adapt_overlap_section(tmp_path))
    assert ("adaptation takes 1.05x-1.10x its serial wall time (muse, quickstart checkpoint, adapt.train_ratio=512; "
            "2 runs); 0.75x its serial wall time (muse, quickstart checkpoint, its own settings; 1 run)") in text
    assert "| quickstart | muse | `adapt.train_ratio=512` | 2 x 2 | 50.0 (50.0, 50.0, 50.0) |" in text
    assert "**0.95x**" in text and "**1.33x**" in text and "(Acme X1 (family 1 model 2; avx2))" in text
    assert adapt_overlap_section(tmp_path / "nothing") == []


def test_an_unjudged_curve_names_the_variant_of_each_seed_it_quotes() -> None:
    """Runs of two variants on one network share a sentence: each value is named by its seed and variant, never
    a bare 'seed(s) 0, 1, 1, 0' that reads as duplicated seeds."""
    from benchmarks.pages import last_window_sentence

    lines = [{"impl": "muse_jax", "seed": s, "env_steps": 12000, "score": v, "variant": var}
             for s, v, var in ((0, 11.1, "pipeline"), (1, 6.8, "pipeline"), (1, 10.7, "start"), (0, 14.0, "start"))]
    text = last_window_sentence(lines, lines, "score")
    assert text.startswith("At 12k agent steps seed 0 (`pipeline`) reaches 11.1, seed 1 (`pipeline`) reaches 6.8, "
                           "seed 0 (`start`) reaches 14.0, seed 1 (`start`) reaches 10.7")
    plain = [{**x, "variant": None} for x in lines[:2]]
    assert last_window_sentence(plain, plain, "score") == "At 12k agent steps its seed(s) 0, 1 reach 11.1, 6.8."
