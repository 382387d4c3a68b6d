# Stage: skeleton_rl. GRPO (verl main_ppo through codegrpo.verl.trainer) of the structure-recovery (skeleton) model from sft_skeleton, structure reward.
# Output: results/runs/skeleton_rl/{hf/, done.json} (+ checkpoints/, metrics.jsonl, train.log); a killed run resumes
# from its newest checkpoint when rerun.


rule skeleton_rl_train:
    input:
        unpack(rl_inputs("skeleton_rl", "skeleton", "sft_skeleton")),
    output:
        done=run_done("skeleton_rl"),
        hf=directory(run_hf("skeleton_rl")),
    log:
        logpath("skeleton_rl_train", "skeleton_rl.log"),
    conda:
        "../envs/train.yaml"
    threads: 2
    resources:
        **stage_resources("skeleton_rl"),
    params:
        cfg=training_cfg("skeleton_rl", "compile_reward"),
        train=res("data", "rl", "skeleton.train.parquet"),
        val=res("data", "rl", "skeleton.val.parquet"),
        init_model=run_hf("sft_skeleton"),
        run_dir=lambda w, output: os.path.dirname(output.done),
    script:
        "../workflow_scripts/skeleton_rl_train.py"


rule skeleton_rl:
    input:
        register_targets("skeleton_rl", [run_done("skeleton_rl")]),
