"""Downloads into the run's caches: a file by URL (:func:`fetch_url`), the login-node prefetch of everything the
config names (:func:`prefetch`, :func:`download`), and what an offline job would miss (:func:`missing`)."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from codegrpo.hub.cache import (
    URL_OFFLINE_VAR,
    HubError,
    cache_home,
    datasets_cache,
    dataset_cached,
    dataset_files_cached,
    hub_cache,
    model_cached,
    url_cache,
    url_path,
)
from codegrpo.hub.refs import hub_refs

log = logging.getLogger(__name__)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def fetch_url(
    url: str,
    cache: str | os.PathLike | None = None,
    *,
    timeout: float = 120.0,
    offline: bool | None = None,
    key: str | None = None,
) -> Path:
    """The local copy of ``url`` in ``cache`` (default :func:`url_cache` of this process), downloaded once.

    A copy is written to a temporary name and renamed, with ``<file>.sha256`` beside it. ``offline`` (default:
    ``$CODEGRPO_URLS_OFFLINE`` set, as in every job of a run with ``hub.offline_jobs``) never downloads: a missing
    copy raises :class:`HubError` naming the URL, the config ``key`` when given, and the prefetch."""
    import urllib.request

    cache = Path(cache) if cache else url_cache()
    dest = url_path(url, cache)
    if dest.is_file():
        return dest
    if offline is None:
        offline = str(os.environ.get(URL_OFFLINE_VAR, "")).lower() in ("1", "true", "yes", "on")
    what = f"{key} = {url}" if key else url
    if offline:
        raise HubError(
            f"{what}: not in the URL cache ({dest}) and this job runs offline; run `snakemake prefetch` "
            f"on the login node, or download the file there yourself"
        )
    cache.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    log.info("downloading %s -> %s", url, dest)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(tmp, "wb") as fh:  # noqa: S310
            while chunk := resp.read(1 << 20):
                fh.write(chunk)
        (dest.parent / (dest.name + ".sha256")).write_text(_sha256_file(tmp) + "\n")
        os.replace(tmp, dest)
    except OSError as exc:  # URLError / HTTPError are OSErrors
        tmp.unlink(missing_ok=True)
        raise HubError(f"{what}: download failed: {exc}") from exc
    return dest


def _offline_now() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def prefetch(
    cfg: Mapping,
    *,
    endpoint: str | None = None,
    token: str | bool | None = None,
    max_workers: int = 8,
    environ: Mapping[str, str] | None = None,
) -> dict:
    """Download every hub id of :func:`hub_refs` into the run's cache (:func:`download`); return the manifest."""
    return download(
        hub_refs(cfg),
        cache_home(cfg, environ),
        hub_cache(cfg, environ),
        datasets_cache(cfg, environ),
        endpoint=endpoint,
        token=token,
        max_workers=max_workers,
        urls_dir=url_cache(cfg, environ),
    )


def download(
    refs: Mapping[str, list],
    hf_home: str | os.PathLike,
    models_dir: str | os.PathLike,
    datasets_dir: str | os.PathLike,
    *,
    endpoint: str | None = None,
    token: str | bool | None = None,
    max_workers: int = 8,
    urls_dir: str | os.PathLike | None = None,
) -> dict:
    """Download ``refs`` (:func:`hub_refs`'s shape) into the given cache folders; return the manifest.

    Models: ``snapshot_download(repo_id, cache_dir=models_dir)`` (every file of the main revision), so that a
    job's ``from_pretrained(id)`` / vLLM / ``snapshot_download`` find them with ``HF_HUB_OFFLINE=1``.
    Datasets: ``datasets.load_dataset(id, cache_dir=<the source's cache_dir or datasets_dir>)``, which downloads
    and prepares every split, as a job's offline ``load_dataset(id, split=...)`` expects. Dataset repositories:
    the listed files with ``snapshot_download(repo_type="dataset", allow_patterns=files)`` into ``models_dir``
    (what a job's ``hf_hub_download`` reads offline). Ids already cached cost one metadata request each.
    Raises :class:`HubError` naming the config key of the first id that fails.
    """
    if _offline_now():
        raise HubError(
            "prefetch needs the network, but HF_HUB_OFFLINE is set in this process; run the prefetch "
            "target on a node with internet access (the login node), without HF_HUB_OFFLINE"
        )
    from huggingface_hub import constants, snapshot_download

    models_dir, datasets_dir = Path(models_dir), Path(datasets_dir)
    if refs.get("datasets") and Path(constants.HF_HUB_CACHE).absolute() != models_dir:
        # datasets fetches the raw data files through huggingface_hub's own cache (HF_HOME of this process); the
        # jobs only need the prepared copy in datasets_dir, but the raw files then land outside the run's cache
        log.warning(
            "HF_HOME of this process (%s) is not the run's cache %s: the datasets' raw files go there",
            constants.HF_HOME,
            hf_home,
        )
    manifest: dict = {
        "hf_home": str(hf_home),
        "models_dir": str(models_dir),
        "datasets_dir": str(datasets_dir),
        "endpoint": endpoint or os.environ.get("HF_ENDPOINT") or "default",
        "models": [],
        "datasets": [],
        "dataset_repos": [],
    }
    for key, repo_id in refs.get("models", []):
        t0 = time.monotonic()
        log.info("prefetch model %s (%s) into %s", repo_id, key, models_dir)
        try:
            path = snapshot_download(
                repo_id, cache_dir=str(models_dir), endpoint=endpoint, token=token, max_workers=max_workers
            )
        except Exception as exc:  # noqa: BLE001 - network, auth, missing repo: all end the prefetch
            raise HubError(f"{key} = {repo_id!r}: download failed: {type(exc).__name__}: {exc}") from exc
        path = Path(path)
        files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
        manifest["models"].append(
            {
                "key": key,
                "id": repo_id,
                "snapshot": str(path),
                "revision": path.name,
                "files": files,
                "bytes": _dir_bytes(path),
                "seconds": round(time.monotonic() - t0, 2),
            }
        )
        log.info("model %s: %d files, revision %s, %.1fs", repo_id, len(files), path.name, time.monotonic() - t0)
    for key, repo_id, own_cache in (tuple(x) + (None,) * (3 - len(x)) for x in refs.get("datasets", [])):
        t0 = time.monotonic()
        where = Path(own_cache) if own_cache else datasets_dir
        log.info("prefetch dataset %s (%s) into %s", repo_id, key, where)
        try:
            import datasets

            ds = datasets.load_dataset(repo_id, cache_dir=str(where), token=token)
        except Exception as exc:  # noqa: BLE001
            raise HubError(f"{key} = {repo_id!r}: dataset download failed: {type(exc).__name__}: {exc}") from exc
        manifest["datasets"].append(
            {
                "key": key,
                "id": repo_id,
                "cache_dir": str(where),
                "splits": {s: len(ds[s]) for s in ds},
                "seconds": round(time.monotonic() - t0, 2),
            }
        )
    for key, repo_id, files in refs.get("dataset_repos", []):
        t0 = time.monotonic()
        log.info("prefetch dataset files %s of %s (%s) into %s", files, repo_id, key, models_dir)
        try:
            path = Path(
                snapshot_download(
                    repo_id,
                    repo_type="dataset",
                    allow_patterns=list(files),
                    cache_dir=str(models_dir),
                    endpoint=endpoint,
                    token=token,
                    max_workers=max_workers,
                )
            )
        except Exception as exc:  # noqa: BLE001
            raise HubError(f"{key} = {repo_id!r}: download of {files} failed: {type(exc).__name__}: {exc}") from exc
        got = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
        lacking = [f for f in files if not (path / f).is_file()]
        if lacking:
            raise HubError(f"{key} = {repo_id!r}: the dataset repository has no {lacking}")
        manifest["dataset_repos"].append(
            {"key": key, "id": repo_id, "snapshot": str(path), "files": got, "seconds": round(time.monotonic() - t0, 2)}
        )
    urls_dir = Path(urls_dir) if urls_dir else Path(hf_home) / "codegrpo-urls"
    manifest["urls_dir"] = str(urls_dir)
    manifest["urls"] = []
    for key, url in refs.get("urls", []):
        t0 = time.monotonic()
        path = fetch_url(url, urls_dir, offline=False, key=key)
        manifest["urls"].append(
            {
                "key": key,
                "url": url,
                "path": str(path),
                "bytes": path.stat().st_size,
                "sha256": _sha256_file(path),
                "seconds": round(time.monotonic() - t0, 2),
            }
        )
    return manifest


def missing(
    cfg: Mapping,
    environ: Mapping[str, str] | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    datasets_dir: str | os.PathLike | None = None,
) -> list[str]:
    """One problem per hub id of the run that an offline job would not find in the cache (names the config key).

    ``cache_dir`` / ``datasets_dir``: the models' / datasets' cache folders (default: :func:`hub_cache`,
    :func:`datasets_cache`).
    """
    models_dir = Path(cache_dir) if cache_dir else hub_cache(cfg, environ)
    data_dir = Path(datasets_dir) if datasets_dir else datasets_cache(cfg, environ)
    refs = hub_refs(cfg)
    out = []
    for key, ref in refs["models"]:
        if not model_cached(ref, models_dir):
            out.append(
                f"{key} = {ref!r} is neither a local path nor in the Hugging Face cache ({models_dir}), and "
                f"HF_HUB_OFFLINE=1 forbids downloading it; run `snakemake prefetch` on the login node (or "
                f"huggingface-cli download {ref} into the same HF_HOME), or set {key} to a local folder"
            )
    for key, ref, own_cache in refs["datasets"]:
        where = Path(own_cache) if own_cache else data_dir
        if not dataset_cached(ref, where):
            out.append(
                f"{key} = {ref!r} (dataset) is not in the datasets cache ({where}), and "
                f"HF_DATASETS_OFFLINE=1 forbids downloading it; run `snakemake prefetch` on the login node"
            )
    for key, ref, files in refs["dataset_repos"]:
        if not dataset_files_cached(ref, files, models_dir):
            out.append(
                f"{key} = {ref!r}: the dataset files {files} are not in the Hugging Face cache ({models_dir}), "
                f"and HF_HUB_OFFLINE=1 forbids downloading them; run `snakemake prefetch` on the login node"
            )
    urls_dir = url_cache(cfg, environ)
    for key, url in refs["urls"]:
        if not url_path(url, urls_dir).is_file():
            out.append(
                f"{key} = {url!r} is not in the URL cache ({urls_dir}), and offline jobs cannot download it; "
                f"run `snakemake prefetch` on the login node"
            )
    return out
