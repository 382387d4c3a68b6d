# Config validation (JSON schema, defaults filled in) and helpers shared by every stage.
import os

from snakemake.utils import validate

validate(config, schema="../schemas/config.schema.yaml")

RESULTS = config["results_dir"]
LOGS = config["logs_dir"]

# Each stage's .smk registers the files its named target rule builds; `all` asks for every one.
STAGE_TARGETS = {}


def register_targets(stage, files):
    STAGE_TARGETS.setdefault(stage, []).extend(files)
    return files


def all_targets(wildcards):
    return [f for files in STAGE_TARGETS.values() for f in files]


def res(*parts):
    """A path under the results directory."""
    return os.path.join(RESULTS, *parts)


def logpath(*parts):
    """A path under the logs directory."""
    return os.path.join(LOGS, *parts)
