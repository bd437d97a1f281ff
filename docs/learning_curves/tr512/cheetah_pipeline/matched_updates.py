"""Training statistics of both implementations at matched update counts (blocks of 1000 updates).

    python docs/learning_curves/tr512/cheetah_pipeline/matched_updates.py OUT.jsonl \
        official:NAME:runs/official_tr512/dmc_cheetah-run/seed0-exact-twohot \
        muse_jax:NAME:runs/learning_curve_tr512/dmc_cheetah-run/dreamer-official-pipeline_seed0

The official logs every ~100 updates (`logdir/metrics.jsonl`, means since its last line): its lines with
`train/opt/updates` in [u, u + 1000) are averaged. This project logs once per 2000 agent steps = 1000
updates (`metrics.jsonl`, means over the window), each line over its own range (`updates_from` to
`updates_to`: 0-999, 999-1999, ... when training starts at a window's end). Both are means over the
imagined trajectories of the batches; action entropy summed over the action dimensions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repo root: run as a script from a checkout
from muse_common.files import atomic_write_jsonl, read_jsonl  # noqa: E402

OFFICIAL_KEYS = {"entropy": "train/ent/action", "imag_reward": "train/rew", "value": "train/val",
                 "adv_mag": "train/adv_mag", "loss/reward": "train/loss/rew"}


def official_blocks(run: Path, block: int = 1000) -> dict[int, dict[str, float]]:
    rows = [r for r in read_jsonl(run / "logdir" / "metrics.jsonl") if "train/rew" in r]
    out = {}
    for lo in range(0, int(max(r["train/opt/updates"] for r in rows)) + 1, block):
        sel = [r for r in rows if lo <= r["train/opt/updates"] < lo + block]
        if sel:
            mean = {k: sum(r[v] for r in sel) / len(sel) for k, v in OFFICIAL_KEYS.items()}
            out[lo] = {"updates_to": lo + block, **mean}
    return out


def this_project_blocks(run: Path, block: int = 1000) -> dict[int, dict[str, float]]:
    """Each line's own update range: from the previous line's `train_steps` (0 for the first) to its own
    (1000 updates a line at 2000 agent steps; the first is shorter when training starts mid-window)."""
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "entropy" in r]
    starts = [0, *(r["train_steps"] for r in rows)][:len(rows)]  # none for a run with no lines yet
    return {lo: {"updates_to": r["train_steps"], **{k: r[k] for k in OFFICIAL_KEYS}}
            for lo, r in zip(starts, rows, strict=True)}


def main() -> None:
    lines = []
    for spec in sys.argv[2:]:
        impl, name, path = spec.split(":", 2)
        blocks = (official_blocks if impl == "official" else this_project_blocks)(Path(path))
        lines += [{"impl": impl, "run": name, "updates_from": lo, **{k: round(v, 5) for k, v in m.items()}}
                  for lo, m in sorted(blocks.items())]
    atomic_write_jsonl(sys.argv[1], lines)
    for x in lines:
        print(json.dumps(x))


if __name__ == "__main__":
    main()
