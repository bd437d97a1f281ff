"""A bad flag on any entry point is one line on stderr that names it and points at --help (exit 2)."""

from __future__ import annotations

import pytest

from muse_common.arg_parser import ArgumentParser


def _usage_error(capsys, parse) -> str:
    with pytest.raises(SystemExit) as stop:
        parse()
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err  # argparse's own error prints the usage block first
    return lines[0]


def test_subcommand_errors_are_one_line(capsys):
    p = ArgumentParser(prog="tool")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("go").add_argument("--n", type=int, required=True)
    line = _usage_error(capsys, lambda: p.parse_args(["go", "--n", "x"]))
    assert line == "tool go: error: argument --n: invalid int value: 'x' (see tool go --help)"
    assert "the following arguments are required: cmd" in _usage_error(capsys, lambda: p.parse_args([]))


def test_muse_wm_bad_value_is_one_line(capsys):
    from muse_jax.cli import main

    line = _usage_error(capsys, lambda: main(["pretrain", "--config", "smoke", "--logdir", "x", "--agent", "cat"]))
    assert line.startswith("muse-wm pretrain: error: argument --agent: invalid choice: 'cat'")
    assert line.endswith("(see muse-wm pretrain --help)")


def test_muse_llm_bad_value_is_one_line(capsys):
    from llm_side.cli import main

    line = _usage_error(capsys, lambda: main(["run", "--out", "x", "--episodes", "two"]))
    assert line == "muse-llm run: error: argument --episodes: invalid int value: 'two' (see muse-llm run --help)"


def test_benchmark_own_checks_are_one_line(capsys):
    from benchmarks.learning_curve import parse_args

    line = _usage_error(capsys, lambda: parse_args(["--suite", "dmc", "--task", "cartpole-swingup",
                                                    "--train-ratio", "0"]))
    assert line == ("learning_curve.py: error: --train-ratio 0.0: give a number above 0 and at most 4096 "
                    "(see learning_curve.py --help)")
