"""The DistributedSampler check: does an epoch's index order change without `set_epoch`?"""
from __future__ import annotations

from typing import cast

from torch.utils.data import Dataset, DistributedSampler

SET_EPOCH_SAMPLES = 16  # the dataset length the run checks (small: its orders are printed)


def set_epoch_check(dataset_len: int, world_size: int, seed: int = 0) -> dict:
    """Index order of epochs 0 and 1 from a shuffling DistributedSampler, per rank, without and with
    `set_epoch`; no process group needed (num_replicas and rank given)."""
    dataset = range(dataset_len)
    orders: dict[str, list[list[list[int]]]] = {"without_set_epoch": [], "with_set_epoch": []}
    for rank in range(world_size):
        for mode, orders_of in orders.items():
            sampler: DistributedSampler[int] = DistributedSampler(
                cast(Dataset[int], dataset), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
            epochs = []
            for epoch in (0, 1):
                if mode == "with_set_epoch":
                    sampler.set_epoch(epoch)
                epochs.append(list(iter(sampler)))
            orders_of.append(epochs)
    report: dict = {"dataset_len": dataset_len, "world_size": world_size, "seed": seed}
    for mode, per_rank in orders.items():
        report[mode] = {
            "rank0_epoch0": per_rank[0][0], "rank0_epoch1": per_rank[0][1],
            "epochs_identical": all(e0 == e1 for e0, e1 in per_rank),
            "each_epoch_covers_dataset": all(
                set().union(*(per_rank[r][e] for r in range(world_size))) == set(dataset)
                for e in (0, 1)),
        }
    return report
