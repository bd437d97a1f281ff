#!/bin/bash
# One seed of MUSE Table 1 at the `small` config on a lent GPU (device tool), MUSE and Dreamer-v3 side by
# side: pre-train both (two processes share the GPU), adapt both to the novel tasks, compare. Nothing is
# carried between calls: the run folders' records come back in $OUT/table1_seed$SEED.tar.gz, which
# `python -m benchmarks.table1 add` turns into committed JSON lines. Run from the repo root with the
# wheels of mujoco, gymnasium, metaworld (textures shrunk), glfw, tensorboardX, farama-notifications in
# .gpu/whl (carry it). Dry-run on CPU: SEED=0 SET="model.size=nano train.env_steps=600 ..." bash ...
# Usage: SEED=0 bash benchmarks/gpu_table1.sh
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
SEED=${SEED:-0}; CONFIG=${CONFIG:-small}; PRE_S=${PRE_S:-390}; ADAPT_S=${ADAPT_S:-100}
OUT=${OUT:-/tmp/out}; RUNS=${RUNS:-/tmp/runs}; mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1 MUJOCO_GL=disable TF_CPP_MIN_LOG_LEVEL=2
if [[ -d ${WHL:-.gpu/whl} ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    ${WHL:-.gpu/whl}/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
fi
PY=${PY:-python3}
{ nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null; nproc
  $PY -c "import jax, flax, optax, mujoco, metaworld; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
} > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"; el env
sets=(--set "train.seed=$SEED"); for s in ${SET:-}; do sets+=(--set "$s"); done
wm() { $PY -m muse_jax.cli "$@"; }
for agent in muse dreamer; do
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 timeout -k 10 "$PRE_S" \
    $PY -m muse_jax.cli pretrain --config "$CONFIG" --agent $agent --logdir "$RUNS/$agent" "${sets[@]}" \
    > "$RUNS/pretrain_$agent.log" 2>&1 &
done
wait; el pretrained
for agent in muse dreamer; do
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 timeout -k 10 "$ADAPT_S" \
    $PY -m muse_jax.cli adapt --checkpoint "$RUNS/$agent" --agent $agent --logdir "$RUNS/$agent/adapt" \
    > "$RUNS/adapt_$agent.log" 2>&1 &
done
wait; el adapted
left=$(( ${DEADLINE_S:-575} - ($(date +%s) - T0) - 15 ))
if (( left > 30 )); then  # the regulation effect on the MUSE checkpoint, paired, against both controls
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.6 timeout -k 5 $left $PY benchmarks/regulation_effect.py \
    --checkpoint "$RUNS/muse" --episodes ${REG_EPISODES:-24} --arms plain mean forward/beta=0.0 forward/beta=0.02 \
    rollouts mcts --out "$RUNS/regulation_effect.jsonl" > "$RUNS/regulation.log" 2>&1
  el regulation
fi
wm compare "$RUNS/muse/adapt" "$RUNS/dreamer/adapt" > "$RUNS/table1.md" 2>&1; cat "$RUNS/table1.md"
for f in "$RUNS"/*.log; do echo "== $f"; tail -c 1200 "$f" | tr '\r' '\n' | tail -n 6; done > "$OUT/logs.txt"
(cd "$RUNS" && tar czf "$OUT/table1_seed$SEED.tar.gz" --exclude=checkpoints --exclude=tb --exclude='*.png' \
  table1.md ./*.log ./*.jsonl muse/metrics.jsonl dreamer/metrics.jsonl muse/adapt dreamer/adapt 2>/dev/null)
ls -la "$OUT"; el end
