"""config/reproduce_sk2d.yaml (layered over config/paper.yaml) plans only SK²Decompile's evaluation of the released
checkpoints with the reference protocol; a bad local evaluation file stops the plan (dry runs only)."""

from __future__ import annotations

import json
import re

import yaml

from codegrpo.config import merge_layers, validate_config

from tests.conftest import REPO_ROOT as REPO
from tests.conftest import run_snakemake


def _dry_run(snakemake_bin, tmp_path, *configfiles, target="evaluate"):
    return run_snakemake(
        "-n",
        target,
        "--configfile",
        *configfiles,
        "--config",
        f"results_dir={tmp_path}/res",
        f"logs_dir={tmp_path}/logs",
        timeout=600,
    )


def test_reproduction_layer_plans_only_the_sk2decompile_evaluation(snakemake_bin, tmp_path):
    cfg = merge_layers(
        yaml.safe_load((REPO / "config/paper.yaml").read_text()),
        yaml.safe_load((REPO / "config/reproduce_sk2d.yaml").read_text()),
    )
    validate_config(cfg, "paper + reproduce_sk2d")
    assert cfg["sft"]["import"] == {
        "skeleton": "LLM4Binary/sk2decompile-struct-6.7b",
        "skin": "LLM4Binary/sk2decompile-ident-6.7",
    }
    dec = cfg["evaluate"]["decompile"]
    for bench in (dec, dec["mbpp"]):  # both benchmarks: the reference's files, protocol and input, all tasks
        assert bench["data"].startswith(
            "https://github.com/albertan017/LLM4Decompile/raw/main/sk2decompile/evaluation/data/"
        ) and bench["data"].endswith("_normsrcpseudo.json")
        assert bench["protocol"] == "sk2decompile" and bench["input_field"] == "ida_pseudo_norm"
    assert dec["tasks_per_level"] is None and dec["levels"] == ["O0", "O1", "O2", "O3"]
    assert dec["max_new_tokens"] == 4096 and cfg["model"]["chat_template"] == "passthrough"
    from codegrpo.verl.prompts import eval_uses_template

    assert eval_uses_template(cfg) is False  # raw prompts, as the reference
    proc = _dry_run(snakemake_bin, tmp_path, "config/paper.yaml", "config/reproduce_sk2d.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stdout.split("Job stats:", 1)[1]
    jobs = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}
    # two imports (no training), the released pair on both benchmarks, gold / ghidra / ida rows on both
    assert jobs == {
        "sft_train": 2,
        "eval_decompile_system": 2,
        "eval_decompile_baseline": 6,
        "evaluate": 1,
        "total": 11,
    }, jobs
    assert f"{tmp_path}/res/eval/sk2decompile_released/humaneval_decompile.json" in proc.stdout
    assert f"{tmp_path}/res/eval/sk2decompile_released/mbpp_decompile.json" in proc.stdout


def test_a_local_file_without_the_input_field_stops_the_plan(snakemake_bin, tmp_path):
    rows = json.loads((REPO / "data/sk2decompile/mbpp-decompile-sample.json").read_text())
    bad = tmp_path / "mbpp_no_norm.json"
    bad.write_text(json.dumps([{k: v for k, v in r.items() if k != "ida_pseudo_norm"} for r in rows]))
    layer = tmp_path / "layer.yaml"
    layer.write_text(yaml.safe_dump({"evaluate": {"decompile": {"mbpp": {"data": str(bad)}}}}))
    proc = _dry_run(snakemake_bin, tmp_path, "config.yaml", str(layer))
    assert proc.returncode != 0
    assert re.search(
        r"evaluate\.decompile\.mbpp \(mbpp_decompile\): .*mbpp_no_norm\.json: entry 0: missing field "
        r"'ida_pseudo_norm'",
        proc.stderr + proc.stdout,
    ), proc.stderr[-3000:]
