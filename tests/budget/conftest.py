"""The paper config of the budget's tests."""

import copy

import pytest

from codegrpo.config import load_config

from tests.conftest import REPO_ROOT as ROOT


@pytest.fixture(scope="module")
def paper_cfg():
    return load_config(ROOT / "config" / "paper.yaml", check_files=False)


def paper_with(paper_cfg, tmp_path, **changes):
    """The paper config with no data built (results under tmp_path) and ``changes`` (dotted keys) applied."""
    cfg = copy.deepcopy(paper_cfg)
    cfg["results_dir"] = str(tmp_path / "results")
    for key, value in changes.items():
        node = cfg
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    return cfg
