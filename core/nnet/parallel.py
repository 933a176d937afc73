"""A process's part of a data-parallel step: its chunks of the batch, the DDP/SyncBN wrap, and
the means over every chunk of every rank.

The global batch is cut into chunks (`core.data.chunks`); each process runs its own chunks and
DDP averages the gradients. What one process running every chunk would see is recovered here:
the logged loss is the mean over all chunks (one all-reduce), and BatchNorm running statistics
are merged after each step (`running_stats`). With SyncBatchNorm the collectives inside the
forward must match across ranks whose chunk counts differ, so each rank runs its chunks in one
forward (`one_forward`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from ..data.chunks import Deal
from .running_stats import RunningStatsMerge


def one_forward(sync_bn: bool, distributed: bool, share: Deal | None) -> bool:
    """Whether SyncBN makes each rank run its whole local batch in one forward (across ranks;
    `system.one_forward` asks for it without SyncBN: core/nnet/step_path.py)."""
    return bool(sync_bn and distributed and share and share.world > 1)


def wrap(model: nn.Module, device: torch.device, share: Deal | None, synced: bool,
         single_forward: bool) -> tuple[nn.parallel.DistributedDataParallel,
                                        RunningStatsMerge | None]:
    """`model` in DistributedDataParallel (process group already set up), and the merge of its
    BatchNorm running statistics: None when SyncBN (`synced`) keeps them equal already; over
    each rank's local batch as one chunk where a rank runs it in one forward."""
    ids = [device.index] if device.type == "cuda" else None
    # Buffers are merged after each step (RunningStatsMerge), not broadcast from rank 0.
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False)
    if synced or share is None:
        return ddp, None
    return ddp, RunningStatsMerge(model, share.per_rank() if single_forward else share)


def casts_once(device_type: str) -> contextlib.AbstractContextManager:
    """A region around a whole step in which each weight is cast for autocast once.

    Autocast keeps its lower-precision copy of each weight until the outermost autocast region
    is left, so a forward region per chunk would cast every weight again for each chunk. Inside
    this region, itself disabled, the chunks' own (enabled) regions share one copy; the targets,
    the loss and the backward between them run without autocast, as outside any region.
    """
    return torch.autocast(device_type, enabled=False)


def split_batch(batch: dict[str, torch.Tensor],
                share: Deal | None) -> list[dict[str, torch.Tensor]]:
    """This process's chunks of its local batch: `share.mine` sizes, or the batch as one."""
    sizes = share.mine if share else [len(batch["image"])]
    if len(sizes) == 1:
        return [batch]
    parts = {key: torch.split(value, sizes) for key, value in batch.items()}
    return [{key: parts[key][i] for key in batch} for i in range(len(sizes))]


def split_outputs(outs: Any, sizes: list[int]) -> list[Any]:
    """A model's outputs (tensors in nested lists, batch first) cut along the batch into
    `sizes`: one output structure per chunk."""
    if isinstance(outs, torch.Tensor):
        return list(torch.split(outs, sizes))
    parts = [split_outputs(item, sizes) for item in outs]
    return [[part[i] for part in parts] for i in range(len(sizes))]


def global_mean(losses: list[tuple[torch.Tensor, dict]], share: Deal | None,
                distributed: bool) -> tuple[torch.Tensor, dict]:
    """The mean over every chunk of the global batch of the loss and of each term.

    The same number on every rank (one all-reduce), and the one a single process running every
    chunk would print. Non-finite on one rank makes it non-finite everywhere.
    """
    keys = list(losses[0][1])
    local = torch.stack([sum(loss.detach().float() for loss, _ in losses)]
                        + [sum(terms[key].float() for _, terms in losses) for key in keys])
    chunks = len(share.sizes) if share else len(losses)
    if distributed:
        torch.distributed.all_reduce(local)
    mean = local / chunks
    return mean[0], dict(zip(keys, mean[1:]))
