#!/usr/bin/env bash
# One GPU lease's speed comparison, prepared so that it fits one device call (~5 min at the defaults).
#
#   bash benchmarks/gpu_session.sh              # on the GPU machine, from the repository root
#   bash benchmarks/gpu_session.sh --dry-run    # anywhere: CPU, size1m at batch 4 x 8 (checks the script)
#
# Why a script: GPU machines come in short leases, bare, without a package registry. This installs the
# wheels carried in .whl/ (if any), checks the environment, then times the jitted train step
# (benchmarks/official/speed.py: compile, time-to-first-update, median step, process CPU seconds) at
# size12m and size1m at float32 (this project's GPU default, `auto` scans) and with the observe scan's weight
# gradients in its loop (the control for `auto`'s newest part), a learning run's updates/s
# against its train step (benchmarks/collect_overhead.py --loop), both sizes at bfloat16, size12m against
# the official with its deterministic GPU ops off, 5 seeds in one step against one (wm_throughput.py
# --seeds), and, with time left, this project's side with the rolled scans and each half of `auto`, fully
# unrolled, the step's parts timed apart (benchmarks/step_breakdown.py), and 5 seeds with `auto`'s
# unrolling but no remat. When the official DreamerV3 source (.official/dreamer-3.3.1, fetched by
# benchmarks/official/setup.sh) and its requirements (wheels in .whl/official/, see
# benchmarks/gpu_prepare.sh) were carried, the official side runs in the same process pairs (ratios in one
# run); else this project's side runs alone and the records say "order": "ours only". After the lease:
# python -m benchmarks.gpu_records.
#
# Output: JSON lines in $OUT/gpu_session.jsonl (the device tool's $OUT; else runs/gpu_session/), one per
# (size, dtype, setting), plus env.json and the log. Budget: SESSION_SECONDS (default 300) wall seconds;
# a step that would not fit is skipped and says so. SKIP names stages to leave out (a second call:
# SKIP="f32 loop"): f32 grads loop bf16 nondet seeds variants unroll64 breakdown seeds_unroll. BF16_SIZES names
# the sizes of the bf16 stage (default: both).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OUTDIR="${OUT:-$PWD/runs/gpu_session}"
mkdir -p "$OUTDIR"
JSONL="$OUTDIR/gpu_session.jsonl"
LOG="$OUTDIR/gpu_session.log"
PY="${PYTHON:-python3}"
BUDGET="${SESSION_SECONDS:-300}"
T0=$(date +%s)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
TAG=gpu_session
source benchmarks/gpu_lib.sh

# 1. carried wheels (this project's extras, the official's requirements) into one site folder
install_wheels /tmp/gpu_session_site .whl/*.whl .whl/official/*.whl

# 2. the environment: versions, devices, and whether the official side can run
if [ $DRY = 1 ]; then PLATFORM=cpu; export JAX_PLATFORMS=cpu; else PLATFORM=gpu; fi
"$PY" - "$OUTDIR/env.json" "$PLATFORM" <<'PYEOF' 2>>"$LOG" | tee -a "$LOG" || { say "environment check failed"; exit 2; }
import json, platform, sys
import flax, jax, optax
info = {"python": platform.python_version(), "jax": jax.__version__, "flax": flax.__version__,
        "optax": optax.__version__, "backend": jax.default_backend(),
        "devices": [d.device_kind for d in jax.devices()]}
try:
    import orbax.checkpoint  # noqa: F401  (checkpoints; not needed for the timings)
    info["orbax"] = True
except ImportError:
    info["orbax"] = False
json.dump(info, open(sys.argv[1], "w"))
print(json.dumps(info))
if sys.argv[2] == "gpu" and info["backend"] != "gpu":
    sys.exit("no GPU backend: " + info["backend"])
PYEOF
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$LOG"

OFFICIAL=()
SRC="$PWD/.official/dreamer-3.3.1"
if [ -f "$SRC/dreamerv3/agent.py" ] && [ -f "$SRC/dreamerv3/configs.yaml" ] && \
   PYTHONPATH="$SRC:$PYTHONPATH" "$PY" -c "import elements, embodied, ninjax, ruamel.yaml; import dreamerv3.main" \
   >>"$LOG" 2>&1; then
  OFFICIAL=(--official-python "$PY" --official-src "$SRC")
  say "official DreamerV3 source and requirements found: both sides run"
else
  OFFICIAL=(--ours-only)
  say "no runnable official source (.official/dreamer-3.3.1 + .whl/official): this project's side only"
fi

# 3. the runs, one (size, dtype) per process so that a partial session still leaves whole records; each
#    runs only if its expected seconds still fit the budget. Measured on an H200 (lease 3, `auto` scans):
#    a pair took 149 s (size12m float32), 137 s (size12m bfloat16), 120 s (size1m float32); the seeds 168 s;
#    the step breakdown did not finish in 113 s. This project's side alone: ~50 s size12m, ~35 s size1m.
if [ $DRY = 1 ]; then  # size1m (the official has no smaller preset) at a tiny batch
  SIZES=(size1m); SHAPE=(--batch 4 --seq 8 --rounds 2 --steps 2)
  declare -A EXPECT=([size1m]=60) PAIR=([size1m]=60)
else
  SIZES=(size12m size1m); SHAPE=(--rounds 3 --steps 10)
  declare -A EXPECT=([size1m]=35 [size12m]=50) PAIR=([size1m]=125 [size12m]=150)
fi
run() {  # run LABEL EXPECTED_S ARGS...
  local label=$1 expect=$2; shift 2
  if [ "$(left)" -lt "$expect" ]; then say "skip $label: $(left) s left, needs ~$expect s"; return; fi
  say "run $label"
  timeout "$(left)" "$PY" benchmarks/official/speed.py --platform "$PLATFORM" "${SHAPE[@]}" --out "$JSONL" "$@" \
    >>"$LOG" 2>&1 || say "$label failed or timed out (exit $?; see log)"
}
pairs() {  # pairs DTYPE SIZE...: one dtype (the official side builds its replay and compiles: a pair takes longer)
  local dtype=$1; shift
  for size in "$@"; do
    if [ -z "${EXPECT[$size]:-}" ]; then say "skip $size $dtype: not one of ${SIZES[*]}"; continue; fi
    if [ ${#OFFICIAL[@]} -gt 1 ]; then expect=${PAIR[$size]}; else expect=${EXPECT[$size]}; fi
    run "$size $dtype" "$expect" --size "$size" --dtype "$dtype" "${OFFICIAL[@]}"
  done
}
want() { [[ " ${SKIP:-} " != *" $1 "* ]] || { say "skip $1 (SKIP)"; false; }; }  # SKIP="f32 loop" for a second call
want f32 && pairs float32 "${SIZES[@]}"
# the control for `auto`'s newest part: the observe scan's weight gradients inside its backward loop (plain scan
# autodiff) instead of after it (`model.observe_param_grads`, docs/speed.md "Weight gradients after the loop"),
# this project's side alone, against the official step of the pairs above; with them after the loop, size12m
# storing every intermediate (remat none: 7,009 kernels by the compiler's count against `auto`'s 7,495), and that
# with 16 observe steps per loop iteration (6,769); then size1m's control
S0="${SIZES[0]}"
if want grads; then
  run "$S0 float32 (weight grads in the loop)" "${EXPECT[$S0]}" --size "$S0" --dtype float32 --ours-only \
    --set model.observe_param_grads=in_loop
  run "$S0 float32 (remat none)" "${EXPECT[$S0]}" --size "$S0" --dtype float32 --ours-only --set model.observe_remat=none
  run "$S0 float32 (remat none, unroll 16)" $(( EXPECT[$S0] + 15 )) --size "$S0" --dtype float32 --ours-only \
    --set model.observe_remat=none --set model.observe_unroll=16
  for size in "${SIZES[@]:1}"; do
    run "$size float32 (weight grads in the loop)" "${EXPECT[$size]}" --size "$size" --dtype float32 --ours-only \
      --set model.observe_param_grads=in_loop
  done
fi
# a learning run's updates/s against its own train step, with and without train.overlap_collect (docs/speed.md,
# "Acting while training"; needs Meta-World on the machine), with the time left
LOOP=(--config quickstart --set model.size=size1m --set train.train_ratio=512 --updates 40); LOOP_S=180
[ $DRY = 1 ] && LOOP=(--config smoke --updates 5) && LOOP_S=150
if ! want loop; then :
elif ! "$PY" -c "import metaworld, gymnasium" >>"$LOG" 2>&1; then say "skip the learning loop: no Meta-World here"
elif [ "$(left)" -lt $LOOP_S ]; then say "skip the learning loop: $(left) s left, needs ~$LOOP_S s"
else say "run the learning loop"; timeout "$(left)" "$PY" benchmarks/collect_overhead.py --loop "${LOOP[@]}" \
  --out "$OUTDIR/collect_overhead_loop.jsonl" >>"$LOG" 2>&1 || say "learning loop failed or timed out (exit $?; see log)"
fi
# the official's default dtype, both sides; BF16_SIZES="size1m" times only the sizes a lease still lacks
read -r -a BF16 <<< "${BF16_SIZES:-${SIZES[*]}}"
want bf16 && pairs bfloat16 "${BF16[@]}"
# the official at its fastest, the stronger control: size12m float32 with its deterministic GPU ops off (its
# default is on; `official_deterministic` in the record), against this project's `auto`; only with the official
if ! want nondet; then :
elif [ ${#OFFICIAL[@]} -le 1 ]; then say "skip nondet: no official side here"
else run "${SIZES[0]} float32, the official's deterministic ops off" "${PAIR[${SIZES[0]}]}" --size "${SIZES[0]}" \
  --dtype float32 "${OFFICIAL[@]}" --official-nondeterministic
fi
# N seeds in one vmapped step against one seed (muse-wm pretrain --seeds; target: 5 seeds <= 1.5x one
# seed's time per update), this project's side alone
SEEDS_ARGS=(--size size1m --seeds 5 --steps 10); SEEDS_S=170
[ $DRY = 1 ] && SEEDS_ARGS=(--size size1m --batch 4 --seq 8 --seeds 2 --steps 2) && SEEDS_S=60
if ! want seeds; then :
elif [ "$(left)" -lt $SEEDS_S ]; then say "skip --seeds: $(left) s left, needs ~$SEEDS_S s"
else say "run --seeds"; timeout "$(left)" "$PY" benchmarks/wm_throughput.py "${SEEDS_ARGS[@]}" --json \
  --out "$OUTDIR/wm_seeds.jsonl" >>"$LOG" 2>&1 || say "--seeds failed or timed out (exit $?; see log)"
fi
# other settings of the scans, this project's side alone: the pairs above run `auto` (on a GPU: unrolled 8/15,
# remat "dots"; muse_jax/config/loops.py); these time the rolled scans and each half of `auto` against the
# same official step (docs/speed.md, "Scan settings on a GPU")
ROLLED="model.observe_unroll=1 behavior.imag_unroll=1 model.observe_remat=none"
VARIANTS=("$ROLLED" "model.observe_unroll=8 behavior.imag_unroll=15 model.observe_remat=none"
          "model.observe_unroll=1 behavior.imag_unroll=1 model.observe_remat=dots")
want variants && for v in "${VARIANTS[@]}"; do
  sets=(); for kv in $v; do sets+=(--set "$kv"); done
  for size in "${SIZES[@]}"; do
    run "$size float32 ($v)" "${EXPECT[$size]}" --size "$size" --dtype float32 --ours-only "${sets[@]}"
  done
done
# the observe scan fully unrolled (a compile ~2.6x longer; docs/speed.md), this project's side alone, with the time left
want unroll64 && run "unroll 64/15 ${SIZES[0]} float32" $(( EXPECT[${SIZES[0]}] * 3 )) --size "${SIZES[0]}" --dtype float32 \
  --ours-only --set model.observe_unroll=64 --set behavior.imag_unroll=15
# where the step's time goes on this device (docs/speed.md, "Where the step's CPU time goes"), with the time left
BREAK_ARGS=(--size "${SIZES[0]}" --steps 10); BREAK_S=180
[ $DRY = 1 ] && BREAK_ARGS=(--size size1m --batch 4 --seq 8 --steps 2) && BREAK_S=60
if ! want breakdown; then :
elif [ "$(left)" -lt $BREAK_S ]; then say "skip the step breakdown: $(left) s left, needs ~$BREAK_S s"
else say "run the step breakdown"; timeout "$(left)" "$PY" benchmarks/step_breakdown.py "${BREAK_ARGS[@]}" \
  --out "$OUTDIR/step_breakdown.jsonl" >>"$LOG" 2>&1 || say "step breakdown failed or timed out (exit $?; see log)"
fi
# 5 seeds with `auto`'s unrolling but no remat: `auto` gave 1.63x, the rolled scans 1.36x (docs/speed.md, "Several
# seeds in one process"); this tells whether remat "dots" is what costs the 5-seed step, with the time left
if ! want seeds_unroll; then :
elif [ "$(left)" -lt $SEEDS_S ]; then say "skip --seeds without remat: $(left) s left, needs ~$SEEDS_S s"
else say "run --seeds without remat"; timeout "$(left)" "$PY" benchmarks/wm_throughput.py "${SEEDS_ARGS[@]}" \
  --set model.observe_remat=none --json --out "$OUTDIR/wm_seeds.jsonl" >>"$LOG" 2>&1 \
  || say "--seeds without remat failed or timed out (exit $?; see log)"
fi
say "done: $(grep -c '"benchmark": "official_speed"' "$JSONL" 2>/dev/null || echo 0) records in $JSONL"
