"""Snakemake script of rule prefetch (login node): download every hub model and dataset of the config into the
run's Hugging Face cache (codegrpo.hub.prefetch) and write the manifest."""

import logging
import os

from codegrpo.hub import OFFLINE_VARS

# This rule is the one that goes online: the workflow exports the offline switches for every job
# (hub.offline_jobs), and huggingface_hub reads them when it is first imported.
for var in OFFLINE_VARS:
    os.environ.pop(var, None)
os.environ["HF_HOME"] = snakemake.params.hf_home  # noqa: F821  (datasets' raw files too go to the run's cache)

from codegrpo.hub import download  # noqa: E402
from codegrpo.io import write_json  # noqa: E402
from codegrpo.workflow import script_job  # noqa: E402

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    p = sm.params
    manifest = download(p.refs, p.hf_home, p.models_dir, p.datasets_dir)
    write_json(sm.output[0], manifest)
    logging.info(
        "prefetch: %d model(s), %d dataset(s) in %s",
        len(manifest["models"]),
        len(manifest["datasets"]),
        manifest["hf_home"],
    )
