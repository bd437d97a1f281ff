#!/usr/bin/env bash
# The main job: MUSE §3 in miniature on 2 CPU cores. Pre-train MUSE and, separately, the Dreamer-v3
# baseline (same model, seed, envs and budget, without the self-awareness head) on 3 MT10 tasks, adapt
# each to the same 2 novel tasks, then Table 1 side by side. Every step resumes where a kill left it:
# rerun the same command. Extra arguments go to both `pretrain` runs, e.g. --set train.env_steps=4000.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${QUICKSTART_DIR:-runs/quickstart}
WM=.venv/bin/muse-wm
[[ -x $WM ]] || WM=muse-wm

start=$(date +%s)
for agent in muse dreamer; do
  echo "[quickstart] pre-training $agent -> $OUT/$agent"
  "$WM" pretrain --config quickstart --agent "$agent" --logdir "$OUT/$agent" "$@"
done
for agent in muse dreamer; do
  echo "[quickstart] adapting $agent to the novel tasks -> $OUT/$agent/adapt"
  "$WM" adapt --checkpoint "$OUT/$agent" --agent "$agent" --logdir "$OUT/$agent/adapt"
done
"$WM" compare "$OUT/muse/adapt" "$OUT/dreamer/adapt" --out "$OUT/roc_both.png" > "$OUT/table1.md.tmp"
mv "$OUT/table1.md.tmp" "$OUT/table1.md"
cat "$OUT/table1.md"
echo "[quickstart] done in $(( $(date +%s) - start )) s: $OUT/table1.md, $OUT/roc_both.png," \
     "$OUT/{muse,dreamer}/metrics.jsonl, $OUT/{muse,dreamer}/adapt/ (results.json, table.md, plots)"
