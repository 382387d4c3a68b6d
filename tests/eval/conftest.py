"""Fixtures of the evaluation tests shared by several modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def kodcode_heldout(repo_root, tmp_path_factory):
    from codegrpo.data.kodcode import prepare_kodcode

    out = tmp_path_factory.mktemp("kodcode")
    files = sorted(str(p) for p in (repo_root / "data" / "kodcode").glob("*.json"))
    prepare_kodcode(files, out_dir=out, val_fraction=0.1, heldout_fraction=0.2, seed=0)
    return out / "heldout.parquet"
