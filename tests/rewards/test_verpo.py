"""VeRPO's reward (baseline_verpo) on hand-checked small groups, through the real sandbox, and as a DHRCL variant."""

from __future__ import annotations

import json
import math

import pytest

from codegrpo.rewards import verpo as vp
from tests.verl import dhrcl_launch_at

H = 0.1  # the paper config's (reconstructed) bandwidth


def _phi(x, h=H):
    return math.exp(-0.5 * (x / h) ** 2) / (h * math.sqrt(2 * math.pi))


def _outs(rows, names=("a", "b", "c")):
    return [tuple((n, bool(v)) for n, v in zip(names, row)) for row in rows]


def test_a_test_everyone_passes_weighs_less_than_a_rare_one():
    # 4 samples, test a passed by all (rho 1), test b by one (rho 0.25); far apart, so the densities are equal
    cfg = vp.VerpoConfig(alpha=1.0, beta=0.5, kde_bandwidth=H).validate()
    _, mat = vp.pass_matrix(_outs([(1, 1), (1, 0), (1, 0), (1, 0)], ("a", "b")))
    rho = vp.pass_rates(mat)
    assert rho == [1.0, 0.25]
    dens = vp.kde_density(rho, H)
    assert dens[0] == pytest.approx((_phi(0) + _phi(0.75)) / 2) and dens[0] == pytest.approx(dens[1])
    w = vp.test_weights(rho, cfg)
    assert w[1] > w[0] and sum(w) == pytest.approx(1.0)
    assert w[0] / w[1] == pytest.approx(math.exp(-0.75))  # exp(-alpha * 1) / exp(-alpha * 0.25)
    # alpha = 0: no difficulty preference, equal weights
    assert vp.test_weights(rho, vp.VerpoConfig(alpha=0.0).validate()) == pytest.approx([0.5, 0.5])


def test_density_correction_shares_weight_among_tests_of_one_pass_rate():
    # tests a and b both at rho 0.5, test c at rho 0: with alpha = 0 only the density acts
    cfg = vp.VerpoConfig(alpha=0.0, kde_bandwidth=H).validate()
    rho = [0.5, 0.5, 0.0]
    p_dup = (2 * _phi(0) + _phi(0.5)) / 3
    p_one = (_phi(0) + 2 * _phi(0.5)) / 3
    assert vp.kde_density(rho, H) == pytest.approx([p_dup, p_dup, p_one])
    raw = [1 / p_dup, 1 / p_dup, 1 / p_one]
    assert vp.test_weights(rho, cfg) == pytest.approx([r / sum(raw) for r in raw])
    assert vp.test_weights(rho, cfg) == pytest.approx([0.25, 0.25, 0.5], abs=1e-4)  # the pair shares one share
    # unnormalised: the raw ratio exp(-alpha rho) / p(rho)
    cfg2 = vp.VerpoConfig(alpha=2.0, kde_bandwidth=H, normalise_weights=False).validate()
    assert vp.test_weights(rho, cfg2) == pytest.approx([math.exp(-1) / p_dup, math.exp(-1) / p_dup, 1 / p_one])


def test_scott_bandwidth_and_its_floor():
    cfg = vp.VerpoConfig(kde_bandwidth="scott", kde_min_bandwidth=0.05).validate()
    assert vp.bandwidth([0.5, 0.5, 0.5], cfg) == 0.05  # std 0: the floor
    rho = [0.0, 0.5, 1.0]
    assert vp.bandwidth(rho, cfg) == pytest.approx(1.06 * 0.5 * 3**-0.2)
    with pytest.raises(ValueError, match="kde_bandwidth"):
        vp.VerpoConfig(kde_bandwidth="silverman").validate()
    with pytest.raises(ValueError, match="> 0"):
        vp.VerpoConfig(kde_bandwidth=0).validate()


def test_binary_term_and_fused_score():
    cfg = vp.VerpoConfig(alpha=1.0, beta=0.5, kde_bandwidth=H).validate()
    rows = [(1, 1, 1), (1, 1, 0), (1, 0, 0), (0, 0, 0)]
    res = vp.group_rewards(_outs(rows), [1.0, 0.0, 0.0, 0.0], cfg)
    w = vp.test_weights([0.75, 0.5, 0.25], cfg)
    assert [r["r_binary"] for r in res] == [1.0, 0.0, 0.0, 0.0]
    assert res[0]["r_dense"] == pytest.approx(1.0) and res[3]["r_dense"] == 0.0
    assert res[1]["r_dense"] == pytest.approx(w[0] + w[1]) and res[2]["r_dense"] == pytest.approx(w[0])
    for r in res:
        assert r["score"] == pytest.approx(r["r_binary"] + 0.5 * r["r_dense"])
    assert res[0]["score"] == pytest.approx(1.5)
    # the rarer the test a sample adds, the more it gains: passing c (rho .25) is worth more than a (rho .75)
    assert w[2] > w[1] > w[0]


def test_missing_outcomes_count_as_failed_and_an_empty_group_scores_binary_only():
    cfg = vp.VerpoConfig().validate()
    tests, mat = vp.pass_matrix([(("t1", True), ("t2", True)), ()])  # the second sample collected nothing
    assert tests == ["t1", "t2"] and mat == [[1, 1], [0, 0]]
    res = vp.group_rewards([(), ()], [0.0, 0.0], cfg)
    assert [r["score"] for r in res] == [0.0, 0.0]


def test_advantage_is_traj_plus_beta_turn_without_std_normalisation():
    """verl's GRPO advantage of the fused score, with norm_adv_by_std_in_grpo=false (what the variant sets), is
    VeRPO's A = A_traj + beta * A_turn; with std normalisation it is not."""
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    cfg = vp.VerpoConfig(alpha=1.0, beta=0.5, kde_bandwidth=H).validate()
    groups = {"g0": [(1, 1, 1), (1, 1, 0), (1, 0, 0), (0, 0, 0)], "g1": [(1, 0, 1), (1, 0, 0), (1, 0, 1), (1, 0, 0)]}
    scores, expected, uids = [], [], []
    for uid, rows in groups.items():
        binary = [float(all(r)) for r in rows]
        res = vp.group_rewards(_outs(rows), binary, cfg)
        scores += [r["score"] for r in res]
        expected += vp.advantages(binary, [r["r_dense"] for r in res], cfg.beta)
        uids += [uid] * len(rows)
    length = 3
    rewards = torch.zeros(len(scores), length)
    rewards[:, -1] = torch.tensor(scores)
    mask = torch.ones(len(scores), length)
    adv, _ = compute_grpo_outcome_advantage(rewards, mask, np.array(uids, dtype=object), norm_adv_by_std_in_grpo=False)
    assert adv[:, 0].tolist() == pytest.approx(expected, abs=1e-6)
    assert adv[:, 0].tolist() == pytest.approx(adv[:, -1].tolist())  # the same advantage on every token
    # by hand for g1 (nobody passes all tests): A_traj = 0, A = beta * (d - mean d)
    d1 = [vp.group_rewards(_outs(groups["g1"]), [0.0] * 4, cfg)[i]["r_dense"] for i in range(4)]
    assert expected[4:] == pytest.approx([0.5 * (x - sum(d1) / 4) for x in d1])
    normed, _ = compute_grpo_outcome_advantage(
        rewards, mask, np.array(uids, dtype=object), norm_adv_by_std_in_grpo=True
    )
    assert normed[:, 0].tolist() != pytest.approx(expected, abs=1e-3)


# ---- through the reward entry and the real sandbox --------------------------------------------------------
@pytest.fixture(scope="module")
def record(data_dir):
    recs = json.loads((data_dir / "kodcode" / "KodCode_algorithm_100_1741212598.json").read_text())
    return next(r for r in recs if r["question_id"] == "Algorithm_00000003_I")


def test_score_batch_groups_by_prompt_with_real_per_test_outcomes(record, data_dir):
    from codegrpo.rewards import dhrcl as d
    from codegrpo.contracts import extract_code
    from codegrpo.sandbox import Sandbox, SandboxLimits

    ref, tests = record["solution"], record["test_code"]
    partial = "```python\ndef interleave_strings(a, b):\n    return a + b\n```"
    sols = [ref, partial, "x = (", ref, ref]
    extra0 = {"reference_solution": ref, "test_code": tests, "index": 0, "split": "train"}
    extra1 = {**extra0, "index": 1}
    extras = [extra0, extra0, extra0, extra1, extra1]
    with Sandbox(SandboxLimits(wall_s=30, cpu_s=30), workers=2) as sb:
        res = sb.run_tests(extract_code(partial), tests)
        out = d.score_batch(
            sols,
            [tests] * 5,
            extras,
            sandbox=sb,
            variant="verpo",
            verpo_alpha=1.0,
            verpo_beta=0.5,
            verpo_kde_bandwidth=H,
        )
        other = d.score_batch(sols, [tests] * 5, extras, sandbox=sb, variant="binary", verpo_kde_bandwidth=H)
    # the sandbox reports every collected test with its outcome
    assert len(res.outcomes) == res.total and sum(ok for _, ok in res.outcomes) == res.passed
    assert 0 < res.passed < res.total
    assert all(tuple(o) == d.RESULT_KEYS for o in out)
    g0 = vp.group_rewards(
        [tuple((n, True) for n, _ in res.outcomes), res.outcomes, ()],
        [1.0, 0.0, 0.0],
        vp.VerpoConfig(kde_bandwidth=H).validate(),
    )
    assert [o["score"] for o in out[:3]] == pytest.approx([r["score"] for r in g0])
    assert out[0]["score"] == pytest.approx(1.5) and 0 < out[1]["r_dense"] < out[1]["r_pass"] + 1
    assert out[2]["score"] == 0.0
    # group 1 (another prompt row): both samples pass every test, dense 1 each
    assert [o["score"] for o in out[3:]] == pytest.approx([1.5, 1.5])
    # another variant reports the same dense term (same outcomes, same groups) but does not score with it
    assert [o["r_dense"] for o in other] == pytest.approx([o["r_dense"] for o in out])
    assert [o["score"] for o in other] == [1.0, 0.0, 0.0, 1.0, 1.0]


def test_config_rejects_unknown_or_bad_verpo_settings():
    from codegrpo.rewards import dhrcl as d

    with pytest.raises(ValueError, match="unknown VeRPO"):
        d.DHRCLRewardConfig.from_kwargs({"verpo": {"gamma": 1}})
    with pytest.raises(ValueError, match="alpha and beta"):
        d.DHRCLRewardConfig.from_kwargs({"verpo_beta": -1})
    assert d.DHRCLRewardConfig.from_kwargs({"verpo_kde_bandwidth": "scott"}).verpo_config().kde_bandwidth == "scott"


# ---- the variant --------------------------------------------------------------------------------------------
def test_variant_sets_plain_grpo_loss_and_no_std_normalisation(repo_root, tmp_path):
    from codegrpo.config import load_config
    from codegrpo.verl import dhrcl as vd

    v = vd.resolve_variant({}, "baseline_verpo")
    assert (v["reward"], v["token_weights"], v["curriculum"], v["norm_adv_by_std"]) == ("verpo", "none", "none", False)
    assert vd.resolve_variant({}, "baseline_binary")["norm_adv_by_std"] is True
    paper = load_config(repo_root / "config" / "paper.yaml")
    assert "baseline_verpo" in paper["dhrcl"]["runs"]
    assert "baseline_verpo" not in load_config(repo_root / "config.yaml")["dhrcl"]["runs"]
    cfg = load_config(repo_root / "config.yaml")
    launch = dhrcl_launch_at(cfg, "baseline_verpo", tmp_path)
    hc = launch.validate()
    assert hc.algorithm.norm_adv_by_std_in_grpo is False and hc.algorithm.adv_estimator == "grpo"
    assert hc.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"
    scorer = json.loads((tmp_path / "dhrcl-baseline_verpo" / "settings.json").read_text())["settings"]["extra"][
        "scorer"
    ]
    assert scorer["variant"] == "verpo" and scorer["verpo"]["alpha"] == 1.0 and scorer["verpo"]["beta"] == 0.5
    assert scorer["verpo"]["kde_bandwidth"] == 0.1
    full = dhrcl_launch_at(cfg, "full", tmp_path).validate()
    assert full.algorithm.norm_adv_by_std_in_grpo is True
