"""The learning checks' runs, once for the whole package: the direction checks (test_direction.py) and the
curriculum check (test_curriculum.py) test them, and the report page (test_report.py) reads both. The Ray they
join is kept for the package (the root conftest's is per module), so no run happens twice."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from codegrpo import learning
from codegrpo.config import load_config

from tests.conftest import REPO_ROOT as REPO
from tests.conftest import SharedRay


@pytest.fixture(scope="package")
def shared_ray():
    """tests/conftest.py::shared_ray, for the whole package."""
    from codegrpo.verl import cpu

    with cpu.local_ray(SharedRay.slots, export=False) as env:
        yield SharedRay(env)


@pytest.fixture(scope="package")
def toy_runs(tmp_path_factory, shared_ray):
    """Every direction check once: the toy data, its tiny model, five GRPO runs on CPU (joining the session's Ray)."""
    from codegrpo.models import build_tiny_model

    cfg = load_config(REPO / "config.yaml")
    lc = cfg["learning_check"]
    out = tmp_path_factory.mktemp("learning")
    data = learning.write_toy_dataset(out / "data", lc["toy"]["n_train"], lc["toy"]["n_val"], cfg["seed"])
    build_tiny_model(
        out / "tiny", learning.toy_corpus(cfg["seed"]), vocab_size=lc["toy"]["vocab_size"], seed=cfg["seed"]
    )
    # two runs at a time: a run keeps about one core busy (tests/conftest.py::shared_ray has a slot for each)
    with shared_ray.joined(), ThreadPoolExecutor(max_workers=shared_ray.slots) as pool:
        futures = {
            check: pool.submit(
                learning.run_direction_check,
                cfg,
                check,
                train_files=data["train"],
                val_files=data["val"],
                init_model=str(out / "tiny"),
                run_dir=out / check,
            )
            for check in learning.CHECKS
        }
        verdicts = {check: f.result() for check, f in futures.items()}
    return out, verdicts


@pytest.fixture(scope="package")
def curriculum_run(tmp_path_factory, shared_ray):
    cfg = load_config(REPO / "config.yaml")
    out = tmp_path_factory.mktemp("curriculum")
    with shared_ray.joined():
        return out, learning.run_curriculum_check(cfg, out_dir=out)
