"""Atomic writes: whole files, shareable permissions, torn JSONL tails ignored."""

import json
import os
import stat

from muse_common.files import append_jsonl, atomic_write_json, read_jsonl


def test_atomic_json_is_complete_and_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write_json(tmp_path / "out" / "results.json", {"a": 1})
    finally:
        os.umask(old)
    assert json.loads(path.read_text()) == {"a": 1}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]  # no temp file left behind


def test_read_jsonl_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "episodes.jsonl"
    append_jsonl(path, {"episode": 0})
    append_jsonl(path, {"episode": 1})
    with open(path, "a") as f:
        f.write('{"episode": 2, "succ')
    assert [r["episode"] for r in read_jsonl(path)] == [0, 1]
