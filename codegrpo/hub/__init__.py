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

Modules: :mod:`~codegrpo.hub.refs` (what the config loads), :mod:`~codegrpo.hub.cache` (where the caches lie, the
jobs' environment, what is cached), :mod:`~codegrpo.hub.fetch` (downloads: by URL, the prefetch, what is missing);
the package re-exports the public names.
"""

from __future__ import annotations

from codegrpo.hub.cache import (
    OFFLINE_VARS,
    HubError,
    cache_home,
    dataset_cached,
    dataset_files_cached,
    datasets_cache,
    hub_cache,
    job_env,
    model_cached,
    url_cache,
    url_path,
)
from codegrpo.hub.fetch import download, fetch_url, missing, prefetch
from codegrpo.hub.refs import hub_refs, is_hub_id, url_sources

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
