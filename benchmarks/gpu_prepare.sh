#!/usr/bin/env bash
# Prepares, on a machine WITH the package registry, what benchmarks/gpu_session.sh needs to also run the
# official DreamerV3 on a GPU machine without one:
#   .official/dreamer-3.3.1   the official source (benchmarks/official/setup.sh --source-only: PyPI archive,
#                             sha256-pinned, plus the configs.yaml it lacks), ~0.4 MB
#   .whl/official/*.whl       its requirements that the GPU image lacks, for Python 3.12 (pure Python but
#                             ruamel.yaml.clib), ~1 MB
# Both folders are git-ignored; name them in the device call's `carry`: [".official/dreamer-3.3.1", ".whl"].
# The GPU image already holds jax, chex, optax, einops, cloudpickle, msgpack, psutil, numpy
# (/work/.library/device/KINDS.md); `scope` (a 26 MB viewer) is left out: the train step never imports it.
#
#   bash benchmarks/gpu_prepare.sh --dmc    # instead: .whl/dmc/*.whl for benchmarks/gpu_curve.sh (~11 MB)
# --dmc writes what a DMC learning curve needs that the GPU image lacks, for Python 3.12: mujoco, dm_control
# (repacked without the assets of domains a curve never loads: 54 -> 0.8 MB; benchmarks/repack_wheel.py),
# dm-env, dm-tree, glfw, pyopengl, gymnasium, farama-notifications, tensorboardX. Versions as pyproject.toml
# pins them (dm-control 1.0.28 is built against mujoco 3.3.0).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
if [ "${1:-}" = "--dmc" ]; then
  mkdir -p .whl/dmc
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${TARGET_PYTHON:-3.12}" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl/dmc "dm-control==1.0.28" "mujoco==3.3.0" dm-env dm-tree glfw pyopengl gymnasium farama-notifications \
    tensorboardX
  DROP=(dm_control/locomotion/soccer/ dm_control/locomotion/walkers/assets/ dm_control/suite/dog_assets/
        dm_control/mujoco/testing/ dm_control/blender/ dm_control/mjcf/test_assets/ dm_control/third_party/kinova/ .png)
  "$PY" benchmarks/repack_wheel.py .whl/dmc/dm_control-1.0.28-py3-none-any.whl "${DROP[@]/#/--drop=}"
  ls -la .whl/dmc
  du -sh .whl/dmc
  exit 0
fi
PYTHON="$PY" bash benchmarks/official/setup.sh --source-only
mkdir -p .whl/official
# elements is held below 3.19 as in setup.sh; its 3.17-3.18 releases are source archives, so build wheels
"$PY" -m pip wheel -q --no-deps -w .whl/official "elements>=3.17.0,<3.19" "ninjax>=3.5.1" "granular>=0.20.3" \
  "portal>=3.5.0" colored_traceback
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${TARGET_PYTHON:-3.12}" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl/official "ruamel.yaml" "ruamel.yaml.clib"
ls -la .whl/official
du -sh .official/dreamer-3.3.1 .whl/official
