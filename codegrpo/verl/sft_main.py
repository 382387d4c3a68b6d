"""SFT entry point (one process per rank under torchrun): verl's ``fsdp_sft_trainer`` with the project layer.

``torchrun ... -m codegrpo.verl.sft_main <overrides>`` composes ``codegrpo/verl/config/sft.yaml`` (verl's
``sft_trainer.yaml`` plus the ``codegrpo`` section) with the overrides, then:

* applies :mod:`codegrpo.verl.cpu` when ``codegrpo.device=cpu``;
* resumes: verl 0.4.1's SFT trainer saves weights only (``global_step_<N>/`` in Hugging Face layout) and always
  starts at step 0, so when a checkpoint exists the run restarts from the newest one's weights, trains the
  remaining steps and keeps counting steps from N (optimizer and LR schedule start afresh), continuing the data
  order where step N left it (:func:`resume_loader`: the epoch and the batch within it) instead of re-training
  the first batches;
* seeds the data order with ``trainer.seed`` (verl 0.4.1's ``DistributedSampler`` always used seed 0);
* logs every step to ``codegrpo.metrics_file`` through :func:`codegrpo.verl.metrics.tracking_class`;
* calls verl's ``run_sft``.
"""

from __future__ import annotations

import sys
from pathlib import Path


def latest_sft_checkpoint(ckpt_dir) -> tuple[int, Path] | None:
    from codegrpo.models import has_tokenizer, is_hf_dir
    from codegrpo.verl.checkpoints import step_dirs

    for step, path in sorted(step_dirs(ckpt_dir).items(), reverse=True):
        if is_hf_dir(path) and has_tokenizer(path):
            return step, path
    return None


class ResumeSampler:
    """A ``DistributedSampler`` continued from a resume point: epoch ``e`` of the trainer's loop is epoch
    ``start_epoch + e`` of the data order, and the first of them starts ``skip`` indices in (the batches the
    checkpointed steps already trained)."""

    def __init__(self, inner, start_epoch: int = 0, skip: int = 0, seed: int | None = None):
        self.inner, self.start_epoch, self.skip = inner, int(start_epoch), int(skip)
        if seed is not None:
            inner.seed = int(seed)
        self.epoch = 0
        inner.set_epoch(self.start_epoch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self.inner.set_epoch(self.start_epoch + self.epoch)

    def __iter__(self):
        it = iter(self.inner)
        if self.epoch == 0:
            for _ in range(self.skip):
                next(it, None)
        return it

    def __len__(self) -> int:
        return len(self.inner) - (self.skip if self.epoch == 0 else 0)


def resume_loader(loader, sampler, offset: int, seed: int | None = None):
    """(loader, sampler) that continue verl's SFT data order after ``offset`` trained steps, seeded with ``seed``:
    a new ``DataLoader`` with the same settings over a :class:`ResumeSampler` (a DataLoader's sampler cannot be
    swapped). Batches are per rank, ``offset`` counts global steps (one batch per rank each)."""
    from torch.utils.data import DataLoader

    per_epoch = len(loader)
    start_epoch, skip_batches = divmod(int(offset), per_epoch) if per_epoch else (0, 0)
    new_sampler = ResumeSampler(sampler, start_epoch, skip_batches * loader.batch_size, seed=seed)
    new_loader = DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=new_sampler,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        collate_fn=loader.collate_fn,
    )
    return new_loader, new_sampler


def configure(cfg):
    """Prepare this process for verl's ``run_sft(cfg)``: CPU mode (only when ``codegrpo.device=cpu``), resume
    from the newest checkpoint, the step-counting trainer subclass and the metrics logger. Returns the
    resume step (0 for a fresh run)."""
    from omegaconf import open_dict

    if cfg.codegrpo.device == "cpu":
        from codegrpo.verl import cpu

        cpu.setup(cfg.codegrpo.get("cpu_precision", "bf16"))

    from codegrpo.verl.prompts import install

    install(cfg.codegrpo.get("chat_template"))  # the prompt format the SFT dataset renders (model.chat_template)

    import verl.trainer.fsdp_sft_trainer as sft

    from codegrpo.verl.metrics import tracking_class

    offset = 0
    if cfg.codegrpo.resume:
        found = latest_sft_checkpoint(cfg.trainer.default_local_dir)
        if found:
            offset, path = found
            print(f"[codegrpo] resuming SFT from {path} (step {offset})", flush=True)
            with open_dict(cfg):
                cfg.model.partial_pretrain = str(path)

    base = getattr(sft.FSDPSFTTrainer, "_codegrpo_base", sft.FSDPSFTTrainer)

    class ProjectSFTTrainer(base):
        """Counts steps from the resumed checkpoint's step and stops at the configured total."""

        _codegrpo_base = base

        def fit(self):
            total = len(self.train_dataloader) * self.config.trainer.total_epochs
            if self.config.trainer.total_training_steps is not None:
                total = self.config.trainer.total_training_steps
            if offset >= total:
                print(f"[codegrpo] SFT already at step {offset} of {total}; nothing to train", flush=True)
                return
            with open_dict(self.config):
                self.config.trainer.total_training_steps = total - offset
            # the data order of the steps after `offset`, seeded with trainer.seed
            self.train_dataloader, self.train_sampler = resume_loader(
                self.train_dataloader, self.train_sampler, offset, seed=self.config.trainer.get("seed", 0)
            )
            return super().fit()

        def save_checkpoint(self, step):
            return super().save_checkpoint(step + offset)

    # run_sft looks both names up in its module at call time
    sft.FSDPSFTTrainer = ProjectSFTTrainer
    sft.Tracking = tracking_class(cfg.codegrpo.metrics_file, step_offset=offset)
    return offset


def main(argv: list[str] | None = None) -> None:
    from codegrpo.verl.launch import compose

    cfg = compose("sft", sys.argv[1:] if argv is None else argv)
    configure(cfg)
    import verl.trainer.fsdp_sft_trainer as sft

    sft.run_sft(cfg)


if __name__ == "__main__":
    main()
