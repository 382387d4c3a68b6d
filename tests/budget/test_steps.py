"""verl's step arithmetic (codegrpo.budget.steps) against torch's data loaders and verl's loop, and the epochs the
launch and the trainer give verl."""

import pytest

from codegrpo import budget


@pytest.mark.parametrize("rows,bs", [(10, 4), (8, 4), (3, 4), (9000, 128), (129, 128)])
def test_rl_batches_per_epoch_is_torchs_drop_last_loader(rows, bs):
    from torch.utils.data import DataLoader

    assert budget.rl_batches_per_epoch(rows, bs) == len(DataLoader(range(rows), batch_size=bs, drop_last=True))


@pytest.mark.parametrize("rows,bs,world", [(10, 4, 2), (9, 4, 2), (7, 8, 4), (1000, 512, 8), (99000, 512, 8)])
def test_sft_batches_per_epoch_is_verls_distributed_loader(rows, bs, world):
    """verl's SFT trainer: DistributedSampler(drop_last=True) per rank, batches of bs // world, drop_last."""
    from torch.utils.data import DataLoader, DistributedSampler

    lengths = {
        len(
            DataLoader(
                range(rows),
                batch_size=bs // world,
                drop_last=True,
                sampler=DistributedSampler(range(rows), num_replicas=world, rank=r, drop_last=True),
            )
        )
        for r in range(world)
    }
    assert lengths == {budget.sft_batches_per_epoch(rows, bs, world)}


def test_step_arithmetic_by_hand():
    s = {"train_batch_size": 4, "total_epochs": 1, "total_training_steps": 5}
    plan = budget.step_plan(s, 10, kind="rl")  # 10 // 4 = 2 batches per epoch; ceil(5 / 2) = 3 epochs
    assert (plan["batches_per_epoch"], plan["epochs"], plan["total_steps"], plan["reachable"]) == (2, 3, 5, True)
    plan = budget.step_plan({**s, "total_training_steps": None, "total_epochs": 2}, 10, kind="rl")
    assert (plan["epochs"], plan["total_steps"]) == (2, 4)
    plan = budget.step_plan({**s, "total_epochs": 7}, 10, kind="rl")  # never fewer epochs than configured
    assert plan["epochs"] == 7 and plan["total_steps"] == 5
    plan = budget.step_plan(s, 3, kind="rl")
    assert plan["batches_per_epoch"] == 0 and plan["reachable"] is False
    assert budget.saves(500, 25) == 20 and budget.saves(501, 25) == 21 and budget.saves(4, 2) == 2


def test_verl_loop_reaches_the_step_budget_with_the_derived_epochs():
    """verl 0.4.1's fit loop, reduced to its step counting: ``for epoch in range(total_epochs): for batch in
    loader: is_last_step = step >= total; ...; if is_last_step: return; step += 1``."""
    from torch.utils.data import DataLoader

    def last_step(rows, bs, epochs, total):
        step = 1
        for _ in range(epochs):
            for _ in DataLoader(range(rows), batch_size=bs, drop_last=True):
                if step >= total:
                    return step, True
                step += 1
        return step - 1, False

    s = {"train_batch_size": 128, "total_epochs": 1, "total_training_steps": 500}
    assert last_step(9000, 128, 1, 500) == (70, False)  # the paper plan as it was: 70 of 500 steps, no last step
    plan = budget.step_plan(s, 9000, kind="rl")
    assert last_step(9000, 128, plan["epochs"], 500) == (500, True)


def test_launch_time_epochs_override():
    from codegrpo.verl.stages import TrainingInputError, epochs_override

    cfg = {"device": "gpu"}
    s = {"train_batch_size": 128, "total_epochs": 1, "total_training_steps": 500, "nnodes": 1, "n_gpus_per_node": 8}
    assert epochs_override(cfg, s, 9000, kind="rl") == "trainer.total_epochs=8"
    with pytest.raises(TrainingInputError, match="fill no batch"):
        epochs_override(cfg, s, 100, kind="rl")


def test_trainer_raises_total_epochs_on_the_composed_verl_config():
    from codegrpo.verl.launch import compose
    from codegrpo.verl.trainer import ensure_epochs

    cfg = compose("grpo", ["trainer.total_epochs=1", "trainer.total_training_steps=500"])
    assert ensure_epochs(cfg, 70) == 8 and cfg.trainer.total_epochs == 8
    cfg = compose("grpo", ["trainer.total_epochs=2", "trainer.total_training_steps=null"])
    assert ensure_epochs(cfg, 70) == 2 and cfg.trainer.total_epochs == 2
