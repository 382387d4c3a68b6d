"""Shared fixtures: repository paths and the shipped data."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
VENV_BIN = Path(sys.executable).parent

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA_DIR


@pytest.fixture(scope="session")
def snakemake_bin() -> str:
    exe = VENV_BIN / "snakemake"
    return str(exe) if exe.exists() else shutil.which("snakemake")


# The two shipped configurations, validated (defaults filled in); one copy per test module, which may change it.
@pytest.fixture(scope="module")
def paper() -> dict:
    from codegrpo.config import load_config

    return load_config(REPO_ROOT / "config" / "paper.yaml", check_files=False)


@pytest.fixture(scope="module")
def local() -> dict:
    from codegrpo.config import load_config

    return load_config(REPO_ROOT / "config.yaml", check_files=False)
