# Stage: dhrcl. GRPO on KodCode with DHRCL's dense hierarchical rewards, trend-based curriculum and token credit
# redistribution, plus its baselines and ablations (docs/dhrcl.md). Each configured variant is trained once per
# seed of dhrcl.seeds (and each model of dhrcl.models: dhrcl-<model>-<variant>-seed<seed>), as run
# results/runs/dhrcl-<variant>-seed<seed>/{settings.json, config.json,
# curriculum.json, checkpoints/, train.log, metrics.jsonl, hf/, done.json}; done.json is written last. A killed
# run resumes from its newest checkpoint (and the curriculum state saved next to it) when rerun.
# Targets: `dhrcl` (every variant and seed), `dhrcl_seed<seed>` (every variant, one seed).

DHRCL_CFG = config["dhrcl"]
DHRCL_SEEDS = DHRCL_CFG["seeds"]
# every run: DHRCL_PLAN (rules/common.smk)
DHRCL_TRAINING_CFG = training_cfg("dhrcl", "sandbox")


rule dhrcl_train:
    input:
        train=res("data", "kodcode", "train.parquet"),
        val=res("data", "kodcode", "val.parquet"),
        init=lambda w: dhrcl_init_input(w.run),
        rm=lambda w: dhrcl_reward_model_input(w.run),
    output:
        done=res("runs", "{run}", "done.json"),
        hf=directory(res("runs", "{run}", "hf")),
    log:
        logpath("dhrcl_train", "{run}.log"),
    wildcard_constraints:
        run=eval_alternatives(DHRCL_PLAN),
    priority: 10
    conda:
        "../envs/train.yaml"
    threads: training_threads()
    resources:
        **stage_resources("dhrcl"),
    params:
        cfg=DHRCL_TRAINING_CFG,
        variant=lambda w: DHRCL_PLAN[w.run]["variant"],
        seed=lambda w: DHRCL_PLAN[w.run]["seed"],
        model=lambda w: DHRCL_PLAN[w.run]["model"],
        init_model=init_model(lambda w: dhrcl_init_path(w.run)),
        run_dir=lambda w: res("runs", w.run),
    script:
        "../workflow_scripts/dhrcl_train.py"


# the offline tiny reward model of the reward-model variants (dhrcl.reward_model.model: tiny; docs/dhrcl.md)
rule tiny_reward_model:
    input:
        res("data", "kodcode", "train.parquet"),
    output:
        directory(res("models", "tiny_rm")),
    log:
        logpath("tiny_reward_model", "tiny_reward_model.log"),
    priority: 10
    conda:
        "../envs/train.yaml"
    threads: 1
    resources:
        **stage_resources("dhrcl"),
    params:
        tiny=config["model"]["tiny"],
        seed=config["seed"],
    script:
        "../workflow_scripts/tiny_reward_model.py"


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
