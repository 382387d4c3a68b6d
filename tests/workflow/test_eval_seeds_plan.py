"""Snakemake plans of the evaluation and DHRCL seeds: one seed or all seeds, one code-generation job per run, and
MBPP-Decompile beside HumanEval-Decompile (dry runs only)."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import REPO_ROOT as REPO
from tests.conftest import run_snakemake


def _plan(snakemake_bin, tmp_path, *targets, configfile="config.yaml", overlay=None, benchmarks=None):
    cfg = yaml.safe_load((REPO / configfile).read_text())
    for key, val in (overlay or {}).items():
        cfg[key] = {**cfg.get(key, {}), **val} if isinstance(val, dict) else val
    if benchmarks is not None:
        cfg["evaluate"]["codegen"]["benchmarks"] = benchmarks
    cfg.update(results_dir=str(tmp_path / "results"), logs_dir=str(tmp_path / "logs"))
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = run_snakemake("-n", *targets, "--configfile", str(path), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def _outputs(stdout: str, rule: str, field: str = "output") -> list[str]:
    """The outputs (or another field; comma-separated, as printed) of the planned jobs of ``rule``."""
    return re.findall(rf"^(?:local)?rule {rule}:\n(?:    (?!{field}:).*\n)*?    {field}: (.*)$", stdout, re.M)


def _files(line: str) -> set[str]:
    return set(line.split(", "))


def test_dhrcl_plans_one_seed_or_all(snakemake_bin, tmp_path):
    two = {"dhrcl": {"seeds": [0, 1]}}
    every = _outputs(_plan(snakemake_bin, tmp_path, "dhrcl", overlay=two), "dhrcl_train")
    assert sorted(o.split(",")[0] for o in every) == sorted(
        f"{tmp_path}/results/runs/dhrcl-{v}-seed{s}/done.json" for v in ("full", "baseline_pass_rate") for s in (0, 1)
    )
    one = _outputs(_plan(snakemake_bin, tmp_path, "dhrcl_seed1", overlay=two), "dhrcl_train")
    assert sorted(o.split(",")[0] for o in one) == sorted(
        f"{tmp_path}/results/runs/dhrcl-{v}-seed1/done.json" for v in ("full", "baseline_pass_rate")
    )
    # evaluation follows the seeds: one job per seed's run, for all its code-generation benchmarks
    evals = _outputs(_plan(snakemake_bin, tmp_path, "evaluate", overlay=two), "eval_codegen")
    runs = [o.split(",")[0].split("/eval/")[1].split("/")[0] for o in evals]
    assert sorted(runs) == sorted(f"dhrcl-{v}-seed{s}" for v in ("full", "baseline_pass_rate") for s in (0, 1))
    benches = {frozenset(f.rsplit("/", 1)[1] for f in _files(o)) for o in evals}
    assert len(benches) == 1  # every seed's run on the same benchmarks
    assert {"kodcode_heldout.json", "humaneval.json"} <= next(iter(benches))


BENCHMARK_LISTS = {
    "mixed": ["kodcode_heldout", "humaneval", "bigcodebench_full", "bigcodebench_hard", "livecodebench"],
    "no_bigcodebench": ["humaneval", "mbpp_plus"],
    "only_bigcodebench": ["bigcodebench_hard"],
}


@pytest.mark.parametrize("kind", sorted(BENCHMARK_LISTS))
def test_one_codegen_job_per_run(snakemake_bin, tmp_path, kind):
    """eval_codegen samples every benchmark of a run in one job (scoring all but BigCodeBench); eval_codegen_bcb
    scores the run's BigCodeBench samples, and exists only with BigCodeBench configured."""
    benchmarks = BENCHMARK_LISTS[kind]
    bcb = [b for b in benchmarks if b.startswith("bigcodebench_")]
    out = _plan(snakemake_bin, tmp_path, "evaluate", overlay={"dhrcl": {"seeds": [0, 1]}}, benchmarks=benchmarks)
    runs = [f"dhrcl-{v}-seed{s}" for v in ("full", "baseline_pass_rate") for s in (0, 1)]
    ev = f"{tmp_path}/results/eval"
    gen = _outputs(out, "eval_codegen")
    assert sorted(map(_files, gen), key=sorted) == sorted(
        ({f"{ev}/{r}/{b}.samples.json" if b in bcb else f"{ev}/{r}/{b}.json" for b in benchmarks} for r in runs),
        key=sorted,
    )
    assert sorted(_outputs(out, "eval_codegen", "log")) == sorted(f"{tmp_path}/logs/eval_codegen/{r}.log" for r in runs)
    scored = _outputs(out, "eval_codegen_bcb")
    assert sorted(map(_files, scored), key=sorted) == sorted(
        ({f"{ev}/{r}/{b}.json" for b in bcb} for r in runs if bcb), key=sorted
    )
    for line in _outputs(out, "eval_codegen_bcb", "input"):
        run = line.split(", ")[0].split("/runs/")[1].split("/")[0]
        assert {f"{ev}/{run}/{b}.samples.json" for b in bcb} <= _files(line)
    assert "rule eval_codegen_samples:" not in out
    # the reference rows stay one job per benchmark, in the benchmark's environment
    refs = _outputs(out, "eval_codegen_reference") + _outputs(out, "eval_codegen_reference_bcb")
    assert sorted(refs) == sorted(f"{ev}/reference/{b}.json" for b in benchmarks)


def _variants(cfg) -> int:
    """Variants over the model sizes (dhrcl.models, each with its own runs or dhrcl.runs; none: one model)."""
    d = cfg["dhrcl"]
    return sum(len(m.get("runs") or d["runs"]) for m in d.get("models") or []) or len(d["runs"])


def test_paper_config_plans_three_seeds(snakemake_bin, tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    assert cfg["dhrcl"]["seeds"] == [0, 1, 2]
    runs = _outputs(_plan(snakemake_bin, tmp_path, "dhrcl", configfile="config/paper.yaml"), "dhrcl_train")
    assert len(runs) == 3 * _variants(cfg)
    # each model size in its own run folders
    assert len({o.split(", ")[0] for o in runs}) == len(runs)
    assert any("/dhrcl-Qwen3-14B-full-seed0/" in o for o in runs)
    one = _outputs(_plan(snakemake_bin, tmp_path, "dhrcl_seed2", configfile="config/paper.yaml"), "dhrcl_train")
    assert len(one) == _variants(cfg) and all("-seed2/" in o for o in one)


@pytest.mark.parametrize("configfile", ["config.yaml", "config/paper.yaml"])
def test_mbpp_decompile_is_planned_beside_humaneval(snakemake_bin, tmp_path, configfile):
    out = _plan(snakemake_bin, tmp_path, "evaluate", configfile=configfile)
    full = yaml.safe_load((REPO / configfile).read_text())
    cfg = full["evaluate"]["decompile"]
    # code generation: one GPU job per DHRCL run (every variant at every seed) and one BigCodeBench scoring job
    n_runs = _variants(full) * len(full["dhrcl"]["seeds"])
    assert len(_outputs(out, "eval_codegen")) == len(_outputs(out, "eval_codegen_bcb")) == n_runs
    base = _outputs(out, "eval_decompile_baseline")
    assert sorted(o.rsplit("/", 2)[-2] for o in base if o.endswith("mbpp_decompile.json")) == sorted(
        cfg["mbpp"]["baselines"]
    )
    systems = _outputs(out, "eval_decompile_system")
    for name in (s["name"] for s in cfg["systems"]):
        assert any(o.endswith(f"/eval/{name}/mbpp_decompile.json") for o in systems)
        assert any(o.endswith(f"/eval/{name}/humaneval_decompile.json") for o in systems)
