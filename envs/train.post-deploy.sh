#!/usr/bin/env bash
# Run by Snakemake (--sdm conda) inside a freshly created envs/train.yaml environment, from the
# workflow's working directory (the repository root). Also run it by hand after
# `conda env create -f envs/train.yaml`. Two steps:
#   1. the codegrpo package itself (no dependencies: the environment file has them);
#   2. flash-attn (verl 0.4.1 imports flash_attn.bert_padding on CUDA): the prebuilt wheel of its GitHub
#      release matching this torch / CUDA / Python / C++ ABI, else a source build with --no-build-isolation
#      and nvcc from the environment (CUDA_HOME, the env's bin/, PATH). See docs/cluster.md.
# Exits non-zero with a message naming what is missing when neither works.
set -euo pipefail
python -m pip install --no-deps -e "${CODEGRPO_ROOT:-.}"
python -m codegrpo.envs flash-attn
python -c 'import flash_attn.bert_padding, flash_attn; print("[flash-attn] import ok:", flash_attn.__version__)'
