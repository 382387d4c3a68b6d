"""codegrpo.eval.codegen_data: the loaders refuse what they cannot read, naming it (the benchmarks' contents are
scored in tests/eval/test_codegen.py)."""

from __future__ import annotations

import pytest

from codegrpo.eval import codegen as c
from codegrpo.eval import codegen_data


def test_loader_rejects_missing_parquet(tmp_path):
    with pytest.raises(FileNotFoundError, match="held-out parquet"):
        c.load_kodcode_heldout(tmp_path / "none.parquet")


def test_an_unknown_benchmark_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown benchmark 'nope'; known: \['humaneval', 'kodcode_heldout', "):
        codegen_data.load_benchmark("nope")
