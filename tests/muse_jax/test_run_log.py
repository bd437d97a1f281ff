"""metrics.jsonl stays monotone across a resume."""

import json

from muse_jax.run_log import drop_metrics_after


def test_drop_metrics_after_keeps_rows_up_to_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": i, "env_steps": 50 * i} for i in range(1, 6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 6, "env_st')  # torn tail
    drop_metrics_after(path, 150)
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["env_steps"] for r in kept] == [50, 100, 150]
    drop_metrics_after(tmp_path / "absent.jsonl", 10)  # a fresh run has no file: nothing to do
    assert not (tmp_path / "absent.jsonl").exists()
