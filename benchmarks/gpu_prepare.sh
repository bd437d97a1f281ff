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
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
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
