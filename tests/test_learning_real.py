"""The real-model learning measurement (codegrpo/learning_real.py, target learning_real): the slice, the run names,
the runs' settings and the plan (the noise, the verdict and the report: tests/test_learning_real_report.py). The slow end of it (evaluation of the real model) is in
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


def test_run_names_add_the_training_noise_runs():
    lrc = CFG["learning_real"]
    assert lr.run_names(lrc) == [*lrc["variants"], "full.train1"]  # the default: full trained again at seed 1
    assert lr.parse_run("full.train1") == ("full", 1) and lr.parse_run("baseline_binary") == ("baseline_binary", None)
    assert lr.run_names({**lrc, "training": {**lrc["training"], "noise_seeds": []}}) == lrc["variants"]
    bad = {**lrc, "training": {**lrc["training"], "noise_variant": "no_gate"}}
    with pytest.raises(lr.LearningRealError, match="learning_real.training.noise_variant: 'no_gate'"):
        lr.run_names(bad)


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


def test_eval_dtype_follows_the_training_rollouts_precision(monkeypatch):
    """``learning_real.eval.dtype: auto`` samples in the precision CPU mode's rollouts compute in
    (``cpu_precision``); an explicit dtype is kept."""
    from codegrpo.verl import cpu

    cfg = load_config(REPO_ROOT / "config.yaml", check_files=False)
    assert cfg["learning_real"]["eval"]["dtype"] == "auto" and cfg["cpu_precision"] == "auto"
    for native, want in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(cpu, "native_bf16", lambda native=native: native)
        assert lr.eval_dtype(cfg) == want
    for precision, want in (("bf16", "bfloat16"), ("fp32", "float32")):
        assert lr.eval_dtype({**cfg, "cpu_precision": precision}) == want
    cfg["learning_real"]["eval"]["dtype"] = "float32"
    monkeypatch.setattr(cpu, "native_bf16", lambda: True)
    assert lr.eval_dtype(cfg) == "float32"
