# Stage: learning_check (not part of `all`). Mechanism checks on toy data (docs/learning.md): GRPO and each
# DHRCL token weighting must raise a toy reward and a sign-flipped control must lower it; a DHRCL run must
# advance its curriculum by the trend rule. Same verl path as the real stages. Outputs: results/learning/.
# Library code: codegrpo/learning.py. Target rule: `learning_check`.
LC = config["learning_check"]


rule learning_toy_data:
    output:
        train=res("learning", "toy", "data", "toy.train.parquet"),
        val=res("learning", "toy", "data", "toy.val.parquet"),
        tiny=directory(res("learning", "toy", "tiny")),
    log:
        logpath("learning", "toy_data.log"),
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("learning_check"),
    params:
        toy=LC["toy"],
        seed=config["seed"],
        out_dir=lambda w, output: os.path.dirname(output.train),
    script:
        "../workflow_scripts/learning_toy_data.py"


rule learning_direction:
    input:
        train=res("learning", "toy", "data", "toy.train.parquet"),
        val=res("learning", "toy", "data", "toy.val.parquet"),
        tiny=res("learning", "toy", "tiny"),
    output:
        verdict=res("learning", "toy", "{check}", "verdict.json"),
    log:
        logpath("learning", "direction_{check}.log"),
    wildcard_constraints:
        check="[a-z_]+",
    conda:
        "../envs/train.yaml"
    threads: training_threads()
    resources:
        **stage_resources("learning_check"),
    params:
        cfg=training_cfg("skeleton_rl", "dhrcl", "learning_check", "compile_reward"),
        run_dir=lambda w: res("learning", "toy", w.check),
    script:
        "../workflow_scripts/learning_direction.py"


rule learning_curriculum:
    input:
        kodcode=config["data"]["kodcode"]["paths"],
    output:
        verdict=res("learning", "curriculum", "verdict.json"),
    log:
        logpath("learning", "curriculum.log"),
    conda:
        "../envs/train.yaml"
    threads: training_threads()
    resources:
        **stage_resources("learning_check"),
    params:
        cfg=training_cfg("sft", "dhrcl", "sandbox", "learning_check", "data"),
        out_dir=lambda w, output: os.path.dirname(output.verdict),
    script:
        "../workflow_scripts/learning_curriculum.py"


rule learning_report:
    input:
        directions=expand(
            res("learning", "toy", "{check}", "verdict.json"), check=LC["checks"]
        ),
        curriculum=res("learning", "curriculum", "verdict.json"),
    output:
        md=res("learning", "report.md"),
        rewards=report(
            res("learning", "toy_rewards.png"),
            caption="../report/learning_rewards.rst",
            category="Learning check (toy data)",
        ),
        timeline=report(
            res("learning", "curriculum_timeline.png"),
            caption="../report/learning_curriculum.rst",
            category="Learning check (toy data)",
        ),
    log:
        logpath("learning", "report.log"),
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("tables"),
    params:
        checks=LC["checks"],
    script:
        "../workflow_scripts/learning_report.py"


rule learning_check:
    input:
        res("learning", "report.md"),
