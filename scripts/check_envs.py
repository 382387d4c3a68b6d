#!/usr/bin/env python3
"""Resolve the pip part of every environment file (envs/*.yaml) for its Python version, without installing.

    .venv/bin/python scripts/check_envs.py [envs/train.yaml ...]

Needs PyPI (and the PyTorch CPU index for envs/data.yaml). Exit status 1 when any file does not resolve;
pip's explanation of the conflict is printed. The files are resolved side by side, one pip each, and printed in
file order (on 2 cores 35 s against 53 s one after another: a resolution is mostly pip's own CPU time). Run by
.ci/run.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from codegrpo.envs import EnvCheckError, check_env, load_env  # noqa: E402

SHOW = (
    "torch",
    "vllm",
    "verl",
    "transformers",
    "ray",
    "numpy",
    "numba",
    "snakemake",
    "snakemake-executor-plugin-slurm",
    "xformers",
)


def resolve(path: Path) -> tuple[bool, str]:
    """(resolved, the line to print) for one environment file."""
    t0 = time.time()
    try:
        spec = load_env(path)
        resolved = check_env(path)
    except EnvCheckError as exc:
        return False, f"FAIL {path}\n{exc}\n"
    key = ", ".join(f"{k} {resolved[k]}" for k in SHOW if k in resolved)
    return True, f"ok   {path} (python {spec.python}): {len(resolved)} packages in {time.time() - t0:.0f} s; {key}"


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or sorted((REPO / "envs").glob("*.yaml"))
    failed = 0
    with ThreadPoolExecutor(max_workers=max(1, len(paths))) as pool:
        for ok, line in pool.map(resolve, paths):
            failed += not ok
            print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
