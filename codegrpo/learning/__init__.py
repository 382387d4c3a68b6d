"""Learning checks: does training move rewards the right way? (mechanism checks on toy data, docs/learning.md)

Two checks, both through the real verl 0.4.1 path of the pipeline (``codegrpo.verl.stages.run_grpo`` /
``codegrpo.verl.dhrcl.run_dhrcl``: Hydra-validated launch, Ray, FSDP2, HF rollout, the project reward registry
and verl's reward manager), on CPU with a tiny model:

* **direction**: GRPO on the toy reward ``toy_target_chars`` (:mod:`codegrpo.rewards.toy`) with each policy loss
  (verl's vanilla GRPO objective and the DHRCL token-weighted loss in its three weightings). A run *learns*
  when the mean reward of its last ``k`` steps exceeds the mean of its first ``k`` steps by more than
  ``margin``; the control run flips the advantage's sign (a test-only hook of :mod:`codegrpo.verl.losses`) and
  must *unlearn* (last below first by more than ``margin``).
* **curriculum**: a tiny model is first fine-tuned on a handful of KodCode reference solutions, then a DHRCL run
  on those problems advances its stages because the validation signal saturates or plateaus (the trend rule),
  never because a stage hit its step cap.

Nothing here is a paper result: the outputs go to ``results/learning/`` and a report page of their own
(:mod:`codegrpo.learning.report`). Modules: :mod:`~codegrpo.learning.direction` (toy data and the direction
checks), :mod:`~codegrpo.learning.curriculum` (the curriculum run), :mod:`~codegrpo.learning.report`.
"""

from codegrpo.learning.curriculum import (
    GATES,
    curriculum_config,
    curriculum_problems,
    curriculum_verdict,
    dhrcl_run_config,
    fit_solutions,
    prompt_tokens,
    run_curriculum_check,
    sft_response,
    stage_timeline,
    write_curriculum_dataset,
)
from codegrpo.learning.direction import (
    CHECKS,
    CONTROL,
    LOSSES,
    SCORE_KEY,
    LearningCheckError,
    direction_config,
    judge,
    loss_overrides,
    reward_curve,
    run_direction_check,
    short_grpo_config,
    toy_corpus,
    toy_rows,
    write_toy_dataset,
)
from codegrpo.learning.report import write_report

__all__ = [
    "CHECKS",
    "CONTROL",
    "GATES",
    "LOSSES",
    "SCORE_KEY",
    "LearningCheckError",
    "curriculum_config",
    "curriculum_problems",
    "curriculum_verdict",
    "dhrcl_run_config",
    "direction_config",
    "fit_solutions",
    "judge",
    "loss_overrides",
    "prompt_tokens",
    "reward_curve",
    "run_curriculum_check",
    "run_direction_check",
    "sft_response",
    "short_grpo_config",
    "stage_timeline",
    "toy_corpus",
    "toy_rows",
    "write_curriculum_dataset",
    "write_report",
    "write_toy_dataset",
]
