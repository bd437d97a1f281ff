#!/usr/bin/env bash
# The held-out MUSE-LLM study as ONE resumable command (docs/llm/alfworld_pipeline.md):
#   1. Algorithm 3 pre-deployment training into $PIPE: Reflexion collects on $TRAIN_GAMES train games drawn across the six task types
#      (expert seed when it wins nothing), then M_sa, the SFT actor, the DPO'd reflection model (skipped without pairs);
#   2. `muse-llm compare` of ReAct, Reflexion and the trained MUSE on the 20 held-out games fixed in
#      configs/llm/alfworld-heldout-study.yaml (5 adaptation + 5 test episodes each, same base model and seeds),
#      Tables 2-4 with 95% intervals and a paired comparison, into $OUT.
# Every stage resumes where it stopped: rerun the same line after a kill. Settings (environment variables):
#   MODEL (qwen0.5b), PIPE (runs/alg3-$MODEL), OUT (runs/heldout-study-$MODEL), TRAIN_GAMES (10),
#   SA_WITHOUT_TASK (1: train M_sa without its task input, the named departure that scores novel games better;
#   docs/llm/alfworld_heldout.md), PIPELINE_ARGS (extra alfworld-pipeline flags), COMPARE_ARGS (extra compare
#   flags, e.g. --reflexion-trained).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-qwen0.5b}
PIPE=${PIPE:-runs/alg3-$MODEL}
OUT=${OUT:-runs/heldout-study-$MODEL}
TRAIN_GAMES=${TRAIN_GAMES:-10}
PY=${PY:-.venv/bin/python}
SA_FLAGS=()
[ "${SA_WITHOUT_TASK:-0}" = 1 ] && SA_FLAGS=(--sa-without-task)
export PYTHONUNBUFFERED=1  # progress lines as they happen, also into a log file
for stage in collect train-sa sft dpo; do
  echo "[study] alfworld-pipeline --stage $stage --out $PIPE ($(date -u +%H:%M:%S))" >&2
  # shellcheck disable=SC2086
  "$PY" -m llm_side.cli alfworld-pipeline --stage "$stage" --out "$PIPE" --model "$MODEL" --train-games "$TRAIN_GAMES" \
    --collect-episodes 1 --expert-share 0.5 "${SA_FLAGS[@]}" ${PIPELINE_ARGS:-}
done
mkdir -p "$(dirname "$OUT")"
echo "[study] compare --out $OUT ($(date -u +%H:%M:%S))" >&2
# shellcheck disable=SC2086
"$PY" -m llm_side.cli compare --config configs/llm/alfworld-heldout-study.yaml --model "$MODEL" --trained "$PIPE" \
  --out "$OUT" ${COMPARE_ARGS:-} | tee "$OUT.tables.md"
