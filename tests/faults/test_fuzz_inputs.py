"""Property-based fuzzing of every reader of user input.

The property, for each reader: a malformed input gives one clear line (the reader's own error type, a message
without a newline) or is handled correctly; never another exception (a traceback), never a hang past a bound,
never a write outside the folder given, never a malformed record kept in a count.

Readers covered: settings files (muse-wm and muse-llm `--config`), `--set` / `--env-opt` values, every record kind
(metrics.jsonl, adapt's episodes.jsonl, learning-curve lines, the LLM episodes.jsonl), `run.json`,
`results.json`, checkpoint metadata (`muse_files.json`), server replies of the OpenAI-compatible backend, and
names from input that become paths.

Example counts are kept small (the `muse-fuzz` profile below, deadline off: the machine may be loaded) so the
suite runs in CI within a few minutes; `HYPOTHESIS_PROFILE=muse-fuzz-long` runs 20x more examples.
"""

from __future__ import annotations

import io
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

settings.register_profile("muse-fuzz", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("muse-fuzz-long", max_examples=800, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "")
FUZZ = settings.get_profile(_PROFILE if _PROFILE.startswith("muse-fuzz") else "muse-fuzz")


def one_line(error: BaseException) -> None:
    text = str(error)
    assert text and "\n" not in text, f"not one line: {text!r}"
    assert "Traceback" not in text


# -- strategies ---------------------------------------------------------------------------------------------------
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
yaml_fragments = st.sampled_from(["a", ":", " ", "\n", "  ", "-", "[", "]", "{", "}", ",", "&x", "*x",
                                  "!!python/object", "!!str", "'", '"', "#", "1e9", "model", "deter", "env",
                                  "tasks", "\t", "|", ">",
                                  "%YAML 1.1", "---", "...", "\x00", "é", "null", "~", "?", "<<"])
yaml_texts = st.one_of(st.text(max_size=200), st.lists(yaml_fragments, max_size=60).map("".join))


def _sections() -> list[tuple[str, type]]:
    import dataclasses
    import typing

    from muse_jax.config.schema import Config

    out = []
    for f in dataclasses.fields(Config):
        tp = typing.get_type_hints(Config)[f.name]
        if dataclasses.is_dataclass(tp):
            out += [(f"{f.name}.{g.name}", typing.get_type_hints(tp)[g.name]) for g in dataclasses.fields(tp)]
    return out


# -- settings files and --set values ------------------------------------------------------------------------------
@FUZZ
@given(text=yaml_texts)
def test_fuzz_settings_files(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    from llm_side.run_settings import SettingsError as RunSettingsError
    from llm_side.run_settings import load_settings
    from muse_common.settings import SettingsError, read_yaml_mapping

    path = tmp_path_factory.mktemp("cfg") / "cfg.yaml"
    path.write_bytes(text.encode("utf-8", errors="replace"))
    for read, error in ((lambda: read_yaml_mapping(path), SettingsError),
                        (lambda: load_settings(str(path), ("env", "agent", "tasks")), RunSettingsError)):
        try:
            assert isinstance(read(), dict)
        except error as e:
            one_line(e)


@FUZZ
@given(data=st.data())
def test_fuzz_set_overrides(data: st.DataObject) -> None:
    from muse_jax.config import ConfigError, load_config

    keys = _sections()
    pairs = data.draw(st.lists(st.one_of(
        st.sampled_from(keys).flatmap(lambda kt: st.one_of(json_scalars, yaml_texts).map(
            lambda v: f"{kt[0]}={v if isinstance(v, str) else json.dumps(v)}")),
        yaml_texts.map(lambda t: f"model.{t}=1"), yaml_texts), max_size=3))
    try:
        load_config("smoke", pairs)
    except ConfigError as e:
        one_line(e)


@FUZZ
@given(pairs=st.lists(st.text(max_size=40), max_size=4))
def test_fuzz_agent_and_env_options(pairs: list[str]) -> None:
    from llm_side.run_spec import UsageError, check_options, parse_options

    try:
        opts = parse_options(pairs, "--agent-opt")
        check_options("agent", "react", opts)
    except UsageError as e:
        one_line(e)


# -- record kinds --------------------------------------------------------------------------------------------------
def _valid(kind: str, i: int) -> dict:
    return {"metrics": {"step": 50 * i, "env_steps": 50 * i, "loss": 0.5},
            "adapt": {"task": f"t{i % 3}", "episode": i // 3, "success": i % 2 == 0, "score": 1.0},
            "curve": {"impl": "muse_jax", "agent": "dreamer", "seed": 0, "env_steps": 5000 * i, "score": 2.0},
            "official": {"env_steps": 100 * i, "score": 1.0, "train_steps": i, "wall_s": 1.5, "success": None}}[kind]


def _kind(kind: str):  # noqa: ANN202
    import dataclasses

    from benchmarks.learning_curve import line_key
    from muse_common import records

    return {"metrics": records.PRETRAIN_METRICS, "adapt": records.ADAPT_EPISODE,
            "curve": dataclasses.replace(records.CURVE_LINE, key=line_key), "official": records.OFFICIAL_EVENT}[kind]


record_lines = st.lists(st.one_of(
    st.tuples(st.just("valid"), st.integers(0, 12)),
    st.tuples(st.just("mutated"), st.tuples(st.integers(0, 12), st.text(max_size=10), json_values)),
    st.tuples(st.just("raw"), st.binary(max_size=40))), max_size=12)


@FUZZ
@given(kind=st.sampled_from(["metrics", "adapt", "curve", "official"]), lines=record_lines, torn=st.binary(max_size=30),
       resume=st.booleans())
def test_fuzz_record_readers(tmp_path_factory: pytest.TempPathFactory, kind: str, lines: list, torn: bytes,
                             resume: bool) -> None:
    from muse_common.records import RecordError, read_records

    schema = _kind(kind)
    raw, malformed = [], False  # malformed: a complete line that is JSON of a record failing the schema
    for what, arg in lines:
        if what == "valid":
            rec = _valid(kind, arg)
        elif what == "mutated":
            i, key, value = arg
            rec = {**_valid(kind, i), key: value}
        else:
            raw.append(arg.replace(b"\n", b" "))  # garbage: blank (skipped), or not JSON / not a record (refused)
            continue
        line = json.dumps(rec).encode()
        problem = schema.problem(json.loads(line))
        malformed |= problem is not None
        raw.append(line)
    path = tmp_path_factory.mktemp("rec") / "r.jsonl"
    tail = torn.replace(b"\n", b"")
    path.write_bytes(b"".join(x + b"\n" for x in raw) + tail)
    said: list[str] = []
    try:
        got = read_records(path, schema, resume=resume, say=said.append)
    except RecordError as e:
        one_line(e)
        assert str(path) in str(e) and " line " in str(e)
        return
    assert not malformed, "a record failing the schema was read without a word"
    for r in got:  # nothing malformed is ever kept, and each key once
        assert schema.problem(r) is None
    if schema.key is not None:
        keys = [schema.key(r) for r in got]
        assert len(keys) == len(set(keys))
    assert all("\n" not in s for s in said)
    if resume:  # the file now holds exactly what was read, whole lines only
        assert read_records(path, schema) == got
        assert path.read_bytes() == b"" or path.read_bytes().endswith(b"\n")


llm_record = st.fixed_dictionaries(
    {"env": st.just("minecraft"), "task": st.sampled_from(["a", "b"]), "agent": st.just("react"),
     "episode": st.one_of(st.integers(0, 3), json_scalars), "success": st.one_of(st.booleans(), json_scalars),
     "steps": st.one_of(st.integers(0, 5), json_scalars)},
    optional={"memory": json_values, "competence": json_values})


def _llm_problem(line: str) -> str | None:
    from llm_side.harness import records as rec

    try:
        return rec.record_problem(json.loads(line))
    except ValueError:
        return "not JSON"


@FUZZ
@given(records=st.lists(st.one_of(llm_record.map(json.dumps), st.text(max_size=30)), max_size=10),
       torn=st.text(max_size=20))
def test_fuzz_llm_episode_records_never_count_a_malformed_one(tmp_path_factory: pytest.TempPathFactory,
                                                               records: list[str], torn: str) -> None:
    from llm_side.harness import records as rec
    from llm_side.harness.summary import summarize

    out = tmp_path_factory.mktemp("llm")
    lines = [r.replace("\n", " ") for r in records]
    (out / rec.EPISODES_FILE).write_text("".join(x + "\n" for x in lines) + torn.replace("\n", ""))
    warnings: list[str] = []
    try:
        got = rec.load_records(out, warn=warnings.append)
    except rec.RecordError as e:  # a complete line that is not a record: refused in one line, nothing counted
        assert "\n" not in str(e) and " line " in str(e), e
        assert any(x.encode().strip() and _llm_problem(x) for x in lines), lines
        return
    assert all(_llm_problem(x) is None for x in lines if x.encode().strip())  # records (and blanks) read
    assert all(rec.record_problem(r) is None for r in got)
    assert len({(r["task"], r["episode"]) for r in got}) == len(got)
    summary = summarize(got)
    assert summary["episodes"] == len(got)
    assert summary["successes"] == sum(r["success"] is True for r in got)
    assert all("\n" not in w for w in warnings)


# -- run.json, results.json, checkpoint metadata ------------------------------------------------------------------
@FUZZ
@given(content=st.one_of(json_values.map(json.dumps), st.binary(max_size=60).map(lambda b: b.decode("latin-1"))))
def test_fuzz_run_json(tmp_path_factory: pytest.TempPathFactory, content: str) -> None:
    from llm_side.run_spec import UsageError, check_resume

    path = tmp_path_factory.mktemp("run") / "run.json"
    path.write_text(content, encoding="latin-1")
    settings_now = {"env": "minecraft", "agent": "react", "model": "openai:http://x/v1:m", "seed": 0, "episodes": 1,
                    "max_steps": 3, "tasks": ["mine_log"], "env_opt": {}, "agent_opt": {}}
    try:
        check_resume(path, settings_now)
    except UsageError as e:
        one_line(e)


@FUZZ
@given(content=st.one_of(json_values, st.fixed_dictionaries(
    {"agent": json_values, "episodes": json_values, "tasks": st.lists(st.fixed_dictionaries(
        {"task": st.text(max_size=8)}, optional={"episodes": json_values, "solved": json_values}), max_size=3)})))
def test_fuzz_results_json(tmp_path_factory: pytest.TempPathFactory, content: object) -> None:
    from muse_jax.cli import UsageError, check_results_files

    run = tmp_path_factory.mktemp("adapt")
    (run / "results.json").write_text(json.dumps(content))
    try:
        check_results_files([str(run)])
    except UsageError as e:
        one_line(e)


@FUZZ
@given(content=st.one_of(json_values.map(lambda v: json.dumps({"files": v})), json_values.map(json.dumps),
                         st.binary(max_size=60).map(lambda b: b.decode("latin-1"))))
def test_fuzz_checkpoint_metadata(tmp_path_factory: pytest.TempPathFactory, content: str) -> None:
    from muse_jax.checkpoint import INTEGRITY_FILE, verify_integrity
    from muse_jax.errors import CheckpointCorruptError

    step = tmp_path_factory.mktemp("ck") / "checkpoints" / "100"
    step.mkdir(parents=True)
    (step / "data").write_bytes(b"x" * 10)
    (step / INTEGRITY_FILE).write_text(content, encoding="latin-1")
    try:
        verify_integrity(step)
    except CheckpointCorruptError as e:
        one_line(e)


# -- server replies ---------------------------------------------------------------------------------------------
class _Response(io.BytesIO):
    def __enter__(self) -> _Response:
        return self

    def __exit__(self, *a: object) -> None:
        self.close()


@FUZZ
@given(body=st.one_of(st.binary(max_size=80), json_values.map(lambda v: json.dumps(v).encode()),
                      st.lists(st.one_of(json_values, st.fixed_dictionaries({"text": json_values})), max_size=3).map(
                          lambda c: json.dumps({"choices": c}).encode())),
       n=st.integers(1, 3), chat=st.booleans())
def test_fuzz_server_replies(body: bytes, n: int, chat: bool) -> None:
    from llm_side.backends.openai_compat import BackendUnavailable, OpenAICompatLLM

    llm = OpenAICompatLLM("http://127.0.0.1:9/v1", "m", retries=0, backoff=0)
    llm._opener.open = lambda req, timeout=None: _Response(body)  # type: ignore[method-assign]
    try:
        out = llm.chat([{"role": "user", "content": "hi"}], n=n) if chat else llm.complete("hi", n=n)
    except BackendUnavailable as e:
        one_line(e)
        return
    assert len(out) == n and all(isinstance(x, str) for x in out)


# -- names from input become paths only inside the folder ---------------------------------------------------------
@FUZZ
@given(name=st.text(max_size=40))
def test_fuzz_names_stay_inside(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    from muse_common.files import name_problem

    root = tmp_path_factory.mktemp("runs")
    if name_problem(name) is None:
        target = (root / f"dmc_{name}" / "seed0").resolve()
        assert target.is_relative_to(root.resolve()) and target.parent.parent == root.resolve()
    else:
        one_line(ValueError(name_problem(name)))
