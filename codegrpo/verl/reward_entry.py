"""The reward file verl loads (``custom_reward_function.path``), by file path with ``spec_from_file_location``.

It only delegates to the project registry (:mod:`codegrpo.rewards`), which must be importable where verl runs
the reward (the TaskRunner process):

* ``compute_score`` — for ``reward_model.reward_manager=naive`` (and ``dapo``): one sample per call;
* ``compute_score_batch`` — for ``reward_model.reward_manager=batch``: the whole step's batch in one call, so the
  compile engine dedupes/parallelises it and the identifier reward embeds it in chunked requests.

Both return dicts with ``"score"`` and the data source's component keys (verl logs them as reward extra info).
``+custom_reward_function.reward_kwargs.<k>=<v>`` arrive as keyword arguments and are handed to the scorers
(e.g. ``embedding`` = a mapping of embedding settings, see ``docs/rewards.md``).
"""

from codegrpo.rewards import compute_score as _compute_score
from codegrpo.rewards import compute_score_batch as _compute_score_batch


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return _compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
    return _compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs)
