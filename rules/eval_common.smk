# Config values and helper functions of the evaluate and tables stages (no rules here).
# Included by rules/evaluate.smk (which the Snakefile includes after rules/dhrcl.smk, before rules/tables.smk).
import re

from codegrpo.eval.decompile import check_eval_set as _check_eval_set
from codegrpo.eval.decompile import metric_embedding_config as _metric_embedding_config
from codegrpo.verl.prompts import eval_uses_template as _eval_uses_template

EVAL = config["evaluate"]
EVAL_DEC = EVAL["decompile"]
EVAL_GEN = EVAL["codegen"]
EVAL_SYSTEMS = {s["name"]: s for s in EVAL_DEC["systems"]}
# DHRCL runs: the configured list, or every run of the dhrcl section at every seed (dhrcl_runs, rules/dhrcl.smk).
EVAL_GEN_RUNS = EVAL_GEN["runs"] if EVAL_GEN["runs"] is not None else dhrcl_runs()
# Sandbox limits of evaluation jobs: the project's sandbox section with the evaluate overrides.
EVAL_SANDBOX = {**config.get("sandbox", {}), **EVAL["sandbox"]}
# SK2Decompile benchmarks: result name -> evaluation set (path or URL), re-executability protocol, rows that
# need no model. One result per system and benchmark: results/eval/<system>/<benchmark>.json.
DEC_BENCHMARKS = {
    "humaneval_decompile": {
        k: EVAL_DEC[k] for k in ("data", "protocol", "input_field", "baselines")
    },
}
if EVAL_DEC["mbpp"]["enabled"]:
    DEC_BENCHMARKS["mbpp_decompile"] = {
        k: EVAL_DEC["mbpp"][k] for k in ("data", "protocol", "input_field", "baselines")
    }
# Plan time: a local evaluation file without the model input field its protocol reads, or a configured level
# without tasks, stops the plan with the file, field and config section named (a URL is checked by its job,
# before any model loads).
for _bench, _spec in DEC_BENCHMARKS.items():
    _check_eval_set(
        _spec["data"],
        _spec["protocol"],
        _spec["input_field"],
        EVAL_DEC["levels"],
        what="evaluate.decompile"
        + (".mbpp" if _bench == "mbpp_decompile" else "")
        + f" ({_bench})",
    )
DEC_BASELINES = sorted(
    {b for bench in DEC_BENCHMARKS.values() for b in bench["baselines"]}
)
# evaluation sets given as URLs: the run's URL cache (<HF_HOME>/codegrpo-urls, $CODEGRPO_URL_CACHE), filled by
# `snakemake prefetch` (offline jobs read it there) or, online, by the first job that needs them
EVAL_CACHE = None
# Embedding of the identifier metric: the configured `embedding` section (the reward's model) with the
# evaluate.decompile.embedding overrides. A served model on a GPU node (vLLM's server) needs the GPU and the
# training environment; otherwise scoring needs neither.
EVAL_EMBEDDING = _metric_embedding_config(config)
EVAL_EMBEDDING_ON_GPU = bool(
    EVAL_EMBEDDING.get("serve")
    and EVAL_EMBEDDING.get("server_command")
    and config["device"] != "cpu"
)


def eval_alternatives(names):
    """A wildcard regex matching exactly the given names (nothing when the list is empty)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


def dec_data_input(wildcards):
    """A decompilation benchmark's evaluation set as job input ({} for a URL: the job downloads it)."""
    src = DEC_BENCHMARKS[wildcards.benchmark]["data"]
    return {} if src.startswith(("http://", "https://")) else {"data": src}


def eval_cpu_resources():
    """The evaluate stage's resources without a GPU (rows that only compile and run programs)."""
    return {
        k: v
        for k, v in stage_resources("evaluate").items()
        if k not in ("gpu", "gpu_model")
    }


def identifier_resources():
    """Resources of a job that scores identifiers: the GPU only when it serves the embedding model there."""
    return (
        stage_resources("evaluate") if EVAL_EMBEDDING_ON_GPU else eval_cpu_resources()
    )


def eval_targets():
    files = [
        res("eval", name, f"{bench}.json")
        for bench, spec in DEC_BENCHMARKS.items()
        for name in spec["baselines"] + list(EVAL_SYSTEMS)
    ]
    if EVAL_DEC["bringupbench"]["enabled"]:
        files.append(res("eval", "bringupbench", "identifier.json"))
    files += [
        res("eval", run, f"{b}.json")
        for run in EVAL_GEN_RUNS
        for b in EVAL_GEN["benchmarks"]
    ]
    if EVAL_GEN["reference"]:
        files += [res("eval", "reference", f"{b}.json") for b in reference_benchmarks()]
    return files


# The paper's BigCodeBench tasks import many libraries: they are scored in envs/bigcodebench.yaml.
BCB_BENCHMARKS = [b for b in EVAL_GEN["benchmarks"] if b.startswith("bigcodebench_")]
OTHER_BENCHMARKS = [b for b in EVAL_GEN["benchmarks"] if b not in BCB_BENCHMARKS]


def reference_benchmarks():
    """Benchmarks with a reference-solution sanity row (LiveCodeBench only with configured solutions)."""
    return [
        b
        for b in EVAL_GEN["benchmarks"]
        if b != "livecodebench" or EVAL_GEN["livecodebench"]["solutions"]
    ]


def benchmark_data_files(benchmark):
    """Local data files of a benchmark (rerun when they change); URLs and hub ids are fetched by the job."""
    if benchmark == "kodcode_heldout":
        return {"data": res("data", "kodcode", "heldout.parquet")}
    section = EVAL_GEN.get(benchmark) or {}
    out = {}
    for key in ("source", "solutions"):
        path = section.get(key)
        if path and os.path.exists(path):
            out[f"suite_{key}"] = path
    return out


def codegen_data(wildcards):
    """Input of a job of one benchmark (wildcard {benchmark}): its local data files."""
    return benchmark_data_files(wildcards.benchmark)


def codegen_run_data(benchmarks):
    """Input of a job of several benchmarks: their local data files, as <benchmark>_<key> (the held-out KodCode
    parquet: kodcode_heldout_data)."""
    return {
        f"{b}_{key}": path
        for b in benchmarks
        for key, path in benchmark_data_files(b).items()
    }


def codegen_result_files(run, benchmarks):
    """A run's result JSON per benchmark, keyed by benchmark (output names of eval_codegen / eval_codegen_bcb)."""
    return {b: res("eval", run, f"{b}.json") for b in benchmarks}


def codegen_samples_files(run):
    """A run's BigCodeBench samples JSON per benchmark, keyed <benchmark>_samples: written by eval_codegen, scored
    by eval_codegen_bcb."""
    return {
        f"{b}_samples": res("eval", run, f"{b}.samples.json") for b in BCB_BENCHMARKS
    }


TABLES = config["tables"]
TABLE_NAMES = ("reexec", "ablation", "dhrcl", "identifier")
TABLE_FORMATS = ("md", "csv", "tex")


def report_runs():
    """Training runs plotted in the report: the configured list, or the runs behind what is evaluated."""
    if TABLES["report_runs"] is not None:
        return list(TABLES["report_runs"])
    runs = []
    for system in EVAL_SYSTEMS.values():
        for run in (system["skeleton"], system.get("skin")):
            if run and run not in runs:
                runs.append(run)
    return runs + [r for r in EVAL_GEN_RUNS if r not in runs]


def dynamics_runs():
    """The DHRCL runs among the report's runs: the degenerate-group chart and the efficiency table."""
    planned = set(dhrcl_runs())
    return [r for r in report_runs() if r in planned]


def eval_decompile_files():
    return [
        f
        for f in EVAL_TARGETS
        if os.path.basename(f)[: -len(".json")] in DEC_BENCHMARKS
    ]


def eval_codegen_files():
    return [
        f
        for f in EVAL_TARGETS
        if os.path.basename(f)[: -len(".json")] in EVAL_GEN["benchmarks"]
    ]
