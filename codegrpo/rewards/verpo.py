"""VeRPO's verifiable dense reward (arXiv 2601.03525) as a DHRCL baseline (variant ``baseline_verpo``).

Per GRPO group (the samples of one prompt; a batch holds several groups), with ``pass_{i,j}`` in {0, 1} whether
sample ``i`` passes test ``j`` of the problem (the KodCode sandbox's per-test outcomes):

* ``rho_j``: the group's pass rate of test ``j`` (share of the group's samples that pass it);
* difficulty weight ``exp(-alpha * rho_j)``: a test everyone passes weighs less than a rare one;
* density correction: divided by a Gaussian kernel density estimate of the group's test pass rates at ``rho_j``,
  ``p(rho_j) = 1/m * sum_k N(rho_j; rho_k, h^2)``, so that many tests of the same pass rate (near-duplicates)
  share their weight instead of dominating;
* ``w_j`` = that ratio, normalised to sum 1 over the problem's tests (reconstructed), so the dense reward
  ``r_dense_i = sum_j w_j pass_{i,j}`` lies in [0, 1];
* the binary trajectory reward ``r_binary_i`` (all tests pass) and the dense turn-level term fuse into the sample's
  score ``r_binary_i + beta * r_dense_i``.

With one turn per trajectory (KodCode is single-turn) and GRPO's group-mean baseline *without* std normalisation
(``algorithm.norm_adv_by_std_in_grpo=false``, which the variant sets), verl's advantage of that score is exactly
VeRPO's ``A = A_traj + beta * A_turn`` with ``A_traj = r_binary - mean(r_binary)`` and
``A_turn = r_dense - mean(r_dense)``: the group mean is linear. :func:`advantages` computes it directly (tests).

Constants the paper does not state are config keys (``dhrcl.reward.verpo``, docs/dhrcl.md, reconstructed):
``alpha``, ``beta``, ``kde_bandwidth`` (a number, or ``scott`` for Scott's rule with ``kde_min_bandwidth`` as
floor) and ``normalise_weights``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Sequence


@dataclass
class VerpoConfig:
    alpha: float = 1.0  # (reconstructed) difficulty sharpness of exp(-alpha * rho)
    beta: float = 0.5  # (reconstructed) weight of the dense turn-level term
    kde_bandwidth: float | str = 0.1  # (reconstructed) Gaussian KDE bandwidth on pass rates, or "scott"
    kde_min_bandwidth: float = 0.05  # (reconstructed) floor of Scott's rule (equal pass rates: std 0)
    normalise_weights: bool = True  # (reconstructed) w_j sum to 1 over the problem's tests

    def validate(self) -> "VerpoConfig":
        self.alpha, self.beta = float(self.alpha), float(self.beta)
        self.kde_min_bandwidth = float(self.kde_min_bandwidth)
        if self.kde_bandwidth != "scott":
            try:
                self.kde_bandwidth = float(self.kde_bandwidth)
            except (TypeError, ValueError):
                raise ValueError(
                    f"verpo kde_bandwidth must be a positive number or 'scott', got {self.kde_bandwidth!r}"
                ) from None
            if not self.kde_bandwidth > 0:
                raise ValueError(f"verpo kde_bandwidth must be > 0, got {self.kde_bandwidth}")
        if not self.kde_min_bandwidth > 0:
            raise ValueError(f"verpo kde_min_bandwidth must be > 0, got {self.kde_min_bandwidth}")
        if self.alpha < 0 or self.beta < 0:
            raise ValueError(f"verpo alpha and beta must be >= 0, got alpha={self.alpha}, beta={self.beta}")
        self.normalise_weights = bool(self.normalise_weights)
        return self


def bandwidth(rho: Sequence[float], cfg: VerpoConfig) -> float:
    """The KDE bandwidth: the configured number, or Scott's rule ``1.06 * std * m^(-1/5)`` floored."""
    if cfg.kde_bandwidth != "scott":
        return float(cfg.kde_bandwidth)
    m = len(rho)
    if m < 2:
        return cfg.kde_min_bandwidth
    mean = sum(rho) / m
    std = math.sqrt(sum((r - mean) ** 2 for r in rho) / (m - 1))
    return max(1.06 * std * m**-0.2, cfg.kde_min_bandwidth)


def kde_density(rho: Sequence[float], h: float) -> list[float]:
    """Gaussian KDE of the values ``rho`` evaluated at each of them: ``1/m sum_k N(rho_j; rho_k, h^2)``."""
    m = len(rho)
    norm = 1.0 / (m * h * math.sqrt(2 * math.pi))
    return [norm * sum(math.exp(-0.5 * ((rj - rk) / h) ** 2) for rk in rho) for rj in rho]


def test_weights(rho: Sequence[float], cfg: VerpoConfig) -> list[float]:
    """``w_j = exp(-alpha rho_j) / p(rho_j)`` (normalised to sum 1 when ``normalise_weights``)."""
    if not rho:
        return []
    dens = kde_density(rho, bandwidth(rho, cfg))
    w = [math.exp(-cfg.alpha * r) / d for r, d in zip(rho, dens)]
    if cfg.normalise_weights:
        total = sum(w)
        w = [x / total for x in w]
    return w


def pass_matrix(outcomes: Sequence[Sequence[tuple[str, bool]]]) -> tuple[list[str], list[list[int]]]:
    """The group's tests (union of the samples' collected test ids, first-seen order) and the 0/1 matrix
    ``[sample][test]``; a test a sample did not report (collection error, crash, guard) counts as failed."""
    tests: dict[str, int] = {}
    for outs in outcomes:
        for nid, _ok in outs:
            tests.setdefault(nid, len(tests))
    mat = []
    for outs in outcomes:
        row = [0] * len(tests)
        for nid, ok in outs:
            if ok:
                row[tests[nid]] = 1
        mat.append(row)
    return list(tests), mat


def pass_rates(mat: Sequence[Sequence[int]]) -> list[float]:
    n = len(mat)
    if not n:
        return []
    return [sum(row[j] for row in mat) / n for j in range(len(mat[0]))]


def group_rewards(
    outcomes: Sequence[Sequence[tuple[str, bool]]], binary: Sequence[float], cfg: VerpoConfig
) -> list[dict[str, float]]:
    """One group's samples: ``r_dense``, ``r_binary`` and the fused ``score = r_binary + beta * r_dense``."""
    _tests, mat = pass_matrix(outcomes)
    w = test_weights(pass_rates(mat), cfg)
    out = []
    for row, b in zip(mat, binary):
        dense = sum(wj * pj for wj, pj in zip(w, row))
        out.append({"r_dense": dense, "r_binary": float(b), "score": float(b) + cfg.beta * dense})
    return out


def groups(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    """Sample indices by group key, in first-seen order."""
    out: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return out


def advantages(binary: Sequence[float], dense: Sequence[float], beta: float) -> list[float]:
    """VeRPO's advantages of one group: ``(b - mean b) + beta * (d - mean d)``, no std normalisation."""
    n = len(binary)
    mb, md = sum(binary) / n, sum(dense) / n
    return [(b - mb) + beta * (d - md) for b, d in zip(binary, dense)]
