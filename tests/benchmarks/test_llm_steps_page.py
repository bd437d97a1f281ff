"""The LLM step-time page: one row per benchmark run, the threads that ran the model, a whole episode's mean."""

import json
from pathlib import Path

from benchmarks.pages import LLM_STEP_RECORDS, llm_steps, llm_steps_command

GAME = "valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/trial_T20190908_222917_366542"


def record(backend: str, react: list[float], muse: list[float], **extra) -> dict:
    x = {"benchmark": "llm_agent_steps", "model": "qwen0.5b", "backend": backend, "game": GAME,
         "steps": len(react) or len(muse), "repeats": 1, "rollouts": 5, "rollout_tokens": "64",
         "react_s_per_step": sorted(react)[len(react) // 2] if react else None,
         "muse_s_per_step": sorted(muse)[len(muse) // 2] if muse else None,
         "react_steps_s": react, "muse_steps_s": muse, "load_avg_1min": [1.5, 1.8], "torch_threads": 1,
         "machine": "x86_64, 2 cores", "cpu_model": "Intel(R) Xeon(R) Processor (family 6 model 167; avx2)"}
    x["muse_over_react"] = x["muse_s_per_step"] / x["react_s_per_step"] if react and muse else None
    return x | extra


def write(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / LLM_STEP_RECORDS
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_rows_name_the_threads_that_ran_the_model_and_say_what_was_not_recorded(tmp_path: Path) -> None:
    old_server = record("openai-server (muse-llm serve --engine llama.cpp)", [1.5, 1.9], [27.0, 28.6])
    in_process = record("transformers", [8.0, 9.7], [29.0, 31.2], torch_threads=2)
    page = llm_steps(write(tmp_path, [old_server, in_process]))
    rows = [r for r in page.splitlines() if r.startswith("| qwen0.5b")]
    assert len(rows) == 2
    assert "| `muse-llm serve --engine llama.cpp` | not recorded |" in rows[0]  # the client's torch threads are not it
    assert "| in process (transformers) | 2 |" in rows[1]
    assert rows[0].count("not recorded") == 2  # threads and won, for a record from before they were kept
    assert "MUSE_LLM_THREADS=2 python benchmarks/llm_sampling.py" in page
    assert "The fastest MUSE-LLM step is 28.6 s (qwen0.5b, `muse-llm serve --engine llama.cpp`" in page


def test_a_whole_episode_row_gives_its_mean_and_whether_it_was_won(tmp_path: Path) -> None:
    steps = [1.0] * 25 + [9.0] * 25  # the prompt grows: later steps cost more
    whole = record("openai-server (muse-llm serve --engine llama.cpp)", steps, [], agents=["react"],
                   react_mean_s_per_step=5.0, react_won=[False], muse_won=[], server_threads=2)
    page = llm_steps(write(tmp_path, [whole]))
    row = next(r for r in page.splitlines() if r.startswith("| qwen0.5b"))
    assert "| 2 | 50 x 1 | **9** (5) | - | - | 0/1; - |" in row
    assert "Over 50 ReAct steps, qwen0.5b through `muse-llm serve --engine llama.cpp` takes 5 s a step on average " \
           "(0/1 episodes won)." in page
    assert llm_steps_command(whole).endswith("--agents react --serve --engine llama.cpp --threads 2")


def test_no_records_is_a_page_that_says_so(tmp_path: Path) -> None:
    assert "No runs recorded yet." in llm_steps(tmp_path)


def test_lora_step_records_get_their_own_section_after_the_agent_steps(tmp_path: Path) -> None:
    from benchmarks.pages import LORA_STEP_RECORDS

    docs = write(tmp_path, [record("transformers", [10.0, 11.0], [])])
    assert "A LoRA training step" not in llm_steps(docs)
    (docs / LORA_STEP_RECORDS).write_text(json.dumps(
        {"benchmark": "lora_step", "base": "qwen1.5b-x", "tokens": 1024, "float32_s_per_row": 55.4,
         "bfloat16_s_per_row": 25.1, "float32_over_bfloat16": 2.21, "torch_threads": 2,
         "load_avg_1min": [1.9, 2.0], "cpu_model": "Intel(R) Xeon(R) Processor (amx)", "date": "2026-11-29",
         "code": "abc"}) + "\n")
    page = llm_steps(docs)
    assert page.index("| qwen0.5b |") < page.index("\n\n## A LoRA training step (Algorithm 3's SFT and DPO)")
    assert "| qwen1.5b-x | 1024 | 55.4 | 25.1 | **2.21** | 2 | 1.9-2 | Intel Xeon (amx) | 2026-11-29 (abc) |" in page
