"""`muse-llm compare` (MUSE Tables 3-4): ReAct, Reflexion and MUSE on identical test episodes,
Tables 3-4 from the test windows, refused when runs are not like for like."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from llm_side import compare, registry  # noqa: E402
from llm_side.cli import main  # noqa: E402
from muse_common.files import read_jsonl  # noqa: E402


def _settings(*argv: str) -> dict:
    return compare.settings_of(compare.build_parser().parse_args(["--out", "out", *argv]))


def test_every_agent_gets_the_same_run_spec():
    cfg = dict(_settings("--split", "eval_out_of_distribution", "--limit", "3", "--max-steps", "50", "--model",
                         "qwen0.5b", "--agent-opt", "muse:msa=M", "--agent-opt", "react:max_tokens=12"))
    specs = compare.agent_specs(cfg)
    common = {a: dataclasses.replace(s, agent="", agent_opt={}, agent_options=None) for a, s in specs.items()}
    assert common["react"] == common["reflexion"] == common["muse"]
    assert specs["react"].episodes == 10 and specs["react"].model == "qwen0.5b"  # 5 adaptation + 5 test
    assert specs["muse"].agent_opt == {"msa": "M", "adapt_episodes": 5} and specs["reflexion"].agent_opt == {}
    assert specs["react"].agent_opt == {"max_tokens": 12}  # typed as `muse-llm run --agent-opt` types it


@pytest.fixture()
def fake_agents(monkeypatch):
    monkeypatch.setitem(registry.ENVS, "fake", "harness_fakes:make_env")
    monkeypatch.setitem(registry.AGENTS, "memory-a", "harness_fakes:make_agent")
    monkeypatch.setitem(registry.AGENTS, "memory-b", "harness_fakes:make_agent")


def test_compare_runs_identical_episodes_and_prints_tables_3_and_4(tmp_path, capsys, fake_agents):
    out = tmp_path / "cmp"
    argv = ["compare", "--env", "fake", "--agents", "memory-a,memory-b", "--adapt-episodes", "1", "--test-episodes",
            "1", "--max-steps", "3", "--model", "smollm2", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    a, b = (list(read_jsonl(out / n / "episodes.jsonl")) for n in ("memory-a", "memory-b"))
    key = lambda recs: sorted((r["task"], r["episode"], r["seed"]) for r in recs)  # noqa: E731
    assert key(a) == key(b) and len(a) == 3 * 2  # 3 tasks x (1 adaptation + 1 test)
    # the memory agent fails its first episode and wins once it remembers the failure
    assert "| memory-a | 0% (0/3; 95% CI 0-56) | 100% (3/3; 95% CI 44-100) |" in text
    assert ("- memory-a vs memory-b (3 paired episodes): both won 3, only memory-a 0, only memory-b 0, neither 0; "
            "exact McNemar p = 1") in text
    assert "| memory-b | n/a: no episode succeeded | 1.0 |" in text
    assert "Same test episodes for every agent: 3 tasks of env fake, model smollm2, max steps 3" in text
    assert "fake/memory-b: 3/6 episodes succeeded" in text.split("Same test episodes")[0]  # as `run` says it
    assert main(["compare", "--env", "fake", "--agents", "memory-a,memory-b", "--adapt-episodes", "1",
                 "--test-episodes", "1", "--out", str(out), "--report-only"]) == 0
    assert capsys.readouterr().out == text[text.index("Same test episodes"):]


def test_compare_refuses_runs_that_differ(tmp_path, capsys, fake_agents):
    out = tmp_path / "cmp"
    base = ["--env", "fake", "--adapt-episodes", "1", "--test-episodes", "1", "--model", "smollm2", "--no-progress"]
    for agent, steps in (("memory-a", "3"), ("memory-b", "5")):
        assert main(["run", "--env", "fake", "--agent", agent, "--episodes", "2", "--max-steps", steps,
                     "--model", "smollm2", "--out", str(out / agent), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["compare", *base, "--agents", "memory-a,memory-b", "--out", str(out), "--report-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "differ in max_steps (3 vs 5)" in err[0]
    run = json.loads((out / "memory-b" / "run.json").read_text())
    assert run["max_steps"] == 5


@pytest.mark.parametrize("text, words", [
    ("episdes: 3\n", "unknown key(s) ['episdes']; allowed: env"),
    ("", "is empty; give the compare settings"),
    ("env_opt: [1, 2]\n", "'env_opt' must be a mapping"),
    ("env: [alfworld\n", "is not valid YAML"),
])
def test_compare_settings_file_errors_are_the_run_commands(tmp_path, capsys, text, words):
    """`compare` and `run` read their settings files with one loader: the same one-line errors."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    assert compare.main(["--config", str(cfg), "--out", str(tmp_path / "o"), "--report-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("muse-llm compare: error: ") and words in err[0]
    if "episdes" in text:
        assert main(["run", "--config", str(cfg), "--out", str(tmp_path / "r")]) == 2
        assert words.replace("env", "") in capsys.readouterr().err


def test_compare_trained_points_muse_at_the_pipeline_models(tmp_path, capsys, monkeypatch, fake_agents):
    """Tables 3-4 as the paper ran them: the Algorithm 3 MUSE (fine-tuned actor, DPO'd M_rx, trained
    M_sa) beside ReAct and Reflexion on the base model."""
    pipe = tmp_path / "pipe"
    (pipe / "actor_sft" / "merged").mkdir(parents=True)
    (pipe / "actor_sft" / "merged" / "config.json").write_text("{}")
    base = ["compare", "--env", "fake", "--out", str(tmp_path / "cmp"), "--trained", str(pipe), "--no-progress"]
    assert main(base) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no reflection_dpo/merged" in err[0] and "--stage dpo" in err[0]
    (pipe / "reflection_dpo" / "merged").mkdir(parents=True)
    (pipe / "reflection_dpo" / "merged" / "config.json").write_text("{}")
    (pipe / "msa").mkdir()
    (pipe / "msa" / "msa_meta.json").write_text("{}")
    calls = []

    def execute(spec, out, **kw):
        calls.append(spec)
        raise RuntimeError("stop here")

    monkeypatch.setattr(compare, "execute", execute)
    assert main(base) == 2  # stops at the first (fake) run; its spec is what matters
    assert [s.agent for s in calls] == ["react"] and calls[0].agent_opt == {}
    muse = compare.agent_specs(_settings("--env", "fake", "--trained", str(pipe)))["muse"]
    assert muse.agent_opt["actor_model"] == f"hf:{pipe / 'actor_sft' / 'merged'}"
    assert muse.agent_opt["reflection_model"] == f"hf:{pipe / 'reflection_dpo' / 'merged'}"
    assert muse.agent_opt["msa"] == str(pipe / "msa")
    recs = [{"actor_model": "hf:A", "reflection_model": "hf:R", "msa_source": "M"}]
    assert compare.muse_parts(recs) == "MUSE parts: actor hf:A; reflection model hf:R; M_sa M"


def _trained_parts(tmp_path):
    """A pipeline folder holding the three trained parts compare --trained reads (merged actor, merged
    reflection model, M_sa)."""
    pipe = tmp_path / "pipe"
    for sub in ("actor_sft/merged", "reflection_dpo/merged"):
        (pipe / sub).mkdir(parents=True)
        (pipe / sub / "config.json").write_text("{}")
    (pipe / "msa").mkdir()
    (pipe / "msa" / "msa_meta.json").write_text("{}")
    return pipe


def test_compare_trained_refuses_parts_of_another_base(tmp_path, capsys, monkeypatch, fake_agents):
    """ReAct and Reflexion run --model: trained parts fine-tuned from another base are refused in one line;
    a DPO stage skipped for want of pairs leaves the base to reflect."""
    pipe = _trained_parts(tmp_path)
    (pipe / "actor_sft" / "metrics.json").write_text(json.dumps({"base_model": "smollm2"}))
    argv = ["compare", "--env", "fake", "--out", str(tmp_path / "cmp"), "--trained", str(pipe), "--no-progress"]
    assert main([*argv, "--model", "qwen0.5b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "actor_sft was fine-tuned from 'smollm2', not from --model 'qwen0.5b'" in err[0]
    # no base_model recorded (older runs): the packaged model is read off the base folder's name
    (pipe / "actor_sft" / "metrics.json").write_text(json.dumps({"base": "/c/muse-llm/smollm2-b179c9523d0e6a0f"}))
    with pytest.raises(compare.CompareError, match="from 'smollm2'"):
        compare.trained_options(pipe, "qwen0.5b")
    assert compare.trained_options(pipe, "smollm2")["reflection_model"].startswith("hf:")
    skipped = {"skipped": "no DPO pair", "base_model": "smollm2"}
    (pipe / "reflection_dpo" / "metrics.json").write_text(json.dumps(skipped))
    assert "reflection_model" not in compare.trained_options(pipe, "smollm2")


def test_reflexion_trained_is_the_other_reading_of_the_baselines(tmp_path, fake_agents):
    """Default: Reflexion runs the base --model; --reflexion-trained gives it MUSE's fine-tuned actor and M_rx."""
    pipe = _trained_parts(tmp_path)
    assert "actor_model" not in _settings("--env", "fake", "--trained", str(pipe))["agent_opt"].get("reflexion", {})
    opts = _settings("--env", "fake", "--trained", str(pipe), "--reflexion-trained")["agent_opt"]["reflexion"]
    assert opts == {"actor_model": f"hf:{pipe / 'actor_sft' / 'merged'}",
                    "reflection_model": f"hf:{pipe / 'reflection_dpo' / 'merged'}"}
    with pytest.raises(compare.CompareError, match="needs --trained"):
        _settings("--env", "fake", "--reflexion-trained")


def test_intervals_and_paired_test_figures():
    from muse_common import metrics

    lo, hi = metrics.wilson_interval(0, 3)
    assert lo == 0.0 and round(hi, 3) == 0.561 and metrics.wilson_interval(3, 3)[1] == 1.0
    assert metrics.mcnemar_exact(0, 3) == 0.25 and metrics.mcnemar_exact(1, 4) == 0.375
    assert metrics.mcnemar_exact(0, 0) == 1.0
