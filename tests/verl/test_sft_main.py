"""SFT resume continues verl's data order (codegrpo.verl.sft_main.resume_loader) with real torch samplers."""

import pytest
from torch.utils.data import DataLoader, DistributedSampler

from codegrpo.verl.sft_main import resume_loader


def _loader(rows, world, rank, batch):
    sampler = DistributedSampler(range(rows), shuffle=True, num_replicas=world, rank=rank, drop_last=True)
    return DataLoader(range(rows), batch_size=batch, sampler=sampler, drop_last=True), sampler


def _run(loader, sampler, epochs):
    """verl 0.4.1's SFT loop order: set_epoch(epoch), then every batch of the loader."""
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out += [b.tolist() for b in loader]
    return out


@pytest.mark.parametrize("offset", [0, 1, 5, 6, 7, 13])
def test_resumed_sft_sees_the_batches_after_its_checkpoint(offset):
    rows, world, batch, epochs = 27, 2, 2, 3  # 13 rows per rank, 6 batches per epoch per rank
    for rank in range(world):
        fresh = _run(*_loader(rows, world, rank, batch), epochs)
        loader, sampler = resume_loader(*_loader(rows, world, rank, batch), offset, seed=0)
        resumed = _run(loader, sampler, epochs)
        assert resumed[: len(fresh) - offset] == fresh[offset:]


def test_sft_data_order_follows_the_seed():
    a = _run(*resume_loader(*_loader(40, 1, 0, 4), 0, seed=0), 1)
    b = _run(*resume_loader(*_loader(40, 1, 0, 4), 0, seed=3), 1)
    assert sorted(sum(a, [])) == sorted(sum(b, [])) and a != b
    assert a == _run(*_loader(40, 1, 0, 4), 1)  # seed 0 is verl's own order
