# Stage: dhrcl. GRPO on KodCode with DHRCL's dense hierarchical rewards, trend-based curriculum and token credit
# redistribution, plus its baselines and ablations (docs/dhrcl.md). Each configured variant is trained once per
# seed of dhrcl.seeds, as run results/runs/dhrcl-<variant>-seed<seed>/{settings.json, config.json,
# curriculum.json, checkpoints/, train.log, metrics.jsonl, hf/, done.json}; done.json is written last. A killed
# run resumes from its newest checkpoint (and the curriculum state saved next to it) when rerun.
# Targets: `dhrcl` (every variant and seed), `dhrcl_seed<seed>` (every variant, one seed).
DHRCL_CFG = config["dhrcl"]
DHRCL_SEEDS = DHRCL_CFG["seeds"]
# the model the runs start from: model.base (the tiny model folder on CPU) or a hub id / folder
DHRCL_FROM_BASE = DHRCL_CFG["init"] == "base"
DHRCL_INIT = base_model_path() if DHRCL_FROM_BASE else DHRCL_CFG["init"]
DHRCL_TRAINING_CFG = training_cfg("dhrcl", "sandbox")


rule dhrcl_train:
    input:
        train=res("data", "kodcode", "train.parquet"),
        val=res("data", "kodcode", "val.parquet"),
        init=base_model_input() if DHRCL_FROM_BASE else [],
    output:
        done=res("runs", "dhrcl-{variant}-seed{seed}", "done.json"),
        hf=directory(res("runs", "dhrcl-{variant}-seed{seed}", "hf")),
    log:
        logpath("dhrcl_train", "{variant}.seed{seed}.log"),
    wildcard_constraints:
        variant="[A-Za-z0-9_]+",
        seed="[0-9]+",
    conda:
        "../envs/train.yaml"
    threads: training_threads()
    resources:
        **stage_resources("dhrcl"),
    params:
        cfg=DHRCL_TRAINING_CFG,
        seed=lambda w: int(w.seed),
        init_model=lambda w, input: input.init[0] if len(input.init) else DHRCL_INIT,
        run_dir=lambda w: res("runs", dhrcl_run(w.variant, w.seed)),
    script:
        "../workflow_scripts/dhrcl_train.py"


rule dhrcl:
    input:
        register_targets(
            "dhrcl",
            [res("runs", run, "done.json") for run in dhrcl_runs()],
        ),


# one target per seed: every variant at that seed
for _seed in DHRCL_SEEDS:

    rule:
        name:
            f"dhrcl_seed{_seed}"
        input:
            [res("runs", run, "done.json") for run in dhrcl_runs([_seed])],
