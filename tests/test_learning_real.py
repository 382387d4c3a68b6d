"""The real-model learning measurement (codegrpo/learning_real.py, target learning_real): the slice, the noise and
the verdict, the report, and the plan. The slow end of it (evaluation of the real model) is in
tests/test_packaged.py, beside the real model's fixture."""

from __future__ import annotations

import json

import pytest

from codegrpo import learning_real as lr
from codegrpo.config import load_config
from tests.conftest import REPO_ROOT, run_snakemake

CFG = load_config(REPO_ROOT / "config.yaml")
PATHS = [REPO_ROOT / p for p in CFG["data"]["kodcode"]["paths"]]


def _rec(i: int) -> dict:
    return {"question_id": f"q{i:02d}", "prompt": "p" * i, "solution": "s"}


def test_candidates_are_the_easy_shipped_records_shortest_first():
    raw = [o for p in PATHS for o in json.loads(p.read_text())]
    easy_ids = {o["question_id"] for o in raw if o.get("gpt_difficulty") == "easy"}
    recs = lr.candidate_records(PATHS, "easy")
    assert recs and {r["question_id"] for r in recs} <= easy_ids
    assert len(recs) >= 60  # the shipped slice holds 115 easy records; a few are filtered by the data stage's rules
    keys = [(len(r["prompt"]) + len(r["solution"]), r["question_id"]) for r in recs]
    assert keys == sorted(keys)
    # the prompt names the function the tests call (the data stage's prompt with its signature hint)
    assert all("Your code must define" in r["prompt"] for r in recs)
    assert len(lr.candidate_records(PATHS, None)) > len(recs)


def test_split_holds_out_every_other_problem_and_never_overlaps():
    parts = lr.split_slice([_rec(i) for i in range(40)], n_train=10, n_val=3, n_heldout=8)
    ids = {k: [r["question_id"] for r in v] for k, v in parts.items()}
    assert ids["heldout"] == [f"q{i:02d}" for i in (1, 3, 5, 7, 9, 11, 13, 15)]
    assert len(ids["train"]) == 10 and len(ids["val"]) == 3
    assert not (
        set(ids["train"]) & set(ids["val"])
        or set(ids["train"]) & set(ids["heldout"])
        or set(ids["val"]) & set(ids["heldout"])
    )
    # all drawn from the 21 shortest records
    assert max(int(q[1:]) for v in ids.values() for q in v) == 20


def test_split_with_more_held_out_than_every_other_record():
    parts = lr.split_slice([_rec(i) for i in range(10)], n_train=2, n_val=1, n_heldout=7)
    assert len(parts["heldout"]) == 7 and len(parts["train"]) == 2 and len(parts["val"]) == 1
    assert len({r["question_id"] for v in parts.values() for r in v}) == 10


def test_too_few_records_names_the_key():
    with pytest.raises(
        lr.LearningRealError, match=r"learning_real.slice asks for 4 train \+ 1 val \+ 2 held-out.*only 5"
    ):
        lr.split_slice([_rec(i) for i in range(5)], 4, 1, 2)


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
        "sampling": {**CFG["learning_real"]["eval"], "seed": seed},
    }


def test_noise_and_verdict_against_it():
    ids = [f"p{i}" for i in range(10)]
    base0 = _result(0, {k: [False, False] for k in ids})
    base1 = _result(1, {k: [i == 0, False] for i, k in enumerate(ids)})  # one sample of one problem differs
    noise = lr.noise_level([base0, base1])
    assert noise["pass@1_noise"] == pytest.approx(0.05)
    up = _result(0, {k: [True, i < 5] for i, k in enumerate(ids)})  # 0 -> 0.75
    v = lr.verdict(base0, up, noise)
    assert v["delta_pass@1"] == pytest.approx(0.75) and v["verdict"] == "learned"
    assert v["threshold"] >= max(noise["pass@1_noise"], 2 * v["se_pass@1"]) and v["se_pass@1"] > 0
    same = lr.verdict(base0, base1, noise)  # the noise itself is no change
    assert same["verdict"] == "no change beyond noise"
    down = lr.verdict(up, base0, noise)
    assert down["verdict"] == "unlearned"
    with pytest.raises(lr.LearningRealError, match="noise_seeds"):
        lr.noise_level([base0])


def test_run_names_add_the_training_noise_runs():
    lrc = CFG["learning_real"]
    assert lr.run_names(lrc) == [*lrc["variants"], "full.train1"]  # the default: full trained again at seed 1
    assert lr.parse_run("full.train1") == ("full", 1) and lr.parse_run("baseline_binary") == ("baseline_binary", None)
    assert lr.run_names({**lrc, "training": {**lrc["training"], "noise_seeds": []}}) == lrc["variants"]
    bad = {**lrc, "training": {**lrc["training"], "noise_variant": "no_gate"}}
    with pytest.raises(lr.LearningRealError, match="learning_real.training.noise_variant: 'no_gate'"):
        lr.run_names(bad)


def test_training_noise_raises_the_bar():
    ids = [f"p{i}" for i in range(10)]
    base0 = _result(0, {k: [False, False] for k in ids})
    base1 = _result(1, {k: [i == 0, False] for i, k in enumerate(ids)})
    up = _result(0, {k: [i < 5, i < 5] for i, k in enumerate(ids)})  # 0 -> 0.5, SE about 0.16
    noise = lr.noise_level([base0, base1])
    assert lr.verdict(base0, up, noise)["verdict"] == "learned"
    again = _result(0, {k: [i < 5 or i == 9, i < 5 or i == 9] for i, k in enumerate(ids)})  # 0.6
    other = _result(0, {k: [False, i == 9] for i, k in enumerate(ids)})  # 0.05: the same variant, another seed
    noise["training"] = lr.training_noise({0: again, 1: other})
    assert noise["training"]["pass@1_noise"] == pytest.approx(0.55) and noise["training"]["seeds"] == [0, 1]
    v = lr.verdict(base0, up, noise)
    assert v["verdict"] == "no change beyond noise" and v["threshold"] == pytest.approx(0.55)
    with pytest.raises(lr.LearningRealError, match="noise_seeds"):
        lr.training_noise({0: again})


def test_bootstrap_se_is_zero_for_a_constant_change_and_grows_with_spread():
    before = {f"p{i}": 0.0 for i in range(8)}
    assert lr.bootstrap_se(before, {k: 0.5 for k in before}) == pytest.approx(0.0)
    wide = lr.bootstrap_se(before, {k: float(i % 2) for i, k in enumerate(before)})
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
    summary = lr.summarize(base, after, dirs, sl)
    assert summary["variants"]["full"]["verdict"] == "learned"
    assert summary["variants"]["baseline_binary"]["verdict"] == "no change beyond noise"
    assert summary["variants"]["full"]["curves"]["zero-variance groups"] == [(1, 0.75), (2, 0.25)]
    md, png = tmp_path / "report.md", tmp_path / "curves.png"
    lr.write_report(summary, md, png, CFG["learning_real"])
    text = md.read_text()
    assert "| full | 0.000 | 0.500 | +0.500" in text and "| learned |" in text
    assert "| full | 2 | 0.700 |  |  | 0.300 | 0.250 |" in text
    assert "full training 42" in text and png.read_bytes()[:4] == b"\x89PNG"
    assert "training noise: not measured" in text and "sampling seed 0, weights in bfloat16" in text
    # before and after must share the sampling seed
    with pytest.raises(lr.LearningRealError, match="sampling seed 1"):
        lr.summarize(base, {"full": base[1]}, dirs, sl)
    # the training noise: full trained again at seed 1 fell back to the base model's pass@1
    dirs["full.train1"] = dirs["full"]
    summary = lr.summarize(base, after, dirs, sl, noise_runs={"full.train1": base[0]}, train_seed=0)
    t = summary["noise"]["training"]
    assert (t["variant"], t["seeds"], t["pass@1"], t["train_seconds"]) == ("full", [0, 1], [0.5, 0.0], [42.0])
    assert summary["variants"]["full"]["verdict"] == "no change beyond noise"
    assert summary["variants"]["full"]["threshold"] == pytest.approx(0.5)
    lr.write_report(summary, md, png, CFG["learning_real"])
    text = md.read_text()
    assert "training noise: `full` trained at seeds [0, 1] gives held-out pass@1 0.500, 0.000 (spread 0.500)" in text
    assert "training-noise runs: training 42 + evaluation 1" in text
    for runs, seed, message in (
        ({"no_gate.train1": base[0]}, 0, "no_gate.train1: not a training-noise run"),
        ({"full.train0": base[0]}, 0, "full.train0: a noise run at training seed 0"),
        ({"full.train1": base[0], "baseline_binary.train1": base[0]}, 0, "several variants"),
    ):
        with pytest.raises(lr.LearningRealError, match=message):
            lr.summarize(base, after, dirs, sl, noise_runs=runs, train_seed=seed)


def test_a_run_without_training_steps_is_an_error(tmp_path):
    _metrics(tmp_path / "metrics.jsonl", [{"step": 0, "val/score": 0.1}])
    with pytest.raises(lr.LearningRealError, match="metrics.jsonl: no training step"):
        lr.step_curves(tmp_path / "metrics.jsonl")


def test_run_config_lays_the_settings_over_dhrcl_training():
    rc = lr.run_config(CFG, 200)
    t, s = rc["dhrcl"]["training"], CFG["learning_real"]["training"]
    assert (t["total_training_steps"], t["train_batch_size"], t["n"], t["lr"], t["max_prompt_length"]) == (
        s["steps"],
        s["train_batch_size"],
        s["n"],
        s["lr"],
        200,
    )
    assert t["ppo_mini_batch_size"] == s["train_batch_size"]  # one optimiser step per training step
    assert rc["dhrcl"]["curriculum"]["eval_every"] == CFG["learning_real"]["curriculum"]["eval_every"]
    assert CFG["dhrcl"]["training"]["total_training_steps"] != t["total_training_steps"]  # the input is not mutated


def test_the_target_is_planned_from_the_packaged_model_and_is_not_in_all(tmp_path):
    r = run_snakemake(
        "-n", "learning_real", "--config", f"results_dir={tmp_path}/res", f"logs_dir={tmp_path}/l", timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for rule, count in (
        ("packaged_model", 1),
        ("learning_real_data", 1),
        ("learning_real_train", 4),  # three variants and full.train1 (the training noise)
        ("learning_real_eval", 6),
        ("learning_real_report", 1),
    ):
        assert f"{rule:<21}" in r.stdout and any(
            line.split() == [rule, str(count)] for line in r.stdout.splitlines()
        ), rule
    r = run_snakemake("-n", "all", "--config", f"results_dir={tmp_path}/res", f"logs_dir={tmp_path}/l", timeout=600)
    assert r.returncode == 0 and "learning_real" not in r.stdout
