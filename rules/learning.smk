# Stage: learning_check (not part of `all`). Mechanism checks on toy data (docs/learning.md): GRPO and each
# DHRCL token weighting must raise a toy reward and a sign-flipped control must lower it; a DHRCL run must
# advance its curriculum by the trend rule. Same verl path as the real stages. Outputs: results/learning/.
# Library code: codegrpo/learning/. Target rule: `learning_check`.
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


# Target learning_real (not part of `all`): does the packaged SmolLM2-135M-Instruct learn through the DHRCL path?
# (docs/learning.md, codegrpo/learning_real.py). Outputs: results/learning/real/.
LR = config["learning_real"]
# the variants, then the training-noise runs <variant>.train<seed>
LR_RUNS = learning_real_runs(LR)
LR_NOISE = LR_RUNS[len(LR["variants"]) :]
LR_EVALS = ["base"] + LR_RUNS


rule learning_real_data:
    input:
        kodcode=config["data"]["kodcode"]["paths"],
    output:
        **{
            s: res("learning", "real", "data", f"{s}.parquet")
            for s in ("train", "val", "heldout")
        },
        slice=res("learning", "real", "data", "slice.json"),
    log:
        logpath("learning", "real_data.log"),
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("learning_check"),
    params:
        cfg=training_cfg("data", "sandbox", "learning_real"),
        out_dir=lambda w, output: os.path.dirname(output.slice),
    script:
        "../workflow_scripts/learning_real_data.py"


rule learning_real_train:
    input:
        train=res("learning", "real", "data", "train.parquet"),
        val=res("learning", "real", "data", "val.parquet"),
        init=model_ref_input(LR["model"]),
    output:
        done=res("learning", "real", "runs", "{run}", "done.json"),
        hf=directory(res("learning", "real", "runs", "{run}", "hf")),
    log:
        logpath("learning", "real_train_{run}.log"),
    wildcard_constraints:
        run=eval_alternatives(LR_RUNS),
    # the trainings (about 1000 s each on CPU) before the evaluations (about 130 s): no training left alone at the end
    priority: 1
    conda:
        "../envs/train.yaml"
    threads: training_threads()
    resources:
        **stage_resources("learning_check"),
    params:
        cfg=training_cfg("dhrcl", "sandbox", "learning_real"),
        init_model=lambda w, input: input.init[0] if input.init else LR["model"],
        data_dir=lambda w, input: os.path.dirname(input.train),
        run_dir=lambda w, output: os.path.dirname(output.done),
    script:
        "../workflow_scripts/learning_real_train.py"


rule learning_real_eval:
    input:
        heldout=res("learning", "real", "data", "heldout.parquet"),
        model=lambda w: (
            model_ref_input(LR["model"])
            if w.model == "base"
            else [res("learning", "real", "runs", w.model, "hf")]
        ),
    output:
        res("learning", "real", "eval", "{model}.seed{seed}.json"),
    log:
        logpath("learning", "real_eval_{model}.seed{seed}.log"),
    wildcard_constraints:
        model=eval_alternatives(LR_EVALS),
        seed=r"\d+",
    conda:
        "../envs/train.yaml"
    threads: training_threads()
    resources:
        **stage_resources("learning_check"),
    params:
        cfg=training_cfg("sandbox", "learning_real"),
        model_dir=lambda w, input: input.model[0] if input.model else LR["model"],
    script:
        "../workflow_scripts/learning_real_eval.py"


rule learning_real_report:
    input:
        base=expand(
            res("learning", "real", "eval", "base.seed{seed}.json"),
            seed=[LR["eval"]["seed"]] + list(LR["eval"]["noise_seeds"]),
        ),
        after=expand(
            res("learning", "real", "eval", "{model}.seed{seed}.json"),
            model=LR["variants"],
            seed=LR["eval"]["seed"],
        ),
        done=expand(
            res("learning", "real", "runs", "{variant}", "done.json"),
            variant=LR["variants"],
        ),
        noise_after=expand(
            res("learning", "real", "eval", "{run}.seed{seed}.json"),
            run=LR_NOISE,
            seed=LR["eval"]["seed"],
        ),
        noise_done=expand(
            res("learning", "real", "runs", "{run}", "done.json"), run=LR_NOISE
        ),
        slice=res("learning", "real", "data", "slice.json"),
    output:
        md=res("learning", "real", "report.md"),
        summary=res("learning", "real", "summary.json"),
        curves=report(
            res("learning", "real", "curves.png"),
            caption="../report/learning_real.rst",
            category="Learning: a real model (SmolLM2-135M-Instruct)",
        ),
    log:
        logpath("learning", "real_report.log"),
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("tables"),
    params:
        variants=LR["variants"],
        noise_runs=LR_NOISE,
        train_seed=config["seed"],
        settings=LR,
    script:
        "../workflow_scripts/learning_real_report.py"


rule learning_real:
    input:
        res("learning", "real", "report.md"),
