# Stage: evaluate. SK2Decompile re-executability on HumanEval-Decompile and MBPP-Decompile (gold / decompiler
# rows and the configured two-phase model systems), identifier quality with the configured embedding model
# (BringUpBench shipped outputs, our outputs), and DHRCL pass@k on the held-out KodCode slice, HumanEval and the
# paper's suites (one model-loading job per DHRCL run for all its benchmarks). One JSON per system and benchmark:
# results/eval/<system>/<benchmark>.json.
# Target rule: `evaluate`. Library code: codegrpo/eval/ (docs/evaluation.md).
from codegrpo import contracts as _contracts


rule eval_decompile_baseline:
    input:
        unpack(dec_data_input),
    output:
        res("eval", "{baseline}", "{benchmark}.json"),
    log:
        logpath("eval_decompile_baseline", "{baseline}.{benchmark}.log"),
    wildcard_constraints:
        baseline=eval_alternatives(DEC_BASELINES),
        benchmark=eval_alternatives(list(DEC_BENCHMARKS)),
    conda:
        "../envs/data.yaml"
    threads: EVAL["workers"]
    resources:
        **eval_cpu_resources(),
    params:
        levels=EVAL_DEC["levels"],
        tasks_per_level=EVAL_DEC["baseline_tasks_per_level"],
        data=lambda wc: DEC_BENCHMARKS[wc.benchmark]["data"],
        protocol=lambda wc: DEC_BENCHMARKS[wc.benchmark]["protocol"],
        cache=EVAL_CACHE,
        timeout_s=EVAL["timeout_s"],
        sandbox=EVAL_SANDBOX,
    script:
        "../workflow_scripts/eval_decompile_baseline.py"


rule eval_decompile_system:
    input:
        unpack(
            lambda wc: {
                **dec_data_input(wc),
                "skeleton": run_hf(EVAL_SYSTEMS[wc.system]["skeleton"]),
                **(
                    {"skin": run_hf(EVAL_SYSTEMS[wc.system]["skin"])}
                    if EVAL_SYSTEMS[wc.system].get("skin")
                    else {}
                ),
            }
        ),
    output:
        res("eval", "{system}", "{benchmark}.json"),
    log:
        logpath("eval_decompile_system", "{system}.{benchmark}.log"),
        embedding=logpath(
            "eval_decompile_system", "{system}.{benchmark}.embedding_server.log"
        ),
    wildcard_constraints:
        system=eval_alternatives(list(EVAL_SYSTEMS)),
        benchmark=eval_alternatives(list(DEC_BENCHMARKS)),
    conda:
        "../envs/train.yaml"
    threads: EVAL["workers"]
    resources:
        **stage_resources("evaluate"),
    params:
        system=lambda wc: EVAL_SYSTEMS[wc.system],
        data=lambda wc: DEC_BENCHMARKS[wc.benchmark]["data"],
        protocol=lambda wc: DEC_BENCHMARKS[wc.benchmark]["protocol"],
        input_field=lambda wc: DEC_BENCHMARKS[wc.benchmark]["input_field"],
        cache=EVAL_CACHE,
        levels=EVAL_DEC["levels"],
        tasks_per_level=EVAL_DEC["tasks_per_level"],
        max_new_tokens=EVAL_DEC["max_new_tokens"],
        style=EVAL_DEC["clang_format_style"],
        identifier=EVAL_DEC["identifier"],
        embedding=EVAL_EMBEDDING,
        backend=EVAL["backend"],
        use_chat_template=_eval_uses_template(config),
        batch_size=EVAL["batch_size"],
        max_prompt_tokens=EVAL["max_prompt_tokens"],
        vllm=EVAL["vllm"],
        timeout_s=EVAL["timeout_s"],
        sandbox=EVAL_SANDBOX,
        seed=config["seed"],
    script:
        "../workflow_scripts/eval_decompile_system.py"


rule eval_bringupbench:
    input:
        data=EVAL_DEC["bringupbench"]["data"],
    output:
        res("eval", "bringupbench", "identifier.json"),
    log:
        logpath("eval_bringupbench", "identifier.log"),
        embedding=logpath("eval_bringupbench", "embedding_server.log"),
    conda:
        "../envs/train.yaml" if EVAL_EMBEDDING_ON_GPU else "../envs/data.yaml"
    threads: 1
    resources:
        **identifier_resources(),
    params:
        limit=EVAL_DEC["bringupbench"]["limit"],
        embedding=EVAL_EMBEDDING,
    script:
        "../workflow_scripts/eval_bringupbench.py"


rule eval_codegen_reference:
    input:
        unpack(codegen_data),
    output:
        res("eval", "reference", "{benchmark}.json"),
    log:
        logpath("eval_codegen_reference", "{benchmark}.log"),
    wildcard_constraints:
        benchmark=eval_alternatives(OTHER_BENCHMARKS),
    conda:
        "../envs/data.yaml"
    threads: EVAL["workers"]
    resources:
        **eval_cpu_resources(),
    params:
        limit=EVAL_GEN["limit"],
        timeout_s=EVAL["timeout_s"],
        sandbox=EVAL_SANDBOX,
        suites=EVAL_GEN,
    script:
        "../workflow_scripts/eval_codegen_reference.py"


# BigCodeBench's canonical solutions, run with its libraries (envs/bigcodebench.yaml).
use rule eval_codegen_reference as eval_codegen_reference_bcb with:
    log:
        logpath("eval_codegen_reference_bcb", "{benchmark}.log"),
    wildcard_constraints:
        benchmark=eval_alternatives(BCB_BENCHMARKS),
    conda:
        "../envs/bigcodebench.yaml"


# A DHRCL run's model on every code-generation benchmark in one job (training environment, GPU): one model load,
# one vLLM engine, which samples all benchmarks and is shut down before the sandboxes score. BigCodeBench is only
# sampled here (temporary <benchmark>.samples.json) ...
if EVAL_GEN["benchmarks"]:

    rule eval_codegen:
        input:
            unpack(
                lambda wc: {
                    "model": run_hf(wc.run),
                    **codegen_run_data(EVAL_GEN["benchmarks"]),
                }
            ),
        output:
            **codegen_result_files("{run}", OTHER_BENCHMARKS),
            **{k: temp(f) for k, f in codegen_samples_files("{run}").items()},
        log:
            logpath("eval_codegen", "{run}.log"),
        wildcard_constraints:
            run=eval_alternatives(EVAL_GEN_RUNS),
        conda:
            "../envs/train.yaml"
        threads: EVAL["workers"]
        resources:
            **stage_resources("evaluate"),
        params:
            scored=OTHER_BENCHMARKS,
            sampled=BCB_BENCHMARKS,
            limit=EVAL_GEN["limit"],
            n_samples=EVAL_GEN["n_samples"],
            ks=EVAL_GEN["ks"],
            temperature=EVAL_GEN["temperature"],
            protocol=EVAL_GEN["protocol"],
            top_p=EVAL_GEN["top_p"],
            max_new_tokens=EVAL_GEN["max_new_tokens"],
            backend=EVAL["backend"],
            use_chat_template=EVAL["use_chat_template"],
            # the DHRCL runs' chat-template switches (dhrcl.enable_thinking), as in their training
            chat_template_kwargs=_contracts.chat_template_kwargs(config),
            batch_size=EVAL["batch_size"],
            max_prompt_tokens=EVAL["max_prompt_tokens"],
            vllm=EVAL["vllm"],
            timeout_s=EVAL["timeout_s"],
            sandbox=EVAL_SANDBOX,
            seed=config["seed"],
            suites=EVAL_GEN,
        script:
            "../workflow_scripts/eval_codegen.py"


# ... and the run's BigCodeBench samples are scored with the benchmark's libraries (envs/bigcodebench.yaml), without
# a GPU, one job per run.
if BCB_BENCHMARKS:

    rule eval_codegen_bcb:
        input:
            unpack(
                lambda wc: {
                    "model": run_hf(wc.run),
                    **codegen_samples_files(wc.run),
                    **codegen_run_data(BCB_BENCHMARKS),
                }
            ),
        output:
            **codegen_result_files("{run}", BCB_BENCHMARKS),
        log:
            logpath("eval_codegen_bcb", "{run}.log"),
        wildcard_constraints:
            run=eval_alternatives(EVAL_GEN_RUNS),
        conda:
            "../envs/bigcodebench.yaml"
        threads: EVAL["workers"]
        resources:
            **eval_cpu_resources(),
        params:
            benchmarks=BCB_BENCHMARKS,
            limit=EVAL_GEN["limit"],
            n_samples=EVAL_GEN["n_samples"],
            ks=EVAL_GEN["ks"],
            temperature=EVAL_GEN["temperature"],
            protocol=EVAL_GEN["protocol"],
            top_p=EVAL_GEN["top_p"],
            max_new_tokens=EVAL_GEN["max_new_tokens"],
            timeout_s=EVAL["timeout_s"],
            sandbox=EVAL_SANDBOX,
            seed=config["seed"],
            suites=EVAL_GEN,
        script:
            "../workflow_scripts/eval_codegen_bcb.py"


EVAL_TARGETS = register_targets("evaluate", eval_targets())


rule evaluate:
    input:
        EVAL_TARGETS,
