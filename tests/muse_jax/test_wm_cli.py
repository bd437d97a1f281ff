"""`muse-wm`: the three subcommands end to end (smoke config, real env) and clear errors."""

from __future__ import annotations

import json
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import pytest

from muse_common.files import append_jsonl
from muse_jax import evaluate
from muse_jax.cli import main


def test_unknown_config_is_a_usage_error(tmp_path, capsys):
    assert main(["pretrain", "--config", "nope", "--logdir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "config 'nope' not found" in err and "smoke" in err


def test_bad_override_names_the_key(tmp_path, capsys):
    assert main(["pretrain", "--config", "smoke", "--set", "model.detr=8", "--logdir", str(tmp_path / "x")]) == 2
    assert "model.detr" in capsys.readouterr().err


def test_missing_checkpoint_is_explained(tmp_path, capsys):
    code = main(["adapt", "--checkpoint", str(tmp_path / "none"), "--agent", "muse", "--logdir", str(tmp_path / "o")])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_compare_prints_side_by_side_and_plots(tmp_path, capsys):
    runs = []
    for agent, signal in (("muse", [4.0, 1.0]), ("dreamer", [0.2, 0.1])):
        out = tmp_path / agent
        eps = [{"task": "soccer-v3", "episode": 0, "success": True, "time_to_success": 30, "signal": signal[:1]},
               {"task": "soccer-v3", "episode": 1, "success": False, "time_to_success": -1, "signal": signal[1:]}]
        for e in eps:
            append_jsonl(out / "episodes.jsonl", e)
        evaluate.write_outputs(out, agent, eps, n_quantiles=5, max_steps=500)
        runs.append(str(out))
    assert main(["compare", *runs, "--out", str(tmp_path / "roc.png")]) == 0
    md = capsys.readouterr().out
    assert "| MUSE | AUROC | 1.00 |" in md and "| Dreamer-v3 | AUROC | 1.00 |" in md
    assert (tmp_path / "roc.png").exists()


def _cli(*args: str):
    """The muse-wm CLI in its own process, as a user runs it (a fresh XLA per command: in-process, after the
    rest of the suite, XLA's CPU compiler crashed here once per full run)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "muse_jax.cli", *args], capture_output=True, text=True,
                          check=False)


@pytest.mark.slow
def test_smoke_pretrain_then_adapt_via_cli(tmp_path):
    run, out = tmp_path / "run", tmp_path / "adapt"
    r = _cli("pretrain", "--config", "smoke", "--agent", "dreamer", "--logdir", str(run))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "replay needs" in r.stdout and "MB" in r.stdout
    assert (run / "metrics.jsonl").exists() and (run / "checkpoints").is_dir()
    # a Dreamer checkpoint cannot be adapted as MUSE: one line naming the fix
    r = _cli("adapt", "--checkpoint", str(run), "--agent", "muse", "--logdir", str(tmp_path / "x"))
    assert r.returncode == 2
    err = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(err) == 1 and "muse-wm pretrain --agent muse" in err[0] and "holds a dreamer agent" in err[0], err
    # two tasks: each starts from the pre-trained weights (a donated state must not leak across tasks)
    r = _cli("adapt", "--checkpoint", str(run), "--agent", "dreamer", "--tasks", "plate-slide-v3",
             "coffee-button-v3", "--episodes", "1", "--logdir", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| Dreamer-v3 | AUROC |" in r.stdout
    res = json.loads((out / "results.json").read_text())
    assert res["agent"] == "dreamer" and [t["task"] for t in res["tasks"]] == ["plate-slide-v3", "coffee-button-v3"]
    assert all(t["episodes"] == 1 for t in res["tasks"])
    assert 0.0 <= res["sa_accuracy"] <= 1.0 and 0.0 <= res["success_rate"] <= 1.0


def test_no_compile_cache_flag_is_accepted(tmp_path):
    """--no-compile-cache (the persistent cache is on by default) parses on pretrain and adapt."""
    from muse_jax.cli import _parser

    parse = _parser().parse_args
    assert parse(["pretrain", "--config", "smoke", "--logdir", "x", "--no-compile-cache"]).no_compile_cache
    assert not parse(["adapt", "--checkpoint", "c", "--agent", "muse", "--logdir", "x"]).no_compile_cache
