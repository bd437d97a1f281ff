#!/usr/bin/env bash
# Builds a separate virtual environment for the official DreamerV3 code
# (danijar/dreamerv3, released on PyPI as the source archive dreamer==3.3.1),
# used only as a reference by benchmarks/official/run.py and speed.py. It is never
# a dependency of this project. Idempotent: a finished build is left as is.
#
#   bash benchmarks/official/setup.sh        # -> .official/venv, .official/dreamer-3.3.1
#   bash benchmarks/official/setup.sh --source-only   # -> .official/dreamer-3.3.1 alone (to carry to a GPU)
#
# The archive's setup.py reads a requirements.txt it does not ship, so pip cannot
# install it; we download it from PyPI (sha256 pinned), unpack it, add the
# configs.yaml and env wrappers it also lacks (benchmarks/official/upstream/, same
# release), and run it from source with its requirements.txt installed, except:
# jax is the CPU build of the pinned jax==0.4.33 (the file pins jax[cuda12]), and
# the GPU-only / interactive extras (nvidia-cuda-nvcc, ipdb, av,
# google-resumable-media) are left out; the DMC, gymnasium and Meta-World envs
# are added at the versions this project uses. elements is held below 3.19:
# 3.19 dropped the tuple aggregations (`agg=('avg', 'max', 'sum')`) that 3.3.1's
# train loop uses for every `log/` key of an env, which Meta-World's `log/success`
# is (DMC and gym runs have no such key and ran either way). BUILD names this
# recipe: a venv built by an older one is brought up to date by rerunning this.
set -euo pipefail
BUILD=2  # benchmarks/official/run.py OFFICIAL_BUILD must match
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OFF="$ROOT/.official"
SRC="$OFF/dreamer-3.3.1"
VENV="$OFF/venv"
PY="${PYTHON:-python3.11}"
URL="https://files.pythonhosted.org/packages/25/02/ec5a995af942a4e58d70915d7472564517ecb5bbd8f45a4dfe6db84e0979/dreamer-3.3.1.tar.gz"
SHA=b6dca5e1039bb632b48421ea0e2722b2d06557b2e94b24669272c69d6b983d03
SOURCE_ONLY=0
[ "${1:-}" = "--source-only" ] && SOURCE_ONLY=1
mkdir -p "$OFF"
if [ $SOURCE_ONLY = 0 ] && [ "$(cat "$VENV/.complete" 2>/dev/null)" = "$BUILD" ]; then
  echo "[official] already built: $VENV"; exit 0
fi
command -v "$PY" >/dev/null || { echo "[official] $PY not found; set PYTHON=/path/to/python3.11" >&2; exit 2; }
if [ ! -f "$SRC/dreamerv3/agent.py" ]; then
  echo "[official] downloading dreamer==3.3.1 from PyPI"
  "$PY" - "$URL" "$SHA" "$OFF/dreamer-3.3.1.tar.gz" <<'PYEOF'
import hashlib, sys, urllib.request
url, sha, out = sys.argv[1:]
data = urllib.request.urlopen(url, timeout=120).read()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit(f"[official] sha256 mismatch for {url}")
open(out, "wb").write(data)
PYEOF
  tar xzf "$OFF/dreamer-3.3.1.tar.gz" -C "$OFF"
fi
UP="$ROOT/benchmarks/official/upstream"
cp "$UP/configs.yaml" "$SRC/dreamerv3/configs.yaml"
mkdir -p "$SRC/embodied/envs"
touch "$SRC/embodied/envs/__init__.py"
cp "$UP/dmc.py" "$UP/from_dm.py" "$UP/from_gym.py" "$SRC/embodied/envs/"
if [ $SOURCE_ONLY = 1 ]; then echo "[official] source: $SRC"; exit 0; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# requirements.txt of dreamer==3.3.1 (CPU jax at the pinned version).
"$VENV/bin/python" -m pip install -q \
  "jax==0.4.33" "jaxlib==0.4.33" chex colored_traceback einops "elements>=3.17.0,<3.19" \
  "granular>=0.20.3" jaxtyping "ninjax>=3.5.1" "numpy<2" optax "portal>=3.5.0" \
  "scope>=0.4.4" tqdm ruamel.yaml cloudpickle
# Environments: DMC (its own wrapper), gymnasium / Meta-World (its gym adapter).
"$VENV/bin/python" -m pip install -q dm_control "gymnasium[mujoco]" "metaworld==3.1.1"
"$VENV/bin/python" -c "import jax, ninjax, elements, dm_control, gymnasium, metaworld; print('[official] jax', jax.__version__, 'devices', jax.devices())"
echo "$BUILD" > "$VENV/.complete"
echo "[official] built: $VENV (source: $SRC)"
