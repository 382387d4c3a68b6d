"""The real KodCode record the reward tests score."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def record(data_dir):
    recs = json.loads((data_dir / "kodcode" / "KodCode_algorithm_100_1741212598.json").read_text())
    return next(r for r in recs if r["question_id"] == "Algorithm_00000003_I")
