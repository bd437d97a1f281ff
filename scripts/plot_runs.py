"""Plot columns of one or more runs' metrics.jsonl against env steps (one panel per column).

    python scripts/plot_runs.py runs/quickstart/muse runs/quickstart/dreamer --keys success_rate --out c.png

Why: every `muse-wm pretrain` writes metrics.jsonl (and TensorBoard under tb/); this draws the same
numbers without TensorBoard, e.g. the quickstart figure of docs/getting-started.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from muse_common.files import atomic_save_figure, read_jsonl  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from muse_common.arg_parser import ArgumentParser

    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run folders (each holds metrics.jsonl)")
    p.add_argument("--keys", nargs="+", default=["success_rate", "loss/model"], help="metrics.jsonl columns")
    p.add_argument("--out", required=True, help="PNG to write")
    args = p.parse_args(argv)
    rows = {}
    for run in args.runs:
        path = Path(run) / "metrics.jsonl"
        if not path.is_file():
            print(f"plot_runs: error: {path} not found; give the --logdir of a muse-wm pretrain run", file=sys.stderr)
            return 2
        rows[run] = list(read_jsonl(path))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.keys), figsize=(4.2 * len(args.keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], args.keys, strict=True):
        for run, rs in rows.items():
            pts = [(r["step"], r[key]) for r in rs if r.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", ms=2, label=Path(run).name)
        ax.set_xlabel("env steps")
        ax.set_title(key, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    atomic_save_figure(fig, args.out)
    plt.close(fig)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
