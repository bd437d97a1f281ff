"""Records and summaries: resume bookkeeping and the summary.json keys (pure functions)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_side.harness import records as rec
from llm_side.harness.summary import summarize


def test_memory_before_and_torn_tail(tmp_path):
    recs = [
        {"task": "a", "episode": 0, "memory": {"m": 0}},
        {"task": "a", "episode": 1, "memory": {"m": 1}},
        {"task": "b", "episode": 0, "memory": {"m": 9}},
    ]
    assert rec.memory_before(recs, "a", 2) == {"m": 1}
    assert rec.memory_before(recs, "a", 1) == {"m": 0}
    assert rec.memory_before(recs, "c", 0) == {}
    p = tmp_path / "episodes.jsonl"
    p.write_text('{"a": 1}\n{"b"')
    assert rec.repair_torn_tail(p) is True and p.read_text() == '{"a": 1}\n'
    assert rec.repair_torn_tail(p) is False


def test_merge_extras_never_overwrites_runner_keys():
    record = {"task": "a", "success": True}
    rec.merge_extras(record, {"success": False, "plan": "x"})
    assert record["success"] is True and record["plan"] == "x" and record["extras"] == {"success": False}


def test_summary_keys_and_figures():
    rows = [
        {"env": "e", "agent": "a", "task": "t1", "episode": 0, "success": True, "steps": 4, "score": 100.0},
        {
            "env": "e",
            "agent": "a",
            "task": "t1",
            "episode": 1,
            "success": False,
            "steps": 50,
            "score": 20.0,
            "reason": "env crashed: X",
        },
        {"env": "e", "agent": "a", "task": "t2", "episode": 0, "success": True, "steps": 10, "score": None},
    ]
    s = summarize(rows, expected=4)
    for key in (
        "success_rate",
        "mean_steps",
        "mean_score",
        "per_task",
        "episodes",
        "successes",
        "failed_with_reason",
        "time_to_success",
        "complete",
        "expected_episodes",
        "tasks",
    ):
        assert key in s
    assert s["success_rate"] == pytest.approx(2 / 3)
    assert s["mean_steps"] == pytest.approx(64 / 3)
    assert s["mean_score"] == pytest.approx(60.0)  # None scores are left out
    assert s["time_to_success"] == pytest.approx((4 + 100 + 10) / 3)
    assert s["failed_with_reason"] == 1 and s["complete"] is False and s["tasks"] == 2
    assert s["per_task"]["t1"]["success_rate"] == 0.5 and s["per_task"]["t2"]["mean_score"] is None
    empty = summarize([], expected=0)
    assert empty["success_rate"] is None and empty["episodes"] == 0


RECORDS = [{"task": f"t{i}", "episode": i, "text": "x" * i + "\u00e9"} for i in range(6)]
FULL = "".join(json.dumps(r) + "\n" for r in RECORDS).encode()


@settings(deadline=None)  # file I/O: a loaded CI machine takes longer than the 200 ms default
@given(st.integers(min_value=0, max_value=len(FULL)))
def test_a_kill_at_any_byte_leaves_a_prefix_of_whole_records(tmp_path_factory, cut):
    """Whatever byte a kill stops the writer at, readers see whole records only, and after the torn
    tail is repaired the next append lands on its own line."""
    from muse_common.files import append_jsonl, read_jsonl

    p = tmp_path_factory.mktemp("cut") / "episodes.jsonl"
    p.write_bytes(FULL[:cut])
    got = list(read_jsonl(p))
    assert got == RECORDS[: len(got)]
    rec.repair_torn_tail(p)
    append_jsonl(p, {"task": "new", "episode": 99})
    after = list(read_jsonl(p))
    assert after[-1] == {"task": "new", "episode": 99} and after[:-1] == RECORDS[: len(after) - 1]


def _episode(task: str, episode: int, **kw) -> dict:
    return {"env": "e", "task": task, "agent": "a", "episode": episode, "success": False, "steps": 3, **kw}


def _write_lines(folder, lines: list[str], tail: str = "") -> bytes:
    data = ("".join(x + "\n" for x in lines) + tail).encode()
    (folder / rec.EPISODES_FILE).write_bytes(data)
    return data


@pytest.mark.parametrize(("line", "words"), [
    ("{broken", "is not valid JSON"),
    ("42", "is a JSON int, not an episode record"),
    (json.dumps(_episode("t", 1, steps=-7)), "('steps' is -7, not an integer >= 0)"),
    (json.dumps(_episode("t", 1, success="yes")), "('success' is 'yes', not true or false)"),
    (json.dumps(_episode("t", 1, memory=5)), "('memory' is 5, not a mapping)"),
    (json.dumps({"env": "e", "task": "t"}), "(no agent, episode, success, steps)"),
], ids=["not-json", "int", "negative-steps", "success-text", "memory-int", "missing"])
def test_a_malformed_line_inside_the_file_is_refused_in_one_line(tmp_path, line, words):
    """Not the torn tail of a kill: refused (never counted, its episode never silently redone), naming the
    file, the line, the problem and the fix; the file is left as it is, on resume too."""
    data = _write_lines(tmp_path, [json.dumps(_episode("t", 0)), line, json.dumps(_episode("t", 2))])
    for resume in (False, True):
        with pytest.raises(rec.RecordError) as err:
            rec.load_records(tmp_path, warn=pytest.fail, resume=resume)
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"{tmp_path / rec.EPISODES_FILE} line 2 "), message
        assert words in message and "fix or delete that line" in message, message
        assert (tmp_path / rec.EPISODES_FILE).read_bytes() == data


def test_a_torn_last_line_is_ignored_when_read_and_cut_on_resume_with_one_warning(tmp_path):
    good = [_episode("t", 0), _episode("t", 1)]
    data = _write_lines(tmp_path, [json.dumps(r) for r in good], tail='{"env": "e", "task": "t", "epi')
    assert rec.load_records(tmp_path, warn=pytest.fail) == good  # a read changes nothing and says nothing
    assert (tmp_path / rec.EPISODES_FILE).read_bytes() == data
    said: list[str] = []
    assert rec.load_records(tmp_path, warn=said.append, resume=True) == good
    assert len(said) == 1 and "cut a torn last line" in said[0] and "redone" in said[0], said
    assert (tmp_path / rec.EPISODES_FILE).read_text() == "".join(json.dumps(r) + "\n" for r in good)


def test_a_duplicate_is_counted_once_and_said_then_dropped_from_the_file_on_resume(tmp_path):
    first, again = _episode("t", 0, success=True), _episode("t", 0, success=False)
    lines = [json.dumps(first), json.dumps(_episode("t", 1)), json.dumps(again)]
    data = _write_lines(tmp_path, lines)
    said: list[str] = []
    assert rec.load_records(tmp_path, warn=said.append) == [first, _episode("t", 1)]
    assert len(said) == 1 and "dropped 1 duplicate episode record(s) (line(s) 3; the first is kept)" in said[0]
    assert (tmp_path / rec.EPISODES_FILE).read_bytes() == data  # a read (report) leaves the file as it is
    said.clear()
    assert rec.load_records(tmp_path, warn=said.append, resume=True) == [first, _episode("t", 1)]
    assert len(said) == 1 and "the file is left as it is" not in said[0]
    assert rec.load_records(tmp_path, warn=pytest.fail) == [first, _episode("t", 1)]  # rewritten without it


def test_a_nan_competence_is_a_record():
    assert rec.record_problem(_episode("t", 0, competence=[float("nan"), None, 1])) is None
    assert "'competence'" in rec.record_problem(_episode("t", 0, competence=[True]))
