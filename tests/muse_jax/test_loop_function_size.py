"""No function in muse_jax/loops/ (nor the `muse-wm` CLI) grows past about 60 lines: a run's steps
are callbacks on the shared loop (loops/run_loop.py), not one long body per command."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 60
ROOT = Path(__file__).resolve().parents[2] / "muse_jax"


def test_loop_and_cli_functions_stay_short():
    files = sorted((ROOT / "loops").glob("*.py")) + [ROOT / "cli.py"]
    long = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_LINES:
                    long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({n} lines)")
    assert len(files) > 5 and not long, long
