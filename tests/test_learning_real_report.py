"""The statistics, summary and report of the real-model learning measurement (codegrpo/learning_real_report.py):
the sampling and training noise, the verdict against it, the bootstrap, the summary, report.md and the curves."""

from __future__ import annotations

import json

import pytest

from codegrpo import learning_real as lr
from codegrpo import learning_real_report as lrr
from codegrpo.config import load_config
from tests.conftest import REPO_ROOT

CFG = load_config(REPO_ROOT / "config.yaml")


def _result(seed: int, passed: dict[str, list[bool]], rates: dict[str, list[float]] | None = None) -> dict:
    rates = rates or {k: [float(x) for x in v] for k, v in passed.items()}
    n = sum(len(v) for v in passed.values())
    return {
        "seed": seed,
        "pass@1": sum(sum(v) / len(v) for v in passed.values()) / len(passed),
        "r_pass": sum(sum(v) for v in rates.values()) / n,
        "syntax_acc": 1.0,
        "exec_acc": 1.0,
        "per_problem": {k: {"passed": passed[k], "pass_rate": rates[k]} for k in passed},
        "seconds": {"total": 1.0},
        "guarded": True,
        "sampling": {**CFG["learning_real"]["eval"], "seed": seed, "dtype": "bfloat16"},  # as evaluate_model resolves
    }


def test_noise_and_verdict_against_it():
    ids = [f"p{i}" for i in range(10)]
    base0 = _result(0, {k: [False, False] for k in ids})
    base1 = _result(1, {k: [i == 0, False] for i, k in enumerate(ids)})  # one sample of one problem differs
    noise = lrr.noise_level([base0, base1])
    assert noise["pass@1_noise"] == pytest.approx(0.05)
    up = _result(0, {k: [True, i < 5] for i, k in enumerate(ids)})  # 0 -> 0.75
    v = lrr.verdict(base0, up, noise)
    assert v["delta_pass@1"] == pytest.approx(0.75) and v["verdict"] == "learned"
    assert v["threshold"] >= max(noise["pass@1_noise"], 2 * v["se_pass@1"]) and v["se_pass@1"] > 0
    same = lrr.verdict(base0, base1, noise)  # the noise itself is no change
    assert same["verdict"] == "no change beyond noise"
    down = lrr.verdict(up, base0, noise)
    assert down["verdict"] == "unlearned"
    with pytest.raises(lr.LearningRealError, match="noise_seeds"):
        lrr.noise_level([base0])


def test_training_noise_raises_the_bar():
    ids = [f"p{i}" for i in range(10)]
    base0 = _result(0, {k: [False, False] for k in ids})
    base1 = _result(1, {k: [i == 0, False] for i, k in enumerate(ids)})
    up = _result(0, {k: [i < 5, i < 5] for i, k in enumerate(ids)})  # 0 -> 0.5, SE about 0.16
    noise = lrr.noise_level([base0, base1])
    assert lrr.verdict(base0, up, noise)["verdict"] == "learned"
    again = _result(0, {k: [i < 5 or i == 9, i < 5 or i == 9] for i, k in enumerate(ids)})  # 0.6
    other = _result(0, {k: [False, i == 9] for i, k in enumerate(ids)})  # 0.05: the same variant, another seed
    noise["training"] = lrr.training_noise({0: again, 1: other})
    assert noise["training"]["pass@1_noise"] == pytest.approx(0.55) and noise["training"]["seeds"] == [0, 1]
    v = lrr.verdict(base0, up, noise)
    assert v["verdict"] == "no change beyond noise" and v["threshold"] == pytest.approx(0.55)
    with pytest.raises(lr.LearningRealError, match="noise_seeds"):
        lrr.training_noise({0: again})


def test_bootstrap_se_is_zero_for_a_constant_change_and_grows_with_spread():
    before = {f"p{i}": 0.0 for i in range(8)}
    assert lrr.bootstrap_se(before, {k: 0.5 for k in before}) == pytest.approx(0.0)
    wide = lrr.bootstrap_se(before, {k: float(i % 2) for i, k in enumerate(before)})
    assert 0.1 < wide < 0.25  # sd 0.5 / sqrt(8) = 0.177


def _metrics(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_summary_and_report_from_run_files(tmp_path):
    ids = [f"p{i}" for i in range(6)]
    base = [_result(0, {k: [False, False] for k in ids}), _result(1, {k: [False, i == 0] for i, k in enumerate(ids)})]
    after = {"full": _result(0, {k: [True, False] for k in ids}), "baseline_binary": base[0]}
    dirs = {}
    for name in after:
        d = tmp_path / name
        d.mkdir()
        _metrics(
            d / "metrics.jsonl",
            [
                {"step": 0, "val/x": 1},
                {
                    "step": 1,
                    "critic/score/mean": 0.5,
                    "reward/r_pass/mean": 0.1,
                    "dynamics/degenerate_group_ratio": 0.75,
                },
                {
                    "step": 2,
                    "critic/score/mean": 0.7,
                    "reward/r_pass/mean": 0.3,
                    "dynamics/degenerate_group_ratio": 0.25,
                },
            ],
        )
        (d / lr.TIMING_FILE).write_text(json.dumps({"seconds": 42.0}))
        dirs[name] = d
    sl = {"difficulty": "easy", "train": ["a"], "val": ["b"], "heldout": ids}
    summary = lrr.summarize(base, after, dirs, sl)
    assert summary["variants"]["full"]["verdict"] == "learned"
    assert summary["variants"]["baseline_binary"]["verdict"] == "no change beyond noise"
    assert summary["variants"]["full"]["curves"]["zero-variance groups"] == [(1, 0.75), (2, 0.25)]
    md, png = tmp_path / "report.md", tmp_path / "curves.png"
    lrr.write_report(summary, md, png, CFG["learning_real"])
    text = md.read_text()
    assert "| full | 0.000 | 0.500 | +0.500" in text and "| learned |" in text
    assert "| full | 2 | 0.700 |  |  | 0.300 | 0.250 |" in text
    assert "full training 42" in text and png.read_bytes()[:4] == b"\x89PNG"
    assert "training noise: not measured" in text and "sampling seed 0, weights in bfloat16" in text
    # before and after must share the sampling seed
    with pytest.raises(lr.LearningRealError, match="sampling seed 1"):
        lrr.summarize(base, {"full": base[1]}, dirs, sl)
    # the training noise: full trained again at seed 1 fell back to the base model's pass@1
    dirs["full.train1"] = dirs["full"]
    summary = lrr.summarize(base, after, dirs, sl, noise_runs={"full.train1": base[0]}, train_seed=0)
    t = summary["noise"]["training"]
    assert (t["variant"], t["seeds"], t["pass@1"], t["train_seconds"]) == ("full", [0, 1], [0.5, 0.0], [42.0])
    assert summary["variants"]["full"]["verdict"] == "no change beyond noise"
    assert summary["variants"]["full"]["threshold"] == pytest.approx(0.5)
    lrr.write_report(summary, md, png, CFG["learning_real"])
    text = md.read_text()
    assert "training noise: `full` trained at seeds [0, 1] gives held-out pass@1 0.500, 0.000 (spread 0.500)" in text
    assert "training-noise runs: training 42 + evaluation 1" in text
    for runs, seed, message in (
        ({"no_gate.train1": base[0]}, 0, "no_gate.train1: not a training-noise run"),
        ({"full.train0": base[0]}, 0, "full.train0: a noise run at training seed 0"),
        ({"full.train1": base[0], "baseline_binary.train1": base[0]}, 0, "several variants"),
    ):
        with pytest.raises(lr.LearningRealError, match=message):
            lrr.summarize(base, after, dirs, sl, noise_runs=runs, train_seed=seed)


def test_a_run_without_training_steps_is_an_error(tmp_path):
    _metrics(tmp_path / "metrics.jsonl", [{"step": 0, "val/score": 0.1}])
    with pytest.raises(lr.LearningRealError, match="metrics.jsonl: no training step"):
        lrr.step_curves(tmp_path / "metrics.jsonl")
