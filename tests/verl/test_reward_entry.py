"""The reward file through verl 0.4.1's own reward managers (load_reward_manager + compute_reward), on CPU."""

from __future__ import annotations

from tests.conftest import REPO_ROOT
import json
import os

import numpy as np
import pytest

from codegrpo.rewards import compute_score_batch
from codegrpo.rewards.compile import gcc_major

REWARD_ENTRY = os.path.join(str(REPO_ROOT), "codegrpo", "verl", "reward_entry.py")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(gcc_major() != 12, reason="pinned compile outcomes need gcc 12")]


@pytest.fixture(scope="module")
def rows(data_dir):
    with open(data_dir / "sk2decompile" / "sk2decompile-rl-examples.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def tokenizer(rows):
    from codegrpo.models import train_tokenizer

    texts = [r["prompt"][0]["content"] for r in rows] + [r["reward_model"]["ground_truth"] for r in rows]
    return train_tokenizer(texts, vocab_size=600)


def build_batch(tok, prompts, responses, data_sources, gts, infos):
    """A rollout-shaped DataProto: left-padded prompts, right-padded responses."""
    import torch
    from tensordict import TensorDict
    from verl import DataProto

    pad = tok.pad_token_id
    p_ids = [tok(p)["input_ids"] for p in prompts]
    r_ids = [tok(r)["input_ids"] or [pad] for r in responses]  # an empty answer still has one (pad) token
    P, R = max(map(len, p_ids)), max(map(len, r_ids))
    rows_p, rows_r, mask = [], [], []
    for pi, ri, resp in zip(p_ids, r_ids, responses):
        n_valid = len(ri) if resp else 1
        rows_p.append([pad] * (P - len(pi)) + pi)
        rows_r.append(ri + [pad] * (R - len(ri)))
        mask.append([0] * (P - len(pi)) + [1] * len(pi) + [1] * n_valid + [0] * (R - n_valid))
    prompts_t, resp_t = torch.tensor(rows_p), torch.tensor(rows_r)
    td = TensorDict(
        {
            "prompts": prompts_t,
            "responses": resp_t,
            "input_ids": torch.cat([prompts_t, resp_t], 1),
            "attention_mask": torch.tensor(mask),
        },
        batch_size=len(prompts),
    )
    nt = {
        "data_source": np.array(data_sources, dtype=object),
        "reward_model": np.array([{"style": "rule", "ground_truth": g} for g in gts], dtype=object),
        "extra_info": np.array(infos, dtype=object),
        "uid": np.array([f"u{i // 2}" for i in range(len(prompts))], dtype=object),
    }
    return DataProto(batch=td, non_tensor_batch=nt)


def _reward_fn(tok, manager, name, extra_overrides=()):
    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.reward import load_reward_manager

    cfg_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        cfg = compose(
            "ppo_trainer",
            overrides=[
                f"custom_reward_function.path={os.path.abspath(REWARD_ENTRY)}",
                f"custom_reward_function.name={name}",
                f"reward_model.reward_manager={manager}",
                *extra_overrides,
            ],
        )
    return load_reward_manager(cfg, tok, num_examine=0)


def _samples(rows):
    by_idx = {r["extra_info"]["index"]: r for r in rows}
    picks = [by_idx[5723], by_idx[87208], rows[0], rows[1]]
    out = []
    for r in picks:
        gt = r["reward_model"]["ground_truth"]
        for resp in (gt, gt.replace(";", "", 1), ""):
            out.append((r["prompt"][0]["content"], resp, r["data_source"], gt, r["extra_info"]))
    return out


@pytest.mark.parametrize("manager,name", [("naive", "compute_score"), ("batch", "compute_score_batch")])
def test_structure_reward_through_verl_managers(tokenizer, rows, manager, name):
    from verl.trainer.ppo.reward import compute_reward

    samples = _samples(rows)
    prompts, resps, ds, gts, infos = map(list, zip(*samples))
    # the tokenizer round-trips the text, so the managers see exactly these responses
    assert all(tokenizer.decode(tokenizer(r)["input_ids"], skip_special_tokens=True) == r for r in resps)
    data = build_batch(tokenizer, prompts, resps, ds, gts, infos)
    reward_fn = _reward_fn(tokenizer, manager, name)
    reward_tensor, extra = compute_reward(data, reward_fn)
    expected = compute_score_batch(ds, resps, gts, infos)
    sums = reward_tensor.sum(-1).tolist()
    assert sums == pytest.approx([e["score"] for e in expected])
    assert set(extra) == {"score", "compile", "type_jaccard"}
    assert extra["compile"] == [e["compile"] for e in expected]
    # the pinned reference values: gt → 2.0 (index 5723), header null → 0.0, empty answer → 1.0
    assert sums[0] == 2.0 and sums[3] == 0.0 and sums[2] == 1.0
    # the score sits on the last valid response token
    last = data.batch["attention_mask"][:, data.batch["prompts"].shape[-1] :].sum(-1) - 1
    for i, j in enumerate(last.tolist()):
        assert reward_tensor[i, j].item() == pytest.approx(sums[i])


def test_mixed_batch_with_identifier_reward(tokenizer, rows):
    """Batch manager, three data sources in one batch, the identifier reward on the local backend via reward_kwargs."""
    from verl.trainer.ppo.reward import compute_reward

    samples = _samples(rows)[:6]
    prompts, resps, ds, gts, infos = map(list, zip(*samples))
    ds = [
        "sk2decompile_structure",
        "sk2decompile_identifier",
        "sk2decompile_structure_sim",
        "sk2decompile_identifier",
        "llm4decompile_exe",
        "sk2decompile_identifier",
    ]
    data = build_batch(tokenizer, prompts, resps, ds, gts, infos)
    reward_fn = _reward_fn(
        tokenizer, "batch", "compute_score_batch", ["+custom_reward_function.reward_kwargs.embedding.backend=local"]
    )
    reward_tensor, extra = compute_reward(data, reward_fn)
    expected = compute_score_batch(ds, resps, gts, infos, embedding={"backend": "local"})
    assert reward_tensor.sum(-1).tolist() == pytest.approx([e["score"] for e in expected], abs=1e-6)
    assert set(extra) == {"score", "compile", "type_jaccard", "token_jaccard", "cosine", "embedded"}
    assert all(len(v) == 6 for v in extra.values())
    # identifier rows 1 and 3 have answers with identifiers, row 5 is empty (no request, 0.0)
    assert extra["embedded"] == [0.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    assert reward_tensor.sum(-1)[3].item() == pytest.approx(1.0, abs=1e-5)  # answer == reference: cos² = 1
