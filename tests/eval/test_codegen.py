"""DHRCL evaluation: pass@k estimator, code extraction, and sandboxed scoring on real HumanEval / KodCode data."""

from __future__ import annotations

import itertools
import json
import math
import random
import types

import pytest

from codegrpo.eval import codegen as c


def _pass_at_k_bruteforce(n, cnt, k):
    """Probability that a random k-subset of n samples (cnt correct) contains a correct one, by enumeration."""
    samples = [True] * cnt + [False] * (n - cnt)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,cnt,k", [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (6, 0, 2), (6, 6, 4), (7, 3, 7)])
def test_pass_at_k_matches_enumeration(n, cnt, k):
    assert c.pass_at_k(n, cnt, k) == pytest.approx(_pass_at_k_bruteforce(n, cnt, k))


def test_pass_at_1_is_the_success_share():
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(1, 20)
        cnt = rng.randint(0, n)
        assert c.pass_at_k(n, cnt, 1) == pytest.approx(cnt / n)
    with pytest.raises(ValueError):
        c.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        c.pass_at_k(3, 1, 4)


def test_aggregate_over_problems():
    rs = [
        c.SampleResult("a", 0, True, True, True, 2, 2),
        c.SampleResult("a", 1, True, False, False, 0, 2),
        c.SampleResult("b", 0, False, False, False, 0, 2),
        c.SampleResult("b", 1, True, True, False, 1, 2),
    ]
    agg = c.aggregate(rs, ks=(1, 2))
    assert agg["pass@k"]["1"] == pytest.approx(100 * (0.5 + 0.0) / 2)
    assert agg["pass@k"]["2"] == pytest.approx(100 * (1.0 + 0.0) / 2)
    assert agg["syntax_acc"] == 75.0 and agg["exec_acc"] == 50.0
    assert agg["test_pass_rate"] == pytest.approx(100 * (1 + 0 + 0 + 0.5) / 4)
    assert math.isclose(agg["n_problems"], 2)


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail():
    probs = c.load_humaneval(limit=12)
    assert len(probs) == 12 and all(p.entry_point for p in probs)
    ref = c.evaluate_samples("humaneval", probs, c.reference_samples(probs), workers=2, extract=False)
    assert ref["pass@k"]["1"] == 100.0 and ref["syntax_acc"] == 100.0 and ref["exec_acc"] == 100.0
    # n = 3 samples per problem: the canonical body in a fence (the model format), a wrong body, a syntax error
    samples = {}
    for p in probs:
        good = "```python\n" + p.reference + "\n```"
        wrong = f"```python\ndef {p.entry_point}(*args, **kwargs):\n    return None\n```"
        samples[p.problem_id] = [good, wrong, "```python\ndef broken(:\n```"]
    res = c.evaluate_samples("humaneval", probs, samples, ks=(1, 3), workers=2)
    assert res["pass@k"]["1"] == pytest.approx(100 / 3)
    assert res["pass@k"]["3"] == 100.0
    assert res["syntax_acc"] == pytest.approx(200 / 3)
    recs = {(r["problem_id"], r["sample"]): r for r in res["records"]}
    first = probs[0].problem_id
    assert recs[(first, 0)]["passed"] and not recs[(first, 1)]["passed"] and recs[(first, 1)]["exec_ok"]
    assert not recs[(first, 2)]["syntax_ok"] and not recs[(first, 2)]["exec_ok"]


def test_humaneval_program_keeps_prompt_imports():
    p = c.load_humaneval(limit=1)[0]  # has_close_elements uses typing.List
    body = "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n    return False\n"
    prog = c.humaneval_program(p, body)
    assert prog.startswith("from typing import List")
    # a body-only completion is appended to the prompt's header
    assert c.humaneval_program(p, "    return False\n").startswith(p.prefix)


@pytest.fixture(scope="module")
def kodcode_heldout(repo_root, tmp_path_factory):
    from codegrpo.data.kodcode import prepare_kodcode

    out = tmp_path_factory.mktemp("kodcode")
    files = sorted(str(p) for p in (repo_root / "data" / "kodcode").glob("*.json"))
    prepare_kodcode(files, out_dir=out, val_fraction=0.1, heldout_fraction=0.2, seed=0)
    return out / "heldout.parquet"


def test_kodcode_reference_solutions_pass(kodcode_heldout, tmp_path):
    out = tmp_path / "ref.json"
    res = c.run_reference("kodcode_heldout", out, kodcode_heldout=kodcode_heldout, limit=10, workers=2)
    assert res["n_problems"] == 10
    assert res["pass@k"]["1"] == 100.0 and res["exec_acc"] == 100.0
    saved = json.loads(out.read_text())
    assert saved["kind"] == "codegen" and saved["system"] == "reference"
    assert {"model", "config_hash", "date"} <= set(saved["provenance"])


def test_kodcode_failing_and_crashing_solutions(kodcode_heldout):
    probs = c.load_kodcode_heldout(kodcode_heldout, limit=4)
    samples = {
        p.problem_id: ["```python\nraise RuntimeError('boom')\n```", "```python\nimport sys\n```"] for p in probs
    }
    res = c.evaluate_samples("kodcode_heldout", probs, samples, workers=2)
    assert res["pass@k"]["1"] == 0.0
    by = {r["sample"]: r for r in res["records"] if r["problem_id"] == probs[0].problem_id}
    assert not by[0]["exec_ok"] and by[0]["syntax_ok"]
    assert by[1]["exec_ok"] and not by[1]["passed"]


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
    written = c.run_model_benchmarks(
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
        c.run_model_benchmarks(
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
        c.run_model_benchmarks(
            "r", run_dir, {"humaneval": out / "a.json"}, {"humaneval": out / "b.json"}, settings=GenerationSettings(n=1)
        )


def test_bigcodebench_samples_are_scored_into_results(scripted, run_dir, local, tmp_path):
    """Only BigCodeBench configured: the GPU job writes samples only; the scoring job turns them into results."""
    from codegrpo.eval.generate import GenerationSettings

    suites = local["evaluate"]["codegen"]
    settings = GenerationSettings(n=1, max_new_tokens=16)
    out = tmp_path / "eval"
    samples = {b: out / f"{b}.samples.json" for b in ("bigcodebench_full", "bigcodebench_hard")}
    c.run_model_benchmarks("dhrcl-no_ast-seed1", run_dir, {}, samples, settings=settings, limit=2, suites=suites)
    assert [e[0] for e in scripted.events] == ["load", "generate", "generate", "close"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in samples.values())
    # a task's reference solution as its sample: scored, its generation time carried into the result's seconds
    problems = c.load_benchmark("bigcodebench_hard", limit=2, suites=suites)
    hard = json.loads(samples["bigcodebench_hard"].read_text())
    hard.update(seconds=1000.0, samples={p.problem_id: [p.reference] for p in problems})
    samples["bigcodebench_hard"].write_text(json.dumps(hard))
    results = {b: out / f"{b}.json" for b in samples}
    got = c.score_samples_files(
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
        c.score_samples_files(
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
    res = c.run_model_benchmarks(
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
    assert c.describe_run(run / "hf") == (variant, setting)
    assert c.describe_run(tmp_path / "elsewhere" / "hf") == (None, "reconstructed")
