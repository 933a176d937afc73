"""BatchNorm running statistics under DDP equal to those of one process running every chunk.

One process running chunks 0..K-1 updates a running statistic r chunk after chunk:
r_K = q^K r_0 + sum_j m q^(K-1-j) s_j, with momentum m, q = 1 - m and s_j chunk j's batch
statistic. A rank running chunks a..b-1 (n = b - a of them) from the same r_0 ends at
r_local = q^n r_0 + sum_{j=a}^{b-1} m q^(b-1-j) s_j, so its share of r_K is
q^(K-b) (r_local - q^n r_0), and r_K = q^K r_0 + the sum of the shares over the ranks: one
all-reduce of the (small) buffers per step. DDP's own answer, broadcasting rank 0's buffers, keeps
the ranks equal but forgets every other rank's chunks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ..data.chunks import Deal


class RunningStatsMerge:
    """Call `begin()` before a step's forwards and `finish()` after them, on every rank.

    Only layers in training mode are merged (a frozen BatchNorm keeps its statistics as they are).
    """

    def __init__(self, model: nn.Module, share: Deal) -> None:
        self.layers = [m for m in model.modules()
                       if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
        for layer in self.layers:
            if layer.momentum is None:
                raise ValueError("BatchNorm with momentum=None (a cumulative average) cannot be "
                                 "merged across processes; give it a momentum")
        self.share = share
        self._start: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    @torch.no_grad()
    def begin(self) -> None:
        self._start = [(m.running_mean.clone(), m.running_var.clone(),
                        m.num_batches_tracked.clone()) for m in self.layers]

    @torch.no_grad()
    def finish(self) -> None:
        share = self.share
        total, count, end = len(share.sizes), share.count, share.first + share.count
        active = [(m, start) for m, start in zip(self.layers, self._start) if m.training]
        if not active:
            return
        shares = []
        for m, (mean0, var0, _) in active:
            keep = 1.0 - m.momentum
            for now, before in ((m.running_mean, mean0), (m.running_var, var0)):
                shares.append(keep ** (total - end)
                              * (now.double() - keep ** count * before.double()))
        flat = torch.cat(shares)
        dist.all_reduce(flat)
        pieces = iter(torch.split(flat, [t.numel() for t in shares]))
        for m, (mean0, var0, batches0) in active:
            keep = 1.0 - m.momentum
            for now, before in ((m.running_mean, mean0), (m.running_var, var0)):
                now.copy_(keep ** total * before.double() + next(pieces))
            m.num_batches_tracked.copy_(batches0 + total)
