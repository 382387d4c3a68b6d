# Stage: dhrcl. GRPO on KodCode with DHRCL's dense hierarchical rewards, trend-based curriculum and token credit
# redistribution, plus its baselines and ablations (docs/dhrcl.md). Each configured variant is the run
# results/runs/dhrcl-<variant>/{settings.json, config.json, curriculum.json, checkpoints/, train.log, metrics.jsonl,
# hf/, done.json}; done.json is written last. A killed run resumes from its newest checkpoint (and the
# curriculum state saved next to it) when rerun.
DHRCL_CFG = config["dhrcl"]
# the model the runs start from: model.base (the tiny model folder on CPU) or a hub id / folder
DHRCL_FROM_BASE = DHRCL_CFG["init"] == "base"
DHRCL_INIT = base_model_path() if DHRCL_FROM_BASE else DHRCL_CFG["init"]


rule dhrcl_train:
    input:
        train=res("data", "kodcode", "train.parquet"),
        val=res("data", "kodcode", "val.parquet"),
        init=base_model_input() if DHRCL_FROM_BASE else [],
    output:
        done=res("runs", "dhrcl-{variant}", "done.json"),
        hf=directory(res("runs", "dhrcl-{variant}", "hf")),
    log:
        logpath("dhrcl_train", "{variant}.log"),
    wildcard_constraints:
        variant="[A-Za-z0-9_]+",
    conda:
        "../envs/train.yaml"
    threads: 2
    resources:
        **stage_resources("dhrcl"),
    params:
        cfg=training_cfg("dhrcl", "sandbox"),
        init_model=lambda w, input: input.init[0] if len(input.init) else DHRCL_INIT,
        run_dir=lambda w: res("runs", f"dhrcl-{w.variant}"),
    script:
        "../workflow_scripts/dhrcl_train.py"


rule dhrcl:
    input:
        register_targets(
            "dhrcl",
            [res("runs", f"dhrcl-{v}", "done.json") for v in DHRCL_CFG["runs"]],
        ),
