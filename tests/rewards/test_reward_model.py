"""The AceCoder baseline of DHRCL (``baseline_acecoder``, docs/dhrcl.md): a learned reward model with a scalar value
head, served next to the trainer, scores completions.

On CPU the reward model is a tiny one in AceCodeRM's layout (:func:`codegrpo.models.build_tiny_reward_model`),
built offline; it goes through the same scorer, server, client and reward code as the 7B checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codegrpo.config import load_config
from codegrpo.models import build_tiny_reward_model
from codegrpo.rewards import reward_model as rm

from tests.conftest import REPO_ROOT as REPO
from tests.verl import dhrcl_launch_at

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "Write a function add(a, b) returning the sum.",
    "def first(xs):\n    return xs[0]\n",
    "Return the first element of a list.",
] * 10


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory) -> Path:
    return build_tiny_reward_model(tmp_path_factory.mktemp("rm") / "rm", CORPUS, vocab_size=300, seed=3)


def _manual_score(path: Path, ids: list[int]) -> float:
    """AceCoder's own computation: Qwen2ForCausalLM's last hidden state (after the final norm) at the last token,
    through v_head.summary (its rm_utils.AceCodeRM.forward)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from codegrpo.models import model_init

    with model_init():
        model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    t = load_file(str(path / "model.safetensors"))
    with torch.no_grad():
        h = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0, -1]
        return float(h @ t["v_head.summary.weight"][0] + t["v_head.summary.bias"][0])


def test_scorer_follows_acecoders_convention(tiny_rm):
    scorer = rm.RewardModelScorer(tiny_rm, batch_size=3)
    pairs = [
        ("Write add.", "def add(a, b):\n    return a + b"),
        ("Write add.", "x"),
        ("Return the first element of a list, please.", "def first(xs):\n    return xs[0]"),
    ]
    batched = scorer.score(pairs)
    # right padding in a batch of different lengths: each score is the one of its chat alone
    assert batched == pytest.approx([scorer.score([p])[0] for p in pairs], abs=1e-5)
    assert len(set(round(s, 6) for s in batched)) == 3
    # the chat is [user: question, assistant: response] through the RM's template, scored at its last token
    ids = scorer.encode(*pairs[0])
    text = scorer.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>user\nWrite add.") and "<|im_start|>assistant\ndef add" in text
    assert text.endswith("<|im_end|>\n")
    assert batched[0] == pytest.approx(_manual_score(tiny_rm, ids), abs=1e-5)


def test_long_chats_keep_their_last_token(tiny_rm):
    scorer = rm.RewardModelScorer(tiny_rm, max_length=16)
    full = rm.RewardModelScorer(tiny_rm).encode("Write add. " * 20, "def add(a, b):\n    return a + b")
    ids = scorer.encode("Write add. " * 20, "def add(a, b):\n    return a + b")
    assert len(ids) == 16 and ids == full[-16:]


def test_checkpoint_without_the_head_is_refused(tiny_rm):
    with pytest.raises(rm.RewardModelError, match=r"v_head\.score\.weight.*v_head\.summary\.bias"):
        rm.RewardModelScorer(tiny_rm, value_head_prefix="v_head.score")
    with pytest.raises(rm.RewardModelError, match="neither a folder nor in the Hugging Face cache"):
        rm.resolve_checkpoint("no-such-org/no-such-rm")


def test_served_scores_reach_the_reward(tiny_rm, tmp_path, monkeypatch):
    """The scoring server started as a training run starts it, the reward's client, the kodcode batch scorer."""
    from codegrpo.rewards import compute_score_batch
    from codegrpo.rewards.dhrcl import RESULT_KEYS
    from codegrpo.runsettings import schema_defaults
    from codegrpo.services import reward_model_service

    section = {**schema_defaults("dhrcl", "reward_model"), "model": str(tiny_rm), "served_name": "tiny-rm"}
    monkeypatch.delenv("CODEGRPO_RUN_SETTINGS", raising=False)
    tests = "from solution import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    good, bad = "```python\ndef add(a, b):\n    return a + b\n```", "```python\ndef add(a, b):\n    return a - b\n```"
    info = {
        "test_code": tests,
        "reference_solution": "def add(a, b):\n    return a + b\n",
        "question": "Write add(a, b).",
    }
    with reward_model_service(section, log_path=tmp_path / "rm.log") as svc:
        client = rm.RewardModelClient(svc.endpoint["api_base"], "tiny-rm")
        direct = client.score([("Write add(a, b).", "def add(a, b):\n    return a + b")])
        out = compute_score_batch(
            ["kodcode"] * 2,
            [good, bad],
            [tests] * 2,
            [info, info],
            variant="reward_model",
            rm_api_base=svc.endpoint["api_base"],
            rm_model="tiny-rm",
        )
        with pytest.raises(rm.RewardModelError, match="not served here"):
            rm.RewardModelClient(svc.endpoint["api_base"], "other").score([("q", "r")])
    local = rm.RewardModelScorer(tiny_rm).score(
        [
            ("Write add(a, b).", "def add(a, b):\n    return a + b"),
            ("Write add(a, b).", "def add(a, b):\n    return a - b"),
        ]
    )
    assert direct[0] == pytest.approx(local[0], abs=1e-5)
    assert [o["score"] for o in out] == pytest.approx(local, abs=1e-5)  # the program, not the fenced text
    assert [o["rm_score"] for o in out] == [o["score"] for o in out]
    assert [o["r_pass"] for o in out] == [1.0, 0.0]  # the tests still run: logged, not rewarded
    assert all(tuple(o) == RESULT_KEYS for o in out)
    with pytest.raises(ValueError, match=r"extra_info\['question'\]"):
        compute_score_batch(
            ["kodcode"],
            [good],
            [tests],
            [{**info, "question": None}],
            variant="reward_model",
            rm_api_base="http://127.0.0.1:9/v1",
        )


def test_variant_needs_a_configured_checkpoint(tmp_path):
    from codegrpo.verl.dhrcl import dhrcl_settings

    cfg = load_config(REPO / "config.yaml", check_files=False)
    assert "baseline_acecoder" not in cfg["dhrcl"]["runs"]  # the default pipeline does not train it
    with pytest.raises(ValueError, match="dhrcl.reward_model.model is not set"):
        dhrcl_settings(cfg, "baseline_acecoder", tmp_path)
    cfg["dhrcl"]["reward_model"] = {**cfg["dhrcl"].get("reward_model", {}), "model": "TIGER-Lab/AceCodeRM-7B"}
    s = dhrcl_settings(cfg, "baseline_acecoder", tmp_path)
    assert s["reward_model"]["model"] == "TIGER-Lab/AceCodeRM-7B" and s["variant_def"]["token_weights"] == "none"
    assert s["scorer"]["rm_response"] == "program" and s["scorer"]["variant"] == "reward_model"
    assert "reward_model" not in dhrcl_settings(cfg, "baseline_pass_rate", tmp_path)


def test_tiny_reward_model_comes_from_the_workflow(tmp_path, snakemake_bin):
    """dhrcl.reward_model.model: tiny (the rehearsal's choice) is the folder rule tiny_reward_model builds; the run
    gets its path, never the word."""
    import subprocess

    import yaml

    from codegrpo.verl import dhrcl as vd

    cfg = load_config(REPO / "config.yaml", check_files=False)
    cfg["dhrcl"]["reward_model"] = {"model": "tiny"}
    assert vd.needs_tiny_reward_model(cfg["dhrcl"], "baseline_acecoder")
    assert not vd.needs_tiny_reward_model(cfg["dhrcl"], "full")
    with pytest.raises(ValueError, match="rule tiny_reward_model builds"):
        vd.dhrcl_settings(cfg, "baseline_acecoder", tmp_path)
    s = vd.dhrcl_settings(vd.with_reward_model(cfg, tmp_path / "rm"), "baseline_acecoder", tmp_path)
    assert s["reward_model"]["model"] == str((tmp_path / "rm").resolve())
    overlay = {
        "results_dir": str(tmp_path / "results"),
        "logs_dir": str(tmp_path / "logs"),
        "dhrcl": {"runs": ["baseline_acecoder", "full"], "reward_model": {"model": "tiny"}},
    }
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    out = subprocess.run(
        [snakemake_bin, "-n", "dhrcl", "--configfile", str(tmp_path / "overlay.yaml"), "--quiet", "rules"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    counts = {
        p[0]: int(p[1]) for p in (line.split() for line in out.stdout.splitlines()) if len(p) == 2 and p[1].isdigit()
    }
    assert counts.get("tiny_reward_model") == 1 and counts.get("dhrcl_train") == 2


def test_paper_config_plans_the_acecoder_baseline():
    from codegrpo import hub
    from codegrpo.verl.dhrcl import plan_runs

    paper = load_config(REPO / "config" / "paper.yaml", check_files=False)
    assert paper["dhrcl"]["reward_model"]["model"] == "TIGER-Lab/AceCodeRM-7B"
    runs = plan_runs(paper)
    assert {f"dhrcl-Qwen3-8B-baseline_acecoder-seed{s}" for s in (0, 1, 2)} <= set(runs)
    assert ("dhrcl.reward_model.model", "TIGER-Lab/AceCodeRM-7B") in hub.hub_refs(paper)["models"]


def test_reward_reads_the_runs_endpoint(tmp_path, monkeypatch):
    """In verl's reward process the client comes from the run's settings.json: served.reward_model (written by
    run_services) and settings.extra.reward_model; a dead server is an error naming it, never a score."""
    doc = {
        "fingerprint": "x",
        "settings": {"extra": {"reward_model": {"model": "m", "timeout_s": 5, "max_retries": 0, "request_batch": 3}}},
        "served": {"reward_model": {"api_base": "http://127.0.0.1:9/v1", "model": "served-m"}},
    }
    (tmp_path / "settings.json").write_text(json.dumps(doc))
    monkeypatch.setenv("CODEGRPO_RUN_SETTINGS", str(tmp_path / "settings.json"))
    client = rm.client_from_run()
    assert (client.api_base, client.model, client.max_retries, client.batch_size) == (
        "http://127.0.0.1:9/v1",
        "served-m",
        0,
        3,
    )
    with pytest.raises(rm.RewardModelError, match=r"http://127.0.0.1:9/v1.*failed 1 times"):
        client.score([("q", "r")])
    doc["served"] = {}
    (tmp_path / "settings.json").write_text(json.dumps(doc))
    with pytest.raises(rm.RewardModelError, match="served.reward_model"):
        rm.client_from_run()


def test_reward_model_runs_get_their_training_overrides(tmp_path):
    """dhrcl.reward_model.training reaches the verl launch of the reward-model runs only (paper config: a smaller
    rollout share beside the RM server)."""
    cfg = load_config(REPO / "config" / "paper.yaml")

    def launch(variant):
        return dhrcl_launch_at(
            cfg, variant, tmp_path, variant, init_model="Qwen/Qwen3-8B", seed=0, model="Qwen3-8B"
        ).validate()

    ace, full = launch("baseline_acecoder"), launch("full")
    assert ace.actor_rollout_ref.rollout.gpu_memory_utilization == 0.4
    assert ace.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu == 4
    assert full.actor_rollout_ref.rollout.gpu_memory_utilization == 0.6
    assert (
        "reward_kwargs" not in ace.custom_reward_function or "variant" not in ace.custom_reward_function.reward_kwargs
    )
    settings = json.loads((tmp_path / "baseline_acecoder" / "settings.json").read_text())["settings"]
    assert settings["extra"]["scorer"]["variant"] == "reward_model"
    assert settings["extra"]["reward_model"]["model"] == "TIGER-Lab/AceCodeRM-7B"
    cfg["dhrcl"]["reward_model"]["training"] = {"no_such_key": 1}
    with pytest.raises(ValueError, match="dhrcl.reward_model.training: unknown key"):
        launch("baseline_acecoder")


# ---------------------------------------------------------------------------------------------- slow
@pytest.mark.slow
def test_acecoder_baseline_trains_on_cpu(tiny_rm, tmp_path, shared_ray):
    """Two GRPO steps of dhrcl-baseline_acecoder-seed0 with a tiny policy and the tiny RM: the run starts the RM
    server, the reward scores every rollout through it, and the run folder is every DHRCL run's."""
    from codegrpo import learning
    from codegrpo.models import build_tiny_model, corpus_from_parquet

    cfg = load_config(REPO / "config.yaml")
    problems = learning.curriculum_problems(cfg["data"]["kodcode"]["paths"], 2)
    data = learning.write_curriculum_dataset(problems, tmp_path / "data")
    build_tiny_model(tmp_path / "tiny", corpus_from_parquet([data["sft"], data["rl_train"]]), vocab_size=512)
    max_prompt = learning.prompt_tokens(tmp_path / "tiny", [p["prompt"] for p in problems]) + 8
    run_cfg = learning.curriculum_config(cfg, max_prompt)
    d = run_cfg["dhrcl"]
    d["training"].update(
        total_training_steps=2,
        total_epochs=2,
        save_freq=2,
        n=2,
        max_response_length=24,
        train_batch_size=2,
        ppo_mini_batch_size=2,
        ppo_micro_batch_size_per_gpu=2,
        ref_log_prob_micro_batch_size_per_gpu=2,
        rollout_log_prob_micro_batch_size_per_gpu=2,
    )
    d["reward_model"] = {"model": str(tiny_rm), "batch_size": 4}
    run_dir = tmp_path / "runs" / "dhrcl-baseline_acecoder-seed0"
    done = shared_ray.run_dhrcl(run_cfg, "baseline_acecoder", data, tmp_path / "tiny", run_dir)
    for name in (
        "config.json",
        "settings.json",
        "curriculum.json",
        "train.log",
        "metrics.jsonl",
        "done.json",
        "hf/config.json",
        "reward_model_server.log",
    ):
        assert (run_dir / name).is_file(), name
    assert done["variant"] == "baseline_acecoder" and done["transitions"] == []
    settings = json.loads((run_dir / "settings.json").read_text())
    assert settings["settings"]["extra"]["reward_model"]["model"] == str(tiny_rm)
    assert settings["served"]["reward_model"]["api_base"].startswith("http://127.0.0.1:")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if isinstance(r.get("step"), int) and r["step"] >= 1 and "reward/score/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # the reward was the RM's score, and the test components were logged beside it
        assert r["reward/score/mean"] == pytest.approx(r["reward/rm_score/mean"], abs=1e-6)
        assert r["reward/rm_score/mean"] != 0.0 and "reward/r_pass/mean" in r
    assert "loaded reward model" in (run_dir / "reward_model_server.log").read_text()
