"""codegrpo.hub.cache: the cache folders and the environment every job gets (offline switches, URL cache)."""

from __future__ import annotations

import copy
from pathlib import Path

from codegrpo import hub


def test_job_env_and_cache_folders(paper, tmp_path):
    cfg = copy.deepcopy(paper)
    cfg["hub"] = {"cache_dir": str(tmp_path / "hf"), "offline_jobs": True}
    env = hub.job_env(cfg, {})
    assert env == {
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "CODEGRPO_URL_CACHE": str(tmp_path / "hf" / "codegrpo-urls"),
        "CODEGRPO_URLS_OFFLINE": "1",
    }
    assert hub.hub_cache(cfg, {"HF_HUB_CACHE": "/elsewhere"}) == tmp_path / "hf" / "hub"  # the config wins
    cfg["hub"] = {"cache_dir": None, "offline_jobs": False}
    # nothing configured: jobs keep the environment's HF_HOME; files by URL go under it
    assert hub.job_env(cfg, {"HF_HOME": "/x"}) == {"CODEGRPO_URL_CACHE": "/x/codegrpo-urls"}
    assert hub.cache_home(cfg, {"HF_HOME": "/x"}) == Path("/x")
    assert hub.hub_cache(cfg, {"HF_HOME": "/x", "HF_HUB_CACHE": "/y/hub"}) == Path("/y/hub")
    assert hub.datasets_cache(cfg, {"HF_HOME": "/x"}) == Path("/x/datasets")


def test_paper_config_runs_jobs_offline(paper):
    assert paper["hub"]["offline_jobs"] is True
    assert hub.job_env(paper, {})["HF_HUB_OFFLINE"] == "1"
