# Stages: skeleton_rl and skin_rl, one rule body. GRPO (verl main_ppo through
# codegrpo.verl.driver, codegrpo.verl.stages.run_rl_stage) of the skeleton model from sft_skeleton with the
# structure reward (skeleton_rl.structure_reward: exe_type or sim_exe), and of the skin model from sft_skin with
# the identifier reward (embedding server inside the job when embedding.serve).
# Output: results/runs/<stage>/{hf/, done.json} (+ settings.json, checkpoints/, metrics.jsonl, train.log). A killed
# run resumes from its newest checkpoint when rerun with the same settings; a finished run, or one whose settings
# changed, is moved aside to results/runs/<stage>.prev-<timestamp>/ and trained again from the start.

# One rule body, used by name for each stage (rule names skeleton_rl_train, skin_rl_train; their resources
# differ per stage, which a wildcard rule cannot express as resource keys). RL_STAGES and rl_params live in
# rules/common.smk.


rule skeleton_rl_train:
    input:
        unpack(rl_inputs("skeleton_rl", *RL_STAGES["skeleton_rl"][:2])),
    output:
        done=run_done("skeleton_rl"),
        hf=directory(run_hf("skeleton_rl")),
    log:
        logpath("rl_train", "skeleton_rl.log"),
    priority: 10
    conda:
        "../envs/train.yaml"
    threads: training_threads()
    resources:
        **stage_resources("skeleton_rl"),
    params:
        **rl_params("skeleton_rl"),
    script:
        "../workflow_scripts/rl_train.py"


use rule skeleton_rl_train as skin_rl_train with:
    input:
        unpack(rl_inputs("skin_rl", *RL_STAGES["skin_rl"][:2])),
    output:
        done=run_done("skin_rl"),
        hf=directory(run_hf("skin_rl")),
    log:
        logpath("rl_train", "skin_rl.log"),
    resources:
        **stage_resources("skin_rl"),
    params:
        **rl_params("skin_rl"),


rule skeleton_rl:
    input:
        register_targets("skeleton_rl", [run_done("skeleton_rl")]),


rule skin_rl:
    input:
        register_targets("skin_rl", [run_done("skin_rl")]),
