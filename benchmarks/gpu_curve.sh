#!/usr/bin/env bash
# One GPU lease's DMC learning curve at DreamerV3's published settings, beside its published 5-seed curve.
#
#   bash benchmarks/gpu_prepare.sh --dmc        # here, with the package registry: .whl/dmc/ (~11 MB)
#   TASK=cartpole-swingup SEED=0 CURVE_SECONDS=540 bash benchmarks/gpu_curve.sh     # device call, carry [".whl"]
#   bash benchmarks/gpu_curve.sh --dry-run      # anywhere: CPU, nano model, 2 envs, 3k agent steps
#
# Why a script: the 100k-frame run (50k agent steps at action repeat 2) at size12m and train ratio 512 is
# ~25k updates, which needs the GPU train step (docs/speed.md) and one whole device call. The settings are
# DreamerV3's published ones: size12m, train ratio 512, batch 16 x 64, 16 envs, proprio inputs. Two choices
# are the official implementation's rather than this project's defaults, both named in every line
# (`--variant`): replay samples unfinished episodes (`replay.unfinished`: with 16 envs of 500 agent steps
# the default, finished episodes only, trains nothing before 8k agent steps), and the envs step while
# the learner trains (`train.overlap_collect`: the policy acts one train call behind, as the official's
# driver does; docs/speed.md "Acting while training"). OVERLAP=0 runs serially.
#
# Output in $OUT (else runs/gpu_curve/): dmc_<task>_s<seed>.jsonl (curve windows every LOG_EVERY agent
# steps, appended while it trains), env.txt, curve.log. The run folder stays in runs/gpu_curve/ on the
# machine: a second call on the same warm machine resumes it (learning_curve.py resumes run folders).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OUTDIR="${OUT:-$PWD/runs/gpu_curve}"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/curve.log"
PY="${PYTHON:-python3}"
TASK="${TASK:-cartpole-swingup}"
SEED="${SEED:-0}"
BUDGET="${CURVE_SECONDS:-540}"
T0=$(date +%s)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false MUJOCO_GL=disable
TAG=gpu_curve
source benchmarks/gpu_lib.sh
install_wheels /tmp/gpu_curve_site .whl/dmc/*.whl
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "cpu cores: $(nproc)"
  "$PY" -c "import jax, flax, optax, mujoco, dm_control, gymnasium, tensorboardX; print('jax', jax.__version__, 'flax', flax.__version__, 'mujoco', mujoco.__version__, 'backend', jax.default_backend(), jax.devices())"
} > "$OUTDIR/env.txt" 2>>"$LOG" || { cat "$OUTDIR/env.txt"; say "environment check failed (see $LOG)"; exit 2; }
cat "$OUTDIR/env.txt" | tee -a "$LOG"
if [ $DRY = 0 ] && ! "$PY" -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')"; then
  say "no GPU backend here: run with --dry-run on a CPU"; exit 2
fi

if [ $DRY = 1 ]; then
  SHAPE=(--env-steps 3000 --size nano --train-ratio 32 --batch 4 --seq-len 16 --num-envs 2 --prefill 256
         --log-every 1000)
else
  SHAPE=(--env-steps "${ENV_STEPS:-50000}" --size size12m --train-ratio 512 --batch 16 --seq-len 64 --num-envs 16
         --prefill 1024 --log-every "${LOG_EVERY:-2500}")
fi
SETS=(--set replay.unfinished=true); NAME=unfinished
if [ "${OVERLAP:-1}" = 1 ]; then SETS+=(--set train.overlap_collect=true); NAME=unfinished-overlap; fi
ARGS=(--suite dmc --task "$TASK" --seeds "$SEED" "${SHAPE[@]}" --random-episodes 0 --variant "$NAME" "${SETS[@]}"
      --out "$OUTDIR/dmc_${TASK}_s${SEED}.jsonl" --runs "$PWD/runs/gpu_curve/$TASK")
HARVEST_S=60  # what the last harvest (--plot-only) needs after the run is stopped
say "train $TASK seed $SEED ($NAME) for at most $(( $(left) - HARVEST_S )) s"
timeout -k 10 $(( $(left) - HARVEST_S )) "$PY" benchmarks/learning_curve.py "${ARGS[@]}" --harvest-every-s 30 \
  >>"$LOG" 2>&1
rc=$?
[ $rc = 124 ] || [ $rc = 137 ] && say "stopped at the budget (a later call on this machine resumes the run)"
[ $rc = 0 ] && say "run finished"
[ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && say "learning_curve.py failed (exit $rc; see $LOG)"
say "harvest the windows the run folder holds"
timeout -k 5 $(( $(left) > 20 ? $(left) : 20 )) "$PY" benchmarks/learning_curve.py "${ARGS[@]}" --plot-only >>"$LOG" 2>&1 \
  || say "harvest failed (exit $?; see $LOG)"
say "done: $(wc -l < "$OUTDIR/dmc_${TASK}_s${SEED}.jsonl" 2>/dev/null || echo 0) lines in $OUTDIR/dmc_${TASK}_s${SEED}.jsonl"
