"""Evaluating a training run's model (codegrpo.eval.codegen_runs): one model load for every benchmark, the result
and samples files, BigCodeBench samples scored in another job, the table setting of a run."""

from __future__ import annotations

import json
import types

import pytest

from codegrpo.eval import codegen as c
from codegrpo.eval import codegen_runs as cr


# The fields a DHRCL run's result file has (rule eval_codegen / eval_codegen_bcb; read by codegrpo.tables).
RESULT_FIELDS = {
    "kind",
    "benchmark",
    "system",
    "label",
    "variant",
    "reconstructed",
    "setting",
    "data",
    "benchmark_version",
    "model",
    "backend",
    "sampling",
    "provenance",
    "n_problems",
    "n_samples_per_problem",
    "pass@k",
    "syntax_acc",
    "exec_acc",
    "test_pass_rate",
    "hack_detected",
    "records",
    "guarded",
    "sandbox_mechanism",
    "seconds",
}
SAMPLES_FIELDS = {"run", "benchmark", "model", "backend", "sampling", "seconds", "samples"}


class ScriptedGenerator:
    """A generator answering each prompt with scripted completions; logs what happens into ``events``."""

    backend = "scripted"

    def __init__(self, answers, n, events, fail_on=None):
        self.answers, self.n, self.events, self.fail_on = answers, n, events, fail_on
        self.closed = False
        events.append(("load",))

    def generate(self, prompts, desc="generate"):
        assert not self.closed, "generate after close"
        self.events.append(("generate", desc, len(prompts)))
        if desc == self.fail_on:
            raise RuntimeError(f"generation of {desc} failed")
        return [[self.answers.get(p, "```python\nraise SystemExit(3)\n```")] * self.n for p in prompts]

    def close(self):
        self.events.append(("close",))
        self.closed = True


@pytest.fixture()
def scripted(monkeypatch, kodcode_heldout):
    """make_generator replaced by ScriptedGenerator (HumanEval and KodCode answered with their references), and the
    sandbox's creation logged: the order of loads, generations, closes and scoring is in ``events``."""
    from codegrpo.eval import generate

    answers = {p.prompt: "```python\n" + p.reference + "\n```" for p in c.load_humaneval(limit=3)}
    events, made = [], []

    def make_generator(model_dir, settings, backend="auto"):
        made.append(ScriptedGenerator(answers, settings.n, events, fail_on=state.get("fail_on")))
        return made[-1]

    real_sandbox = c.make_sandbox

    def make_sandbox(*args, **kwargs):
        events.append(("score", [g.closed for g in made]))
        return real_sandbox(*args, **kwargs)

    state = {}
    monkeypatch.setattr(generate, "make_generator", make_generator)
    monkeypatch.setattr(c, "make_sandbox", make_sandbox)
    return types.SimpleNamespace(events=events, made=made, state=state)


@pytest.fixture()
def run_dir(tmp_path):
    """A DHRCL run folder as the training stage leaves it: hf/ (not read here), settings.json, done.json."""
    run = tmp_path / "runs" / "dhrcl-no_ast-seed1"
    (run / "hf").mkdir(parents=True)
    (run / "settings.json").write_text(json.dumps({"settings": {"extra": {"variant": "no_ast"}}}))
    (run / "done.json").write_text(json.dumps({"steps": 7}))
    return run / "hf"


def test_run_model_benchmarks_loads_the_model_once(scripted, kodcode_heldout, run_dir, local, tmp_path):
    from codegrpo.eval.generate import GenerationSettings

    settings = GenerationSettings(n=2, temperature=0.8, max_new_tokens=16)
    out = tmp_path / "eval"
    results = {"humaneval": out / "humaneval.json", "kodcode_heldout": out / "kodcode_heldout.json"}
    samples = {"bigcodebench_hard": out / "bigcodebench_hard.samples.json"}
    suites = local["evaluate"]["codegen"]
    written = cr.run_model_benchmarks(
        "dhrcl-no_ast-seed1",
        run_dir,
        results,
        samples,
        settings=settings,
        kodcode_heldout=kodcode_heldout,
        limit=3,
        ks=(1, 2, 5),
        workers=2,
        cfg={"limit": 3},
        suites=suites,
    )
    # one model for the three benchmarks, closed before the first sandbox scores
    assert len(scripted.made) == 1
    n_bcb = len(c.load_benchmark("bigcodebench_hard", limit=3, suites=suites))
    assert scripted.events[:5] == [
        ("load",),
        ("generate", "humaneval", 3),
        ("generate", "kodcode_heldout", 3),
        ("generate", "bigcodebench_hard", n_bcb),
        ("close",),
    ]
    assert scripted.events[5:] == [("score", [True])] * 2  # humaneval and kodcode; BigCodeBench is not scored here
    assert sorted(p.name for p in out.iterdir()) == [
        "bigcodebench_hard.samples.json",
        "humaneval.json",
        "kodcode_heldout.json",
    ]

    he = json.loads(results["humaneval"].read_text())
    assert set(he) == RESULT_FIELDS and written["humaneval"] == he
    assert he["pass@k"] == {"1": 100.0, "2": 100.0}  # the reference answers pass; k=5 > n is dropped
    assert (he["system"], he["variant"], he["setting"], he["backend"]) == (
        "dhrcl-no_ast-seed1",
        "no_ast",
        "ablation (reconstructed)",
        "scripted",
    )
    assert he["sampling"] == {"n": 2, "temperature": 0.8, "top_p": 1.0, "max_new_tokens": 16}
    assert he["provenance"]["training_runs"] == {str(run_dir): {"steps": 7}}
    assert he["n_samples_per_problem"] == [2] and len(he["records"]) == 6
    assert all(r["completion"].startswith("```python") for r in he["records"])
    kod = json.loads(results["kodcode_heldout"].read_text())
    assert set(kod) == RESULT_FIELDS and kod["pass@k"]["1"] == 0.0 and kod["n_problems"] == 3
    assert kod["data"] == str(kodcode_heldout)

    bcb = json.loads(samples["bigcodebench_hard"].read_text())
    assert set(bcb) == SAMPLES_FIELDS and bcb["backend"] == "scripted" and bcb["run"] == "dhrcl-no_ast-seed1"
    assert len(bcb["samples"]) == n_bcb and all(len(v) == 2 for v in bcb["samples"].values())


def test_generation_failure_writes_nothing_and_closes_the_model(scripted, run_dir, local, tmp_path):
    from codegrpo.eval.generate import GenerationSettings

    scripted.state["fail_on"] = "bigcodebench_full"
    out = tmp_path / "eval"
    with pytest.raises(RuntimeError, match="generation of bigcodebench_full failed"):
        cr.run_model_benchmarks(
            "r",
            run_dir,
            {"humaneval": out / "humaneval.json"},
            {"bigcodebench_full": out / "bigcodebench_full.samples.json"},
            settings=GenerationSettings(n=1),
            limit=2,
            suites=local["evaluate"]["codegen"],
        )
    assert scripted.events[-1] == ("close",) and not any(e[0] == "score" for e in scripted.events)
    assert not out.exists()
    with pytest.raises(ValueError, match="either scored in this job or only sampled"):
        cr.run_model_benchmarks(
            "r", run_dir, {"humaneval": out / "a.json"}, {"humaneval": out / "b.json"}, settings=GenerationSettings(n=1)
        )


def test_bigcodebench_samples_are_scored_into_results(scripted, run_dir, local, tmp_path):
    """Only BigCodeBench configured: the GPU job writes samples only; the scoring job turns them into results."""
    from codegrpo.eval.generate import GenerationSettings

    suites = local["evaluate"]["codegen"]
    settings = GenerationSettings(n=1, max_new_tokens=16)
    out = tmp_path / "eval"
    samples = {b: out / f"{b}.samples.json" for b in ("bigcodebench_full", "bigcodebench_hard")}
    cr.run_model_benchmarks("dhrcl-no_ast-seed1", run_dir, {}, samples, settings=settings, limit=2, suites=suites)
    assert [e[0] for e in scripted.events] == ["load", "generate", "generate", "close"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in samples.values())
    # a task's reference solution as its sample: scored, its generation time carried into the result's seconds
    problems = c.load_benchmark("bigcodebench_hard", limit=2, suites=suites)
    hard = json.loads(samples["bigcodebench_hard"].read_text())
    hard.update(seconds=1000.0, samples={p.problem_id: [p.reference] for p in problems})
    samples["bigcodebench_hard"].write_text(json.dumps(hard))
    results = {b: out / f"{b}.json" for b in samples}
    got = cr.score_samples_files(
        "dhrcl-no_ast-seed1",
        run_dir,
        samples,
        results,
        settings=settings,
        limit=2,
        workers=2,
        suites=suites,
        cfg={"benchmarks": list(samples)},
    )
    for b, path in results.items():
        saved = json.loads(path.read_text())
        assert saved == got[b] and RESULT_FIELDS <= set(saved) and saved["benchmark"] == b
        assert saved["backend"] == "scripted" and saved["variant"] == "no_ast"
    saved = json.loads(results["bigcodebench_hard"].read_text())
    assert saved["seconds"] >= 1000.0
    # sandboxed for real: a reference passes unless a library it needs is missing in this environment
    missing = {r["problem_id"] for r in saved["records"] if r["missing_libs"]}
    assert {r["problem_id"] for r in saved["records"] if r["passed"]} == {p.problem_id for p in problems} - missing
    with pytest.raises(ValueError, match="samples of 'bigcodebench_hard', expected 'bigcodebench_full'"):
        cr.score_samples_files(
            "r",
            run_dir,
            {"bigcodebench_full": samples["bigcodebench_hard"]},
            {"bigcodebench_full": out / "x.json"},
            settings=settings,
            suites=suites,
        )


@pytest.mark.slow
def test_tiny_model_sampling_end_to_end(kodcode_heldout, tmp_path, repo_root):
    from codegrpo.eval.generate import GenerationSettings
    from codegrpo.models import build_tiny_model

    probs = c.load_kodcode_heldout(kodcode_heldout)
    model = build_tiny_model(tmp_path / "tiny", [p.prompt + p.reference for p in probs], vocab_size=400)
    settings = GenerationSettings(max_new_tokens=12, temperature=1.0, n=3, batch_size=4, use_chat_template=True)
    out = tmp_path / "he.json"
    res = cr.run_model_benchmarks(
        "dhrcl-tiny",
        model,
        {"humaneval": out},
        settings=settings,
        backend="transformers",
        limit=3,
        ks=(1, 3),
        workers=2,
    )["humaneval"]
    saved = json.loads(out.read_text())
    assert set(saved) == RESULT_FIELDS and saved["backend"] == "transformers"
    assert saved["n_samples_per_problem"] == [3] and len(saved["records"]) == 9
    assert set(saved["pass@k"]) == {"1", "3"} and saved["sampling"]["n"] == 3
    assert all(isinstance(r["completion"], str) for r in saved["records"])
    assert 0.0 <= res["pass@k"]["1"] <= res["pass@k"]["3"] <= 100.0


@pytest.mark.parametrize(
    "variant, setting",
    [
        ("full", "reconstructed"),
        ("no_ast", "ablation (reconstructed)"),
        ("uniform_weights", "ablation (reconstructed)"),
        ("baseline_pass_rate", "baseline (same trainer)"),
        ("baseline_binary", "baseline (same trainer)"),
        ("baseline_acecoder", "baseline (same trainer)"),
    ],
)
def test_describe_run_reads_run_settings(tmp_path, paper, variant, setting):
    """The table setting of a run from the DHRCL settings its training wrote (the paper config's variants)."""
    from codegrpo.verl.dhrcl import dhrcl_settings

    run = tmp_path / f"dhrcl-{variant}-seed0"
    (run / "hf").mkdir(parents=True)
    extra = dhrcl_settings(paper, variant, run)
    (run / "settings.json").write_text(json.dumps({"settings": {"extra": extra}}))
    assert cr.describe_run(run / "hf") == (variant, setting)
    assert cr.describe_run(tmp_path / "elsewhere" / "hf") == (None, "reconstructed")
