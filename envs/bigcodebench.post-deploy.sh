#!/usr/bin/env bash
# Run by Snakemake (--sdm conda) inside a freshly created envs/bigcodebench.yaml environment, from the
# workflow's working directory (the repository root): install the codegrpo package itself.
set -euo pipefail
python -m pip install --no-deps -e "${CODEGRPO_ROOT:-.}"
