"""One JSON line per logged train step of an official run folder: the training diagnostics compared in
docs/official_comparison.md (action entropy, imagined reward, critic value, advantage magnitude), keyed by
agent step and update count. Run folders are not committed; this keeps what the comparison reads.

    python3 docs/learning_curves/tr512/twohot_noise/summarise_official_metrics.py \
        runs/official_tr512/dmc_cheetah-run/seed0-exact-twohot ... > exact_twohot_train_metrics.jsonl
"""

import json
import sys
from pathlib import Path

KEYS = {"train/opt/updates": "updates", "train/ent/action": "action_entropy", "train/rew": "imag_reward",
        "train/val": "value", "train/adv_mag": "adv_mag", "train/ret": "return"}

for folder in map(Path, sys.argv[1:]):
    seed, _, variant = folder.name.removeprefix("seed").partition("-")
    for raw in (folder / "logdir" / "metrics.jsonl").read_text().splitlines():
        row = json.loads(raw)
        if "train/ent/action" in row:
            print(json.dumps({"impl": "official", "variant": variant or None, "seed": int(seed),
                              "agent_steps": row["step"], **{v: row.get(k) for k, v in KEYS.items()}}))
