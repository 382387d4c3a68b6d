# Stage: skin_rl. GRPO (verl main_ppo through codegrpo.verl.trainer) of the identifier-naming (skin) model from sft_skin, identifier reward (embedding server inside the job when skin_rl.embedding_server).
# Output: results/runs/skin_rl/{hf/, done.json} (+ checkpoints/, metrics.jsonl, train.log); a killed run resumes
# from its newest checkpoint when rerun.


rule skin_rl_train:
    input:
        unpack(rl_inputs("skin_rl", "skin", "sft_skin")),
    output:
        done=run_done("skin_rl"),
        hf=directory(run_hf("skin_rl")),
    log:
        logpath("skin_rl_train", "skin_rl.log"),
    conda:
        "../envs/train.yaml"
    threads: 2
    resources:
        **stage_resources("skin_rl"),
    params:
        cfg=training_cfg("skin_rl", "embedding", "compile_reward"),
        train=res("data", "rl", "skin.train.parquet"),
        val=res("data", "rl", "skin.val.parquet"),
        init_model=run_hf("sft_skin"),
        run_dir=lambda w, output: os.path.dirname(output.done),
    script:
        "../workflow_scripts/skin_rl_train.py"


rule skin_rl:
    input:
        register_targets("skin_rl", [run_done("skin_rl")]),
