"""The Hugging Face cache of a run: what the config loads from the hub, the login-node prefetch, offline jobs.

Compute nodes often have no internet. The ``prefetch`` target (a local rule, run on the login node) downloads
every model and dataset the configuration names by hub id into one cache (``hub.cache_dir``, used as
``HF_HOME``); with ``hub.offline_jobs`` every job then runs with ``HF_HUB_OFFLINE=1`` / ``HF_DATASETS_OFFLINE=1``
(:func:`job_env`, applied by ``rules/common.smk`` to the Snakemake process, whose environment every job
inherits: local jobs as child processes, SLURM jobs through ``sbatch --export=ALL``).

* :func:`hub_refs`: (config key, hub id) of every model (``model.base``, ``sft.import.*``, ``<rl stage>.import``,
  ``dhrcl.init``, ``dhrcl.training.import``, ``dhrcl.reward_model.model``, ``embedding.server_model_path`` when
  served, the embedding ``local_model_path`` of the reward and of ``evaluate.decompile``, ``hub.models``), every dataset loaded with
  ``datasets`` (``hub.datasets``, ``data.generate.source`` when the data is generated, ``data.kodcode.source``,
  the BigCodeBench sources of ``evaluate.codegen``) and the dataset files read one by one (LiveCodeBench);
* :func:`prefetch`: ``huggingface_hub.snapshot_download`` for the models and dataset files,
  ``datasets.load_dataset`` for the datasets (what the jobs call offline later), into the configured cache (a
  source's own ``cache_dir`` where it names one); returns a manifest;
* :func:`model_cached` / :func:`dataset_cached`: whether an id is in the cache (the preflight's offline check);
* :func:`url_sources` / :func:`fetch_url`: files the config names by http(s) URL (the EvalPlus releases, the
  SK²Decompile evaluation files) go to ``<HF_HOME>/codegrpo-urls/`` (:func:`url_cache`, ``$CODEGRPO_URL_CACHE`` in
  every job), fetched by the prefetch with their sha256 recorded; an offline job reads them there and never
  downloads.

``endpoint`` (or ``HF_ENDPOINT``) points everything at another hub, e.g. a mirror, or a local stand-in in tests.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

from codegrpo.contracts import RL_STAGES

log = logging.getLogger(__name__)

__all__ = [
    "HubError",
    "OFFLINE_VARS",
    "cache_home",
    "dataset_cached",
    "dataset_files_cached",
    "hub_refs",
    "is_hub_id",
    "job_env",
    "datasets_cache",
    "download",
    "hub_cache",
    "missing",
    "model_cached",
    "prefetch",
    "fetch_url",
    "url_cache",
    "url_path",
    "url_sources",
]

OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
URL_CACHE_VAR = "CODEGRPO_URL_CACHE"
URL_OFFLINE_VAR = "CODEGRPO_URLS_OFFLINE"  # set in every job with hub.offline_jobs: files by URL come from the cache
# config keys whose http(s) values are services, not files to fetch
_SERVICE_KEYS = ("api_base", "endpoint", "base_url")


class HubError(RuntimeError):
    """A download failed, or the cache cannot serve a job offline (the message names the config key)."""


def is_hub_id(ref: str, cfg: Mapping | None = None) -> bool:
    """``owner/name`` that is not an existing local path (nor a path under the results folder)."""
    if not isinstance(ref, str) or not ref or ref == "tiny":
        return False
    results = str((cfg or {}).get("results_dir", "results")).rstrip("/") + "/"
    if ref.startswith((".", "/", "~", results)) or Path(os.path.expanduser(ref)).exists():
        return False
    parts = ref.split("/")
    return len(parts) == 2 and all(parts)


def _dataset_sources(cfg: Mapping) -> list[tuple]:
    """(config key, id, cache_dir) of the datasets the data stages and the evaluation load with
    ``datasets.load_dataset``, where the config makes them load one from the hub."""
    out: list[tuple] = []
    data = cfg.get("data") or {}
    places = []
    if data.get("sk2d_inputs") == "generated":
        places.append(("data.generate.source", (data.get("generate") or {}).get("source") or {}))
    places.append(("data.kodcode.source", (data.get("kodcode") or {}).get("source") or {}))
    for key, src in places:
        if src.get("hub_id") and not src.get("path"):  # a path takes precedence over the hub id
            out.append((f"{key}.hub_id", src["hub_id"], src.get("cache_dir")))
    codegen = (cfg.get("evaluate") or {}).get("codegen") or {}
    for bench in ("bigcodebench_full", "bigcodebench_hard"):
        if bench in (codegen.get("benchmarks") or []) and (codegen.get(bench) or {}).get("source"):
            out.append((f"evaluate.codegen.{bench}.source", codegen[bench]["source"], None))
    return out


def _dataset_repos(cfg: Mapping) -> list[tuple]:
    """(config key, id, files) of dataset repositories whose files the evaluation downloads one by one
    (``hf_hub_download``, into the hub cache): LiveCodeBench's ``test*.jsonl`` of the configured version."""
    codegen = (cfg.get("evaluate") or {}).get("codegen") or {}
    lcb = codegen.get("livecodebench") or {}
    if "livecodebench" not in (codegen.get("benchmarks") or []) or not lcb.get("source"):
        return []
    from codegrpo.eval.suites import lcb_files

    return [("evaluate.codegen.livecodebench.source", lcb["source"], lcb_files(lcb.get("version") or "release_v6"))]


def hub_refs(cfg: Mapping) -> dict[str, list[tuple]]:
    """Every hub id the run loads, by how it is loaded; local folders and files are left out, and an id named
    twice is listed once (its first key):

    * ``models``: (config key, id), loaded with ``from_pretrained`` / vLLM / ``snapshot_download``;
    * ``datasets``: (config key, id, cache_dir or None), loaded with ``datasets.load_dataset`` (``cache_dir``:
      the source's own ``cache_dir``, else the datasets cache of ``HF_HOME``);
    * ``dataset_repos``: (config key, id, files), dataset files read with ``hf_hub_download``.
    """
    models: list[tuple[str, str]] = []
    base = (cfg.get("model") or {}).get("base")
    if base:
        models.append(("model.base", base))
    for which, value in ((cfg.get("sft") or {}).get("import") or {}).items():
        if value:
            models.append((f"sft.import.{which}", value))
    for stage in RL_STAGES:
        if (cfg.get(stage) or {}).get("import"):
            models.append((f"{stage}.import", cfg[stage]["import"]))
    dh = cfg.get("dhrcl") or {}
    if dh.get("init") and dh["init"] != "base" and not dh.get("models"):
        models.append(("dhrcl.init", dh["init"]))
    for m in dh.get("models") or []:
        if m.get("init") and m["init"] != "base":
            models.append((f"dhrcl.models[{m['name']}].init", m["init"]))
    if (dh.get("training") or {}).get("import"):
        models.append(("dhrcl.training.import", dh["training"]["import"]))
    if (dh.get("reward_model") or {}).get("model"):  # the reward-model variants' scoring server
        models.append(("dhrcl.reward_model.model", dh["reward_model"]["model"]))
    emb = cfg.get("embedding") or {}
    if emb.get("serve") and emb.get("server_model_path"):
        models.append(("embedding.server_model_path", emb["server_model_path"]))
    if emb.get("local_model_path"):  # the in-process backend loads it with local_files_only
        models.append(("embedding.local_model_path", emb["local_model_path"]))
    ev_emb = (((cfg.get("evaluate") or {}).get("decompile") or {}).get("embedding") or {})
    if ev_emb.get("local_model_path"):
        models.append(("evaluate.decompile.embedding.local_model_path", ev_emb["local_model_path"]))
    hub = cfg.get("hub") or {}
    models += [(f"hub.models[{i}]", m) for i, m in enumerate(hub.get("models") or [])]
    datasets = [(f"hub.datasets[{i}]", d, None) for i, d in enumerate(hub.get("datasets") or [])]
    datasets += _dataset_sources(cfg)

    def unique(items):
        seen, out = set(), []
        for item in items:
            ref = item[1]
            if ref not in seen and is_hub_id(ref, cfg):
                seen.add(ref)
                out.append(tuple(item))
        return out

    return {"models": unique(models), "datasets": unique(datasets), "dataset_repos": unique(_dataset_repos(cfg)),
            "urls": url_sources(cfg)}


def cache_home(cfg: Mapping, environ: Mapping[str, str] | None = None) -> Path:
    """``HF_HOME`` of the run: ``hub.cache_dir``, else the environment's ``HF_HOME``, else ~/.cache/huggingface."""
    environ = os.environ if environ is None else environ
    configured = (cfg.get("hub") or {}).get("cache_dir")
    home = configured or environ.get("HF_HOME") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
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


# ------------------------------------------------------------------------------------------ files by URL
def url_sources(cfg: Mapping) -> list[tuple[str, str]]:
    """(config key, URL) of every file the data stages and the evaluation would download by http(s) URL.

    Every http(s) string under ``data``, ``datasets`` and ``evaluate`` counts, except service addresses
    (``api_base`` ...), sections with ``enabled: false`` and code-generation benchmarks not in
    ``evaluate.codegen.benchmarks``."""
    out: list[tuple[str, str]] = []
    codegen = (cfg.get("evaluate") or {}).get("codegen") or {}
    unused = {f"evaluate.codegen.{k}" for k, v in codegen.items()
              if isinstance(v, Mapping) and "source" in v and k not in (codegen.get("benchmarks") or [])}

    def walk(node, key):
        if isinstance(node, Mapping):
            if node.get("enabled") is False or key in unused:
                return
            for k, v in node.items():
                if str(k) not in _SERVICE_KEYS:
                    walk(v, f"{key}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")
        elif isinstance(node, str) and node.startswith(("http://", "https://")):
            out.append((key, node))

    for section in ("data", "datasets", "evaluate"):
        walk(cfg.get(section) or {}, section)
    seen: set[str] = set()
    return [(k, u) for k, u in out if not (u in seen or seen.add(u))]


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


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def fetch_url(url: str, cache: str | os.PathLike | None = None, *, timeout: float = 120.0,
              offline: bool | None = None, key: str | None = None) -> Path:
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
        raise HubError(f"{what}: not in the URL cache ({dest}) and this job runs offline; run `snakemake prefetch` "
                       f"on the login node, or download the file there yourself")
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


def model_cached(repo_id: str, cache: Path | str, revision: str | None = None) -> bool:
    """The model's snapshot (its config.json) is in the hub cache folder ``cache`` (``<HF_HOME>/hub``)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=str(cache),
                                       revision=revision)
    except Exception:  # noqa: BLE001 - an id the hub would reject is not in the cache either
        return False
    return isinstance(found, str)


def dataset_files_cached(repo_id: str, files: list[str], cache: Path | str) -> bool:
    """Every one of ``files`` of dataset repository ``repo_id`` is in the hub cache folder ``cache``."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return all(isinstance(try_to_load_from_cache(repo_id, f, cache_dir=str(cache), repo_type="dataset"), str)
                   for f in files)
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


def _offline_now() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def prefetch(cfg: Mapping, *, endpoint: str | None = None, token: str | bool | None = None,
             max_workers: int = 8, environ: Mapping[str, str] | None = None) -> dict:
    """Download every hub id of :func:`hub_refs` into the run's cache (:func:`download`); return the manifest."""
    return download(hub_refs(cfg), cache_home(cfg, environ), hub_cache(cfg, environ), datasets_cache(cfg, environ),
                    endpoint=endpoint, token=token, max_workers=max_workers, urls_dir=url_cache(cfg, environ))


def download(refs: Mapping[str, list], hf_home: str | os.PathLike, models_dir: str | os.PathLike,
             datasets_dir: str | os.PathLike, *, endpoint: str | None = None, token: str | bool | None = None,
             max_workers: int = 8, urls_dir: str | os.PathLike | None = None) -> dict:
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
        raise HubError("prefetch needs the network, but HF_HUB_OFFLINE is set in this process; run the prefetch "
                       "target on a node with internet access (the login node), without HF_HUB_OFFLINE")
    from huggingface_hub import constants, snapshot_download

    models_dir, datasets_dir = Path(models_dir), Path(datasets_dir)
    if refs.get("datasets") and Path(constants.HF_HUB_CACHE).absolute() != models_dir:
        # datasets fetches the raw data files through huggingface_hub's own cache (HF_HOME of this process); the
        # jobs only need the prepared copy in datasets_dir, but the raw files then land outside the run's cache
        log.warning("HF_HOME of this process (%s) is not the run's cache %s: the datasets' raw files go there",
                    constants.HF_HOME, hf_home)
    manifest: dict = {"hf_home": str(hf_home), "models_dir": str(models_dir), "datasets_dir": str(datasets_dir),
                      "endpoint": endpoint or os.environ.get("HF_ENDPOINT") or "default",
                      "models": [], "datasets": [], "dataset_repos": []}
    for key, repo_id in refs.get("models", []):
        t0 = time.monotonic()
        log.info("prefetch model %s (%s) into %s", repo_id, key, models_dir)
        try:
            path = snapshot_download(repo_id, cache_dir=str(models_dir), endpoint=endpoint, token=token,
                                     max_workers=max_workers)
        except Exception as exc:  # noqa: BLE001 - network, auth, missing repo: all end the prefetch
            raise HubError(f"{key} = {repo_id!r}: download failed: {type(exc).__name__}: {exc}") from exc
        path = Path(path)
        files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
        manifest["models"].append({"key": key, "id": repo_id, "snapshot": str(path), "revision": path.name,
                                   "files": files, "bytes": _dir_bytes(path),
                                   "seconds": round(time.monotonic() - t0, 2)})
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
        manifest["datasets"].append({"key": key, "id": repo_id, "cache_dir": str(where),
                                     "splits": {s: len(ds[s]) for s in ds}, "seconds": round(time.monotonic() - t0, 2)})
    for key, repo_id, files in refs.get("dataset_repos", []):
        t0 = time.monotonic()
        log.info("prefetch dataset files %s of %s (%s) into %s", files, repo_id, key, models_dir)
        try:
            path = Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=list(files),
                                          cache_dir=str(models_dir), endpoint=endpoint, token=token,
                                          max_workers=max_workers))
        except Exception as exc:  # noqa: BLE001
            raise HubError(f"{key} = {repo_id!r}: download of {files} failed: {type(exc).__name__}: {exc}") from exc
        got = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
        lacking = [f for f in files if not (path / f).is_file()]
        if lacking:
            raise HubError(f"{key} = {repo_id!r}: the dataset repository has no {lacking}")
        manifest["dataset_repos"].append({"key": key, "id": repo_id, "snapshot": str(path), "files": got,
                                          "seconds": round(time.monotonic() - t0, 2)})
    urls_dir = Path(urls_dir) if urls_dir else Path(hf_home) / "codegrpo-urls"
    manifest["urls_dir"] = str(urls_dir)
    manifest["urls"] = []
    for key, url in refs.get("urls", []):
        t0 = time.monotonic()
        path = fetch_url(url, urls_dir, offline=False, key=key)
        manifest["urls"].append({"key": key, "url": url, "path": str(path), "bytes": path.stat().st_size,
                                 "sha256": _sha256_file(path), "seconds": round(time.monotonic() - t0, 2)})
    return manifest


def missing(cfg: Mapping, environ: Mapping[str, str] | None = None, *, cache_dir: str | os.PathLike | None = None,
            datasets_dir: str | os.PathLike | None = None) -> list[str]:
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
            out.append(f"{key} = {ref!r} is neither a local path nor in the Hugging Face cache ({models_dir}), and "
                       f"HF_HUB_OFFLINE=1 forbids downloading it; run `snakemake prefetch` on the login node (or "
                       f"huggingface-cli download {ref} into the same HF_HOME), or set {key} to a local folder")
    for key, ref, own_cache in refs["datasets"]:
        where = Path(own_cache) if own_cache else data_dir
        if not dataset_cached(ref, where):
            out.append(f"{key} = {ref!r} (dataset) is not in the datasets cache ({where}), and "
                       f"HF_DATASETS_OFFLINE=1 forbids downloading it; run `snakemake prefetch` on the login node")
    for key, ref, files in refs["dataset_repos"]:
        if not dataset_files_cached(ref, files, models_dir):
            out.append(f"{key} = {ref!r}: the dataset files {files} are not in the Hugging Face cache ({models_dir}), "
                       f"and HF_HUB_OFFLINE=1 forbids downloading them; run `snakemake prefetch` on the login node")
    urls_dir = url_cache(cfg, environ)
    for key, url in refs["urls"]:
        if not url_path(url, urls_dir).is_file():
            out.append(f"{key} = {url!r} is not in the URL cache ({urls_dir}), and offline jobs cannot download it; "
                       f"run `snakemake prefetch` on the login node")
    return out
