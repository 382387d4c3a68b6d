"""Where the run's Hugging Face cache and URL cache lie, the environment every job gets, and whether an id is
cached (see :mod:`codegrpo.hub`)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
URL_CACHE_VAR = "CODEGRPO_URL_CACHE"
URL_OFFLINE_VAR = "CODEGRPO_URLS_OFFLINE"  # set in every job with hub.offline_jobs: files by URL come from the cache


class HubError(RuntimeError):
    """A download failed, or the cache cannot serve a job offline (the message names the config key)."""


def cache_home(cfg: Mapping, environ: Mapping[str, str] | None = None) -> Path:
    """``HF_HOME`` of the run: ``hub.cache_dir``, else the environment's ``HF_HOME``, else ~/.cache/huggingface."""
    environ = os.environ if environ is None else environ
    configured = (cfg.get("hub") or {}).get("cache_dir")
    home = (
        configured
        or environ.get("HF_HOME")
        or os.path.join(environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    )
    return Path(os.path.expanduser(home)).absolute()


def hub_cache(cfg: Mapping, environ: Mapping[str, str] | None = None) -> Path:
    """The models' cache folder: ``<HF_HOME>/hub`` (``HF_HUB_CACHE`` when set and ``hub.cache_dir`` is not)."""
    environ = os.environ if environ is None else environ
    if not (cfg.get("hub") or {}).get("cache_dir") and environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(environ["HF_HUB_CACHE"])).absolute()
    return cache_home(cfg, environ) / "hub"


def datasets_cache(cfg: Mapping, environ: Mapping[str, str] | None = None) -> Path:
    """The datasets' cache folder: ``<HF_HOME>/datasets`` (``HF_DATASETS_CACHE`` when set, as for models)."""
    environ = os.environ if environ is None else environ
    if not (cfg.get("hub") or {}).get("cache_dir") and environ.get("HF_DATASETS_CACHE"):
        return Path(os.path.expanduser(environ["HF_DATASETS_CACHE"])).absolute()
    return cache_home(cfg, environ) / "datasets"


def job_env(cfg: Mapping, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables every job gets: ``HF_HOME`` (when ``hub.cache_dir`` is set), and with ``hub.offline_jobs`` the
    offline switches of huggingface_hub, datasets and transformers."""
    hub = cfg.get("hub") or {}
    env: dict[str, str] = {}
    if hub.get("cache_dir"):
        env["HF_HOME"] = str(cache_home(cfg, environ))
    env[URL_CACHE_VAR] = str(url_cache(cfg, environ))
    if hub.get("offline_jobs"):
        env.update({v: "1" for v in (*OFFLINE_VARS, URL_OFFLINE_VAR)})
    return env


def url_cache(cfg: Mapping | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The folder of files fetched by URL: ``<HF_HOME of the run>/codegrpo-urls`` (a job reads
    ``$CODEGRPO_URL_CACHE``, which :func:`job_env` sets to the same folder)."""
    environ = os.environ if environ is None else environ
    if cfg is None and environ.get(URL_CACHE_VAR):
        return Path(environ[URL_CACHE_VAR])
    return cache_home(cfg or {}, environ) / "codegrpo-urls"


def url_path(url: str, cache: str | os.PathLike) -> Path:
    """Where ``url`` is kept in ``cache``: ``<sha256(url)[:16]>-<file name>``."""
    name = Path(url.split("?", 1)[0].rstrip("/")).name or "index"
    return Path(cache) / f"{hashlib.sha256(url.encode()).hexdigest()[:16]}-{name}"


def model_cached(repo_id: str, cache: Path | str, revision: str | None = None) -> bool:
    """The model's snapshot (its config.json) is in the hub cache folder ``cache`` (``<HF_HOME>/hub``)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=str(cache), revision=revision)
    except Exception:  # noqa: BLE001 - an id the hub would reject is not in the cache either
        return False
    return isinstance(found, str)


def dataset_files_cached(repo_id: str, files: list[str], cache: Path | str) -> bool:
    """Every one of ``files`` of dataset repository ``repo_id`` is in the hub cache folder ``cache``."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return all(
            isinstance(try_to_load_from_cache(repo_id, f, cache_dir=str(cache), repo_type="dataset"), str)
            for f in files
        )
    except Exception:  # noqa: BLE001
        return False


def _snake(name: str) -> str:
    """``datasets``' camel-case to snake-case rule for cache folder names (``KodCode-Light`` -> ``kod_code-_light``)."""
    try:
        from datasets.naming import camelcase_to_snakecase
    except ImportError:  # the driver environment has no datasets: the same rule
        name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
        return re.sub(r"([a-z\d])([A-Z])", r"\1_\2", name).lower()
    return camelcase_to_snakecase(name)


def dataset_cached(repo_id: str, cache: Path | str) -> bool:
    """``datasets`` has a prepared copy of the dataset in ``cache`` (``<HF_HOME>/datasets``), which is what
    ``load_dataset`` reuses offline: ``<namespace>___<snake-case name>/<config>/<version>/<hash>/``."""
    namespace, _, name = repo_id.rpartition("/")
    folder = Path(cache) / (f"{namespace}___{_snake(name)}" if namespace else _snake(name))
    return folder.is_dir() and any(folder.glob("*/*/*/dataset_info.json"))
