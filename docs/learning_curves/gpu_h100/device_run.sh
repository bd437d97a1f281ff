#!/bin/bash
# One GPU session (device tool): DMC learning curves at DreamerV3's published settings, then throughput.
# Everything it keeps goes to $OUT. Dry-run on CPU first with LC_S/TP_S/B/SIZES/WHL overridden.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
export PYTHONUNBUFFERED=1 MUJOCO_GL=disable TF_CPP_MIN_LOG_LEVEL=2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.gpu/whl}/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD/.gpu/site:$PWD
LC=${LC_S:-360}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc;
  python3 -c "import jax, flax, optax, orbax.checkpoint as oc, chex, mujoco, dm_control, gymnasium; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'mujoco', mujoco.__version__, jax.devices())"; } > $OUT/env.txt 2>&1
cat $OUT/env.txt; el env
B=${B:-"--suite dmc --env-steps 50000 --size size12m --train-ratio 512 --batch 16 --seq-len 64 --num-envs 16 --log-every 2500 --random-episodes 0"}
lc() { XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 timeout -k 10 $1 python3 benchmarks/learning_curve.py $B --task $2 --seeds $3 --out $OUT/dmc_$2_s$3.jsonl --runs /tmp/runs/$2 "${@:4}"; }
V=${V:---variant unfinished --set replay.unfinished=true}
for t in ${TASKS:-cartpole-swingup}; do for s in 0 1; do lc $LC $t $s $V > /tmp/lc_${t}_$s.log 2>&1 & done; done
wait; el learning-killed-or-done
for t in ${TASKS:-cartpole-swingup}; do for s in 0 1; do lc 60 $t $s $V --plot-only > /tmp/h_${t}_$s.log 2>&1 & done; done
wait; el harvested
for f in /tmp/lc_*.log /tmp/h_*.log; do echo "== $f"; tail -c 1500 $f | tr '\r' '\n' | tail -n 8; done > $OUT/logs.txt
for sz in ${SIZES:-size12m size50m}; do
  timeout -k 5 ${TP_S:-80} python3 benchmarks/wm_throughput.py --size $sz --steps 10 --json --out $OUT/throughput.jsonl > /tmp/tp_$sz.log 2>&1
  echo "== $sz rc=$?" >> $OUT/logs.txt; tail -n 5 /tmp/tp_$sz.log >> $OUT/logs.txt; el $sz
done
wc -l $OUT/*.jsonl; el end
