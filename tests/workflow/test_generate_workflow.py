"""Data generation in the DAG: a small local sample in the schema of LLM4Decompile's decompile-ghidra-100k
release (a Parquet file with the string columns ``instruction`` = pseudo-code wrapped in the decompile
prompt and ``output`` = C source; the release has no optimisation-level column) goes through rule
data_generate (real clang-format, tree-sitter, Psyche-C and gcc) into the four training files, and the
existing data stages then read those files (``data.sk2d_inputs: generated``) into the parquet files.

The pairs are real: IDA pseudo-code and source of BringUpBench functions (O0) shipped in
data/sk2decompile, plus two HumanEval-Decompile rows (Ghidra pseudo-code) that decontamination against the
configured evaluation set must drop.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from codegrpo.data.generate import OUTPUTS, body_key
from codegrpo.data.headers import BUILD_DIRS, gcc_syntax_check
from codegrpo.data.ingest import unwrap_prompt

from tests.conftest import REPO_ROOT as ROOT

BUB = ROOT / "data/sk2decompile/bringupbench-merged.O0.func_map.infer.jsonl"
HE = ROOT / "data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json"
ARCHIVES = sorted((ROOT.parent / "shared/vendor/psychec").glob("psychec-original-*.tar.gz"))


def _wrap(pseudo: str) -> str:
    return "# This is the assembly code:\n" + pseudo.strip() + "\n# What is the source code?\n"


def write_sample(path: Path, n_bub: int = 8) -> tuple[list[dict], list[dict]]:
    """Write the sample as the release's Parquet layout; return the BringUpBench and HumanEval rows used."""
    bub, seen = [], set()
    for line in BUB.read_text().splitlines():
        r = json.loads(line)
        src = r["source"]["content"]
        key = body_key(src)
        if len(src) < 600 and key not in seen and "#" not in src:
            seen.add(key)
            bub.append(r)
        if len(bub) == n_bub:
            break
    he = [r for r in json.loads(HE.read_text()) if r["type"] == "O2"][:2]  # two different functions
    rows = [{"instruction": _wrap(r["pseudo"]["content"]), "output": r["source"]["content"]} for r in bub]
    rows += [{"instruction": _wrap(r["input_asm_prompt"]), "output": r["c_func"]} for r in he]
    pd.DataFrame(rows, columns=["instruction", "output"]).to_parquet(path, index=False)
    return bub, he


@pytest.fixture(scope="module")
def psychec_bin() -> Path:
    d = BUILD_DIRS[0]
    if not ((d / "psychecgen").is_file() and (d / "psychecsolver-exe").is_file()):
        if ARCHIVES:
            pytest.fail(f"Psyche-C not built in {d} although its source is at {ARCHIVES[0]}: run scripts/setup.sh")
        pytest.skip("Psyche-C neither built nor its source archive present")
    return d


def test_generated_files_feed_the_data_stages(snakemake_bin, repo_root, tmp_path, psychec_bin):
    sample = tmp_path / "train-00000-of-00001.parquet"
    bub, he = write_sample(sample)
    cfg = yaml.safe_load((repo_root / "config.yaml").read_text())
    cfg.update(results_dir=str(tmp_path / "res"), logs_dir=str(tmp_path / "logs"))
    cfg["data"]["sk2d_inputs"] = "generated"
    cfg["data"]["generate"] = {  # Psyche-C: the default psychec_bin, build/psychec/bin
        "source": {"path": str(sample), "cache_dir": str(tmp_path / "hf-cache")},
        "psychec_timeout": 60.0,  # a loaded machine; the reference's 1 s is a speed limit, not a result
        "val_fraction": 0.25,
    }
    cfg["data"]["normalize"]["clang_format_timeout"] = 30.0
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    res = tmp_path / "res" / "data"
    targets = [
        str(res / role / f"{stage}.{split}.parquet")
        for role in ("rl", "sft")
        for stage in ("skeleton", "skin")
        for split in ("train", "val")
    ]
    proc = subprocess.run(
        [snakemake_bin, "--configfile", str(cfg_path), "--cores", "2", *targets],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = tmp_path / "logs" / "data_generate" / "generate.log"
    assert proc.returncode == 0, proc.stderr[-4000:] + (log.read_text()[-3000:] if log.exists() else "")

    gen = res / "generated"
    summary = json.loads((gen / "summary.json").read_text())
    steps = summary["steps"]
    assert summary["rows"] == len(bub) + len(he) and summary["source"] == str(sample)
    order = ["read", "normalize", "obfuscate", "format", "headers", "validate", "dedup", "decontaminate"]
    for a, b in zip(order, order[1:]):
        assert steps[a]["kept"] == steps[b]["in"], (a, b, steps)
    for s in order:
        assert steps[s]["in"] == steps[s]["kept"] + sum(steps[s]["dropped_by_reason"].values())
    # the two HumanEval functions are in the evaluation set: decontamination drops exactly those
    assert steps["decontaminate"]["dropped_by_reason"] == {"function body in an evaluation set": 2}, steps
    assert summary["decontamination_sets"] == {"data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json": 656}
    # real Psyche-C: used, counted per reason (a failure reason, if any, names the tool and the cause)
    psy = summary["psyche_c"]
    assert psy["available"] and psy["psychecgen"].startswith(str(psychec_bin)) and psy["runs"] >= 1
    assert all(r.split()[0] in ("psychecgen", "psychecsolver", "sample.h") for r in psy["failures"])
    assert set(steps["validate"]["dropped_by_reason"]) <= {"gcc error", "gcc timeout"}
    n = summary["records"]
    assert n >= 4, steps  # most BringUpBench functions survive every step (6 of 8 with gcc 12)
    assert steps["headers"]["kept"] == steps["headers"]["in"] - sum(psy["failures"].values())
    for k in OUTPUTS:
        assert len((gen / f"{k}.jsonl").read_text().splitlines()) == n
    html = (gen / "steps.html").read_text()
    assert "<td>decontaminate</td><td>" in html and "function body in an evaluation set: 2" in html

    sk = [json.loads(x) for x in (gen / "rl_skeleton.jsonl").read_text().splitlines()]
    for row in sk:
        ir, header = row["reward_model"]["ground_truth"], row["extra_info"]["header"]
        assert gcc_syntax_check(header, ir)[0] and "#include" not in ir
        assert row["extra_info"]["provenance"]["source"] == str(sample)
    # names the pseudo-code does not show became placeholders (IDA keeps some parameter names: they stay)
    assert sum("var1" in r["reward_model"]["ground_truth"] for r in sk) >= n // 2

    # the data stages read the generated files: every record reaches its parquet pair
    for name in ("rl_skeleton", "sft_pseudo2ir", "rl_skin", "sft_ir2src"):
        s = json.loads((res / f"generated_{name}" / "summary.json").read_text())
        assert s["records"] == n and s["ingest"]["rejected"] == 0, (name, s)
    hdr = json.loads((res / "generated_rl_skeleton" / "summary.json").read_text())["header_status_counts"]
    assert hdr["ok"] == n, hdr  # Psyche-C's header passes gcc again in the header stage
    for role in ("rl", "sft"):
        for stage in ("skeleton", "skin"):
            train = pd.read_parquet(res / role / f"{stage}.train.parquet")
            val = pd.read_parquet(res / role / f"{stage}.val.parquet")
            assert len(train) + len(val) == n and len(val) >= 1
    rl = pd.concat([pd.read_parquet(res / "rl" / f"skeleton.{s}.parquet") for s in ("train", "val")])
    assert set(rl["data_source"]) == {"sk2decompile_structure"}
    assert all(e["header_status"] == "ok" and e["dataset"] == "generated_rl_skeleton" for e in rl["extra_info"])
    skin = pd.concat([pd.read_parquet(res / "rl" / f"skin.{s}.parquet") for s in ("train", "val")])
    srcs = {body_key(r["source"]["content"]) for r in bub}
    assert all(body_key(gt["ground_truth"]) in srcs for gt in skin["reward_model"])
    # one function, one side: the split generation gave a function holds in all four training sets (a
    # function in skeleton-SFT train is never in skeleton-RL val)
    side = {
        "skeleton": {r["reward_model"]["ground_truth"]: r["extra_info"]["split"] for r in sk},
        "skin": {
            json.loads(x)["reward_model"]["ground_truth"]: json.loads(x)["extra_info"]["split"]
            for x in (gen / "rl_skin.jsonl").read_text().splitlines()
        },
    }
    assert set(side["skeleton"].values()) == {"train", "val"}
    for stage in ("skeleton", "skin"):
        for split in ("train", "val"):
            rl_part = pd.read_parquet(res / "rl" / f"{stage}.{split}.parquet")
            sft_part = pd.read_parquet(res / "sft" / f"{stage}.{split}.parquet")
            targets = [gt["ground_truth"] for gt in rl_part["reward_model"]] + list(sft_part["response"])
            assert targets and all(side[stage][t] == split for t in targets), (stage, split)
    sft = pd.concat([pd.read_parquet(res / "sft" / f"skeleton.{s}.parquet") for s in ("train", "val")])
    irs = {r["reward_model"]["ground_truth"] for r in sk}
    assert set(sft["response"]) == irs
    assert all(unwrap_prompt("assembly", p) is not None for p in sft["prompt"])


def test_paper_config_plans_generation_from_the_hub(snakemake_bin, repo_root, tmp_path):
    """config/paper.yaml: the four training files come from decompile-ghidra-100k by hub id, KodCode from the
    release by hub id; the plan needs no download (dry run)."""
    cfg = yaml.safe_load((repo_root / "config/paper.yaml").read_text())
    assert cfg["data"]["sk2d_inputs"] == "generated"
    assert cfg["data"]["generate"]["source"]["hub_id"] == "LLM4Binary/decompile-ghidra-100k"
    assert cfg["data"]["kodcode"]["source"]["hub_id"].startswith("KodCode/")
    proc = subprocess.run(
        [
            snakemake_bin,
            "-n",
            "data",
            "--configfile",
            "config/paper.yaml",
            "--config",
            f"results_dir={tmp_path}/res",
            f"logs_dir={tmp_path}/logs",
        ],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stdout.split("Job stats:", 1)[1]
    jobs = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}
    assert jobs["data_generate"] == 1 and jobs["data_ingest"] == 4 and jobs["data_kodcode"] == 1, jobs
    assert f"{tmp_path}/res/data/generated_rl_skeleton/ingested.jsonl" in proc.stdout
