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
    Every statistic of every layer travels in one flat float64 vector, and each step runs a few
    kernels over it, whatever the number of layers (a per-layer loop is thousands of tiny
    kernels per step on a GPU).
    """

    def __init__(self, model: nn.Module, share: Deal) -> None:
        self.layers = [m for m in model.modules()
                       if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
        for layer in self.layers:
            if layer.momentum is None:
                raise ValueError("BatchNorm with momentum=None (a cumulative average) cannot be "
                                 "merged across processes; give it a momentum")
        self.share = share
        self._active: list[nn.Module] = []
        self._start: torch.Tensor | None = None
        self._factors: dict[tuple[int, ...], tuple[torch.Tensor, ...]] = {}

    def _buffers(self) -> list[torch.Tensor]:
        return [t for m in self._active for t in (m.running_mean, m.running_var)]

    @torch.no_grad()
    def begin(self) -> None:
        self._active = [m for m in self.layers if m.training]
        self._start = torch.cat([t.reshape(-1) for t in self._buffers()]).double() \
            if self._active else None

    def _factors_of(self, buffers: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Per element of the flat vector: q^(K-b), q^n and q^K of its layer's momentum (see the
        module docstring), float64, built once per set of active layers."""
        key = tuple(id(m) for m in self._active)
        if key not in self._factors:
            share = self.share
            total, count = len(share.sizes), share.count
            end = share.first + count
            keeps = [1.0 - m.momentum for m in self._active for _ in range(2)]
            sizes = [t.numel() for t in buffers]

            def spread(powers: list[float]) -> torch.Tensor:
                values = torch.tensor(powers, dtype=torch.float64)
                return values.repeat_interleave(torch.tensor(sizes)).to(buffers[0].device)

            self._factors[key] = (spread([q ** (total - end) for q in keeps]),
                                  spread([q ** count for q in keeps]),
                                  spread([q ** total for q in keeps]))
        return self._factors[key]

    @torch.no_grad()
    def finish(self) -> None:
        if not self._active:
            return
        buffers = self._buffers()
        after_mine, before_mine, before_all = self._factors_of(buffers)
        now = torch.cat([t.reshape(-1) for t in buffers]).double()
        flat = after_mine * (now - before_mine * self._start)
        dist.all_reduce(flat)
        merged = (before_all * self._start + flat).to(buffers[0].dtype)
        torch._foreach_copy_(buffers, list(torch.split(merged, [t.numel() for t in buffers])))
        # Each of this rank's `count` forwards added 1; one process running every chunk adds K.
        torch._foreach_add_([m.num_batches_tracked for m in self._active],
                            len(self.share.sizes) - self.share.count)
