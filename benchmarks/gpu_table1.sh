#!/bin/bash
# Seeds of MUSE Table 1 at the `small` config on a lent GPU (device tool), MUSE and Dreamer-v3 side by
# side: pre-train each agent's seeds in SEEDS in one process (`muse-wm pretrain --seeds`, one vmapped
# train step for all seeds, muse_jax/loops/seeds.py; the two agents' processes share the GPU), adapt each
# seed's checkpoint to the novel tasks (one process per seed and agent), compare. Each seed's run folders
# are $RUNS/seed$SEED/{muse,dreamer} (links to the pre-training's $RUNS/pretrain/AGENT/seed$SEED), as
# `python -m benchmarks.table1 add` reads them. Nothing is carried between calls: each seed's run folders'
# records come back in $OUT/table1_seed$SEED.tar.gz, which `python -m benchmarks.table1 add` turns into
# committed JSON lines. Run from the repo root with the
# wheels of mujoco, gymnasium, metaworld (textures shrunk), glfw, tensorboardX, farama-notifications in
# .gpu/whl (carry it). Dry-run on CPU: SEEDS="0 1" CONFIG=smoke SET="adapt.episodes=1" bash ...
# Usage: SEEDS="0 1 2" bash benchmarks/gpu_table1.sh
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
SEEDS=${SEEDS:-${SEED:-0}}; CONFIG=${CONFIG:-small}; PRE_S=${PRE_S:-330}; ADAPT_S=${ADAPT_S:-200}
read -ra seeds <<< "$SEEDS"; MEM=$(python3 -c "print(round(0.9 / (2 * ${#seeds[@]}), 3))")
OUT=${OUT:-/tmp/out}; RUNS=${RUNS:-/tmp/runs}; mkdir -p "$OUT"
for seed in "${seeds[@]}"; do mkdir -p "$RUNS/seed$seed"; done
# `pretrain --seeds` writes one folder per seed, LOGDIR/seed<K> (with one seed, LOGDIR itself): the link
# $RUNS/seed$K/AGENT -> ../pretrain/AGENT/seed$K, relative so that a relative $RUNS works too
seed_run() { if (( ${#seeds[@]} > 1 )); then echo "../pretrain/$1/seed$2"; else echo "../pretrain/$1"; fi; }
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
extra=(); for s in ${SET:-}; do extra+=(--set "$s"); done
for agent in muse dreamer; do  # one process per agent, all seeds in it
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.45 timeout -k 10 "$PRE_S" \
    $PY -m muse_jax.cli pretrain --config "$CONFIG" --agent $agent --logdir "$RUNS/pretrain/$agent" \
    --seeds "${seeds[@]}" "${extra[@]}" > "$RUNS/pretrain_$agent.log" 2>&1 &
done
wait; el "pretrained (pass its seconds to table1 add --pretrain-wall-s)"
for seed in "${seeds[@]}"; do for agent in muse dreamer; do  # the layout table1 add reads: seed$K/AGENT
  ln -sfn "$(seed_run $agent "$seed")" "$RUNS/seed$seed/$agent"
  cp "$RUNS/pretrain_$agent.log" "$RUNS/seed$seed/pretrain_$agent.log"
done; done
for seed in "${seeds[@]}"; do for agent in muse dreamer; do
  XLA_PYTHON_CLIENT_MEM_FRACTION=$MEM timeout -k 10 "$ADAPT_S" \
    $PY -m muse_jax.cli adapt --checkpoint "$RUNS/seed$seed/$agent" --agent $agent \
    --logdir "$RUNS/seed$seed/$agent/adapt" > "$RUNS/seed$seed/adapt_$agent.log" 2>&1 &
done; done
wait; el "adapted (table1 add --adapt-wall-s)"
left=$(( ${DEADLINE_S:-575} - ($(date +%s) - T0) - 20 ))
if (( left > 40 )); then  # the regulation effect on the first seed's MUSE checkpoint, paired, against both controls
  R=$RUNS/seed${seeds[0]}
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.6 timeout -k 5 $left $PY benchmarks/regulation_effect.py \
    --checkpoint "$R/muse" --episodes ${REG_EPISODES:-24} --arms plain mean forward/beta=0.0 forward/beta=0.02 \
    rollouts mcts --out "$R/regulation_effect.jsonl" > "$R/regulation.log" 2>&1
  el regulation
fi
for seed in "${seeds[@]}"; do
  R=$RUNS/seed$seed
  $PY -m muse_jax.cli compare "$R/muse/adapt" "$R/dreamer/adapt" > "$R/table1.md" 2>&1; cat "$R/table1.md"
  for f in "$R"/*.log; do echo "== $f"; tail -c 1200 "$f" | tr '\r' '\n' | tail -n 6; done >> "$OUT/logs.txt"
  (cd "$R" && tar czf "$OUT/table1_seed$seed.tar.gz" --exclude=checkpoints --exclude=tb --exclude='*.png' \
    table1.md ./*.log ./*.jsonl muse/metrics.jsonl dreamer/metrics.jsonl muse/adapt dreamer/adapt 2>/dev/null)
done
ls -la "$OUT"; el end
