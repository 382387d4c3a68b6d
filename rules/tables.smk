# Stage: tables. Paper tables (results/tables/<name>.{md,csv,tex,html}) and report figures, built from the
# evaluation outputs (results/eval/) and the training runs' metrics files only. Target rule: `tables`.
# Library code: codegrpo/tables/, codegrpo/plots.py (docs/evaluation.md). `snakemake --report report.html`
# embeds everything marked report() below.
REPORT_RUNS = report_runs()
DYNAMICS_RUNS = dynamics_runs()


rule tables_build:
    input:
        results=EVAL_TARGETS,
        published=TABLES["published"] or [],
    output:
        **{
            f"{name}_{ext}": res("tables", f"{name}.{ext}")
            for name in TABLE_NAMES
            for ext in TABLE_FORMATS
        },
        **{
            f"{name}_html": report(
                res("tables", f"{name}.html"),
                caption=f"../report/table_{name}.rst",
                category="Paper tables",
            )
            for name in TABLE_NAMES
        },
    log:
        logpath("tables_build", "tables.log"),
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("tables"),
    params:
        benchmarks=EVAL_GEN["benchmarks"],
    script:
        "../workflow_scripts/tables_build.py"


rule report_reexec:
    input:
        results=eval_decompile_files(),
        published=TABLES["published"] or [],
    output:
        report(
            res("report", "reexec_by_level.png"),
            caption="../report/reexec.rst",
            category="Evaluation",
        ),
    log:
        logpath("report_reexec", "reexec.log"),
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("tables"),
    script:
        "../workflow_scripts/report_reexec.py"


rule report_codegen:
    input:
        results=eval_codegen_files(),
    output:
        report(
            res("report", "codegen.png"),
            caption="../report/codegen.rst",
            category="Evaluation",
        ),
    log:
        logpath("report_codegen", "codegen.log"),
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("tables"),
    script:
        "../workflow_scripts/report_codegen.py"


rule report_run:
    input:
        done=res("runs", "{run}", "done.json"),
    output:
        report(
            res("report", "runs", "{run}.png"),
            caption="../report/run.rst",
            category="Training runs",
            labels={"run": "{run}"},
        ),
    log:
        logpath("report_run", "{run}.log"),
    wildcard_constraints:
        run=eval_alternatives(REPORT_RUNS),
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("tables"),
    params:
        metrics=lambda wc: res("runs", wc.run, "metrics.jsonl"),
        curriculum=lambda wc: res("runs", wc.run, "curriculum.json"),
    script:
        "../workflow_scripts/report_run.py"


rule report_dynamics:
    input:
        done=[res("runs", run, "done.json") for run in DYNAMICS_RUNS],
    output:
        chart=report(
            res("report", "degenerate_groups.png"),
            caption="../report/dynamics.rst",
            category="Training runs",
        ),
        md=res("tables", "efficiency.md"),
        csv=res("tables", "efficiency.csv"),
        tex=res("tables", "efficiency.tex"),
        html=report(
            res("tables", "efficiency.html"),
            caption="../report/table_efficiency.rst",
            category="Paper tables",
        ),
    log:
        logpath("report_dynamics", "dynamics.log"),
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **stage_resources("tables"),
    params:
        runs=DYNAMICS_RUNS,
        metrics=[res("runs", run, "metrics.jsonl") for run in DYNAMICS_RUNS],
        efficiency=TABLES["efficiency"],
    script:
        "../workflow_scripts/report_dynamics.py"


TABLE_TARGETS = register_targets(
    "tables",
    [
        res("tables", f"{name}.{ext}")
        for name in TABLE_NAMES
        for ext in TABLE_FORMATS + ("html",)
    ]
    + [res("report", "reexec_by_level.png"), res("report", "codegen.png")]
    + [res("report", "runs", f"{run}.png") for run in REPORT_RUNS]
    + (
        [res("report", "degenerate_groups.png"), res("tables", "efficiency.md")]
        if DYNAMICS_RUNS
        else []
    ),
)


rule tables:
    input:
        TABLE_TARGETS,
