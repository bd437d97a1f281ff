"""The one reader of a run folder's JSON files (`muse_common.files.read_json_object`) and the files read
through it: whatever bytes such a file holds, a command gets the object or one line naming the file, what
it should be and the fix, never a traceback (AttributeError on a list, KeyError on a missing field)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muse_common import files
from muse_common.files import RunFileError, read_json_object

FIX = "delete it and rerun"


@pytest.mark.parametrize(("text", "problem"), [
    (b"{broken", "not valid JSON"),
    (b"\xff\xfe\x00binary", "not UTF-8 text"),
    (b"[1, 2]", "a JSON list, not an object"),
    (b'"text"', "a JSON str, not an object"),
    (b"[" * 100_000, "not valid JSON"),  # nested past the parser's recursion limit
    (b'{"dim": 16}', "no 'hidden'"),
    (b'{"dim": 16, "hidden": "64"}', "'hidden' is '64', not int"),
    (b'{"dim": true, "hidden": 64}', "'dim' is 'True', not int"),  # a bool is no int
])
def test_a_file_that_is_not_the_object_is_named_in_one_line(tmp_path, text, problem):
    path = tmp_path / "meta.json"
    path.write_bytes(text)
    with pytest.raises(RunFileError) as err:
        read_json_object(path, "a meta file", FIX, fields=(("dim", int), ("hidden", int)))
    message = str(err.value)
    assert message.startswith(f"{path} is not a meta file (") and problem in message and message.endswith(FIX)
    assert "\n" not in message


def test_the_object_comes_back_and_a_big_file_is_refused_unread(tmp_path, monkeypatch):
    path = tmp_path / "meta.json"
    path.write_text(json.dumps({"dim": 16, "hidden": 64, "note": "x" * 100}))
    assert read_json_object(path, "a meta file", FIX, fields=(("dim", int), ("hidden", int)))["hidden"] == 64
    monkeypatch.setattr(files, "JSON_FILE_MAX_BYTES", 64)
    with pytest.raises(RunFileError, match="more than the 0 MiB"):
        read_json_object(path, "a meta file", FIX)
    with pytest.raises(FileNotFoundError):
        read_json_object(tmp_path / "absent.json", "a meta file", FIX)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64) | st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                             lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c,
                                                                                                max_size=3),
                                             max_leaves=8).map(lambda v: json.dumps(v).encode()))
def test_any_bytes_give_the_object_or_one_named_line(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("any") / "x.json"
    path.write_bytes(raw)
    try:
        data = read_json_object(path, "a settings file", FIX, fields=(("k", (int, str)),))
    except RunFileError as e:
        assert str(e).startswith(f"{path} is not a settings file (") and str(e).endswith(FIX)
    else:
        assert isinstance(data, dict) and isinstance(data["k"], int | str)


# ----------------------------------------------------------------------------- files read through it


def test_metagent_memory_file_with_a_pool_that_is_no_list_is_named(tmp_path):
    from llm_side.agents.metagent_p.agent import read_memory_file

    path = tmp_path / "pools.json"
    path.write_text(json.dumps({"success": [], "failure": 7, "rules": []}))
    with pytest.raises(RunFileError, match="'failure' is not a list.*point memory_file="):
        read_memory_file(path)
    path.write_text("[]")
    with pytest.raises(RunFileError, match="a JSON list, not an object"):
        read_memory_file(path)
    path.write_text(json.dumps({"success": [{"not": "a case"}]}))
    assert read_memory_file(path) == {"success": [{"not": "a case"}]}  # a bad entry is the pool's to skip


def test_msa_meta_that_is_no_model_of_ours_is_named_not_a_traceback(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "llm_side"))
    from test_muse_agent import BowEmbedder

    from llm_side.agents import self_awareness as sa

    folder = tmp_path / "msa"
    sa.SelfAwarenessModel(BowEmbedder(), hidden=8).save(folder)
    assert sa.SelfAwarenessModel.load(folder, BowEmbedder()).hidden == 8
    meta = folder / sa.META_FILE
    for text, problem in [("[]", "a JSON list"), ('{"embedder": "bow-test", "dim": 16}', "no 'hidden'"),
                          ('{"embedder": "bow-test", "dim": 16, "hidden": 1000000000}', "not 1 to 65536")]:
        meta.write_text(text)
        with pytest.raises(RunFileError, match=problem + ".*--stage train-sa"):
            sa.SelfAwarenessModel.load(folder, BowEmbedder())


def test_pipeline_stage_with_a_damaged_metrics_mark_stops_in_one_line(tmp_path, capsys):
    from llm_side.pipeline_alfworld import main

    (tmp_path / "actor_sft").mkdir()
    (tmp_path / "actor_sft" / "metrics.json").write_text("[1]")
    assert main(["--stage", "sft", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "actor_sft/metrics.json is not the metrics of a finished `sft` stage" in err
    assert "rerun `--stage sft`" in err
