"""A toy reward for mechanism checks (docs/learning.md): never used by the paper stages.

``toy_target_chars``: the share of the completion's non-space characters that belong to a target set (the
ground truth string of the row; by default the ten digits). A random tiny model starts near the set's share
of its vocabulary and the optimum (a completion made only of target characters) is reachable, so the reward is
dense and has room to rise: the learning checks train on it through the same verl path, reward table and
reward manager as the real rewards, and check that each policy loss moves it the right way.
"""

from __future__ import annotations

DEFAULT_TARGET = "0123456789"
KEYS = ("target_share", "length")  # the components of score()


def target_share(text: str, target: str = DEFAULT_TARGET) -> float:
    """Share of non-whitespace characters of ``text`` that are in ``target`` (0.0 for an empty text)."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    wanted = set(target or DEFAULT_TARGET)
    return sum(c in wanted for c in chars) / len(chars)


def score(solution_str, ground_truth, extra_info=None, **_kwargs) -> dict:
    """Scorer of ``toy_target_chars``: any non-string completion scores 0; a missing or non-string target means the digits."""
    text = solution_str if isinstance(solution_str, str) else ""
    target = ground_truth if isinstance(ground_truth, str) and ground_truth else DEFAULT_TARGET
    share = target_share(text, target)
    return {"score": share, "target_share": share, "length": float(len(text))}
