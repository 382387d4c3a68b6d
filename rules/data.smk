# Stage: data. Optional generation of the SK2Decompile training files from (pseudo-code, source) pairs, then
# raw JSONL -> validated, normalised, header-checked records per dataset -> verl parquet files
# (RL and SFT, per SK2Decompile stage) and the KodCode slices for DHRCL. Target rule: `data`.
# Library code: codegrpo/data/ (docs/data.md).
import os
import re

from codegrpo.cluster.resources import header_threads
from codegrpo.config import check_input_files
from codegrpo.data.generate import OUTPUTS as GEN_OUTPUTS, generated_datasets
from codegrpo.data.kodcode import input_files as kodcode_input_files

# Fail at parse time, naming the key path, when a configured input file is missing.
check_input_files(config, source="config", base_dir=os.getcwd())

DATA_CFG = config["data"]
GEN = DATA_CFG["generate"]
GEN_DIR = res("data", "generated")
# data.sk2d_inputs: the configured datasets (default: the shipped examples) or the generated files feed the
# parquet files. The configured datasets stay buildable targets either way (results/data/<name>/...).
if DATA_CFG["sk2d_inputs"] == "generated":
    DATASETS = generated_datasets(GEN_DIR)
    ALL_DATASETS = {**config["datasets"], **DATASETS}
else:
    DATASETS = ALL_DATASETS = config["datasets"]
DATASET_RE = "|".join(re.escape(name) for name in ALL_DATASETS)


# (stage, role) -> names of the configured datasets that feed that parquet pair.
DATA_SOURCES = {
    (stage, role): [
        name
        for name, ds in DATASETS.items()
        if ds["stage"] == stage and role in ds["roles"]
    ]
    for stage in ("skeleton", "skin")
    for role in ("rl", "sft")
}


rule data_ingest:
    input:
        lambda wc: ALL_DATASETS[wc.dataset]["path"],
    output:
        records=res("data", "{dataset}", "ingested.jsonl"),
        rejects=res("data", "{dataset}", "rejects.jsonl"),
        summary=res("data", "{dataset}", "ingest_summary.json"),
    log:
        logpath("data_ingest", "{dataset}.log"),
    wildcard_constraints:
        dataset=DATASET_RE,
    priority: 10
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("data"),
    params:
        name=lambda wc: wc.dataset,
        dataset=lambda wc: ALL_DATASETS[wc.dataset],
        on_bad_record=config["on_bad_record"],
        max_line_bytes=DATA_CFG["max_line_bytes"],
        aliases=DATA_CFG["data_source_aliases"],
    script:
        "../workflow_scripts/data_ingest.py"


rule data_normalize:
    input:
        records=res("data", "{dataset}", "ingested.jsonl"),
    output:
        records=res("data", "{dataset}", "normalized.jsonl"),
        dropped=res("data", "{dataset}", "dropped.jsonl"),
        summary=res("data", "{dataset}", "normalize_summary.json"),
    log:
        logpath("data_normalize", "{dataset}.log"),
    wildcard_constraints:
        dataset=DATASET_RE,
    priority: 10
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("data"),
    params:
        enabled=lambda wc: ALL_DATASETS[wc.dataset]["normalize"],
        settings=DATA_CFG["normalize"],
    script:
        "../workflow_scripts/data_normalize.py"


rule data_headers:
    input:
        records=res("data", "{dataset}", "normalized.jsonl"),
        ingest_summary=res("data", "{dataset}", "ingest_summary.json"),
        normalize_summary=res("data", "{dataset}", "normalize_summary.json"),
    output:
        records=res("data", "{dataset}", "records.jsonl"),
        tsv=res("data", "{dataset}", "headers.tsv"),
        summary=res("data", "{dataset}", "summary.json"),
    log:
        logpath("data_headers", "{dataset}.log"),
    wildcard_constraints:
        dataset=DATASET_RE,
    priority: 10
    conda:
        "../envs/data.yaml"
    threads: lambda wc: header_threads(config, ALL_DATASETS[wc.dataset])
    resources:
        **stage_resources("data"),
    params:
        enabled=lambda wc: ALL_DATASETS[wc.dataset]["check_headers"],
        settings=DATA_CFG["headers"],
    script:
        "../workflow_scripts/data_headers.py"


rule data_parquet:
    input:
        lambda wc: [
            res("data", name, "records.jsonl")
            for name in DATA_SOURCES[(wc.stage, wc.role)]
        ],
    output:
        train=res("data", "{role}", "{stage}.train.parquet"),
        val=res("data", "{role}", "{stage}.val.parquet"),
    log:
        logpath("data_parquet", "{role}.{stage}.log"),
    wildcard_constraints:
        role="rl|sft",
        stage="skeleton|skin",
    priority: 10
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("data"),
    params:
        val_fraction=DATA_CFG["val_fraction"],
        seed=DATA_CFG["split_seed"],
        skeleton_sft_prompt=DATA_CFG["skeleton_sft_prompt"],
    script:
        "../workflow_scripts/data_parquet.py"


rule data_generate:
    input:
        source=[GEN["source"]["path"]] if GEN["source"]["path"] else [],
        eval_sets=[ent["path"] for ent in GEN["decontaminate"]],
    output:
        **{name: os.path.join(GEN_DIR, f"{name}.jsonl") for name in GEN_OUTPUTS},
        summary=os.path.join(GEN_DIR, "summary.json"),
        steps=report(
            os.path.join(GEN_DIR, "steps.html"),
            caption="../report/data_generate.rst",
            category="Data",
        ),
    log:
        logpath("data_generate", "generate.log"),
    conda:
        "../envs/data.yaml"
    threads: 4
    resources:
        **stage_resources("data"),
    params:
        generate=GEN,
        normalize=DATA_CFG["normalize"],
        headers=DATA_CFG["headers"],
        seed=DATA_CFG["split_seed"],
    script:
        "../workflow_scripts/data_generate.py"


KOD = DATA_CFG["kodcode"]


rule data_kodcode:
    input:
        kodcode_input_files(KOD),
    output:
        train=res("data", "kodcode", "train.parquet"),
        val=res("data", "kodcode", "val.parquet"),
        heldout=res("data", "kodcode", "heldout.parquet"),
        rejects=res("data", "kodcode", "rejects.jsonl"),
        summary=res("data", "kodcode", "summary.json"),
    log:
        logpath("data_kodcode", "kodcode.log"),
    # above two priority-10 jobs together: it heads the DHRCL runs (the longest chain on CPU) and needs two
    # threads, so on 2 cores it goes first instead of waiting for one-thread jobs to leave both cores free
    priority: 25
    conda:
        "../envs/data.yaml"
    threads: 2
    resources:
        **stage_resources("data"),
    params:
        kodcode=KOD,
        sandbox=config["sandbox"],
        val_fraction=DATA_CFG["kodcode"]["val_fraction"],
        heldout_fraction=DATA_CFG["kodcode"]["heldout_fraction"],
        seed=DATA_CFG["split_seed"],
        on_bad_record=config["on_bad_record"],
        max_line_bytes=DATA_CFG["max_line_bytes"],
    script:
        "../workflow_scripts/data_kodcode.py"


DATA_TARGETS = register_targets(
    "data",
    [res("data", name, "summary.json") for name in DATASETS]
    + [
        res("data", role, f"{stage}.{split}.parquet")
        for (stage, role), names in DATA_SOURCES.items()
        if names
        for split in ("train", "val")
    ]
    + [
        res("data", "kodcode", f"{split}.parquet")
        for split in ("train", "val", "heldout")
    ],
)


rule data:
    input:
        DATA_TARGETS,
