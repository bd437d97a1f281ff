"""benchmarks/lora_step.py on a tiny real Llama: both dtypes timed in one process, one JSON record."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

pytest.importorskip("peft")


def test_lora_step_times_both_dtypes_and_appends_one_record(tmp_path: Path, capsys) -> None:
    from benchmarks import lora_step
    from llm_side.training import sft

    base = sft.build_tiny_llama(tmp_path / "base", ["go to the desk and open the drawer"] * 8)
    out = tmp_path / "lora.jsonl"
    record = lora_step.main(["--base", str(base), "--tokens", "32", "--repeats", "2", "--out", str(out)])
    assert record["benchmark"] == "lora_step" and record["tokens"] == 32
    assert len(record["float32_steps_s"]) == len(record["bfloat16_steps_s"]) == 2
    assert record["float32_s_per_row"] > 0 and record["bfloat16_s_per_row"] > 0
    medians = [statistics.median(record[f"{d}_steps_s"]) for d in ("float32", "bfloat16")]
    assert record["float32_over_bfloat16"] == pytest.approx(medians[0] / medians[1], abs=0.006)
    assert json.loads(out.read_text().splitlines()[-1])["code"] == record["code"]
    with pytest.raises(SystemExit):
        lora_step.main(["--base", str(tmp_path / "nope")])
    assert "is not a transformers model folder" in capsys.readouterr().err
