"""An exponential moving average (EMA) of the weights, as modern detectors train with.

YOLOX, RTMDet and DINO evaluate an average of the weights over the last few thousand steps rather
than the last step's weights: it smooths the noise of the final steps at no training cost. With
`system.ema_decay: d` the average `E` starts as the initial weights and after optimizer step `k`
(counted from 1) becomes

    E_k = d_k * E_(k-1) + (1 - d_k) * W_k,   d_k = d * (1 - exp(-k / system.ema_warmup))

The warm-up of the decay is YOLOX's (tau 2000 there, our default too): early steps, whose
weights are far from the final ones, are forgotten quickly. `ema_warmup: 0` uses `d` from the
first step. Buffers (BatchNorm running statistics) are averaged alike; integer buffers
(`num_batches_tracked`) take the model's value. Every rank holds the same weights and merged
buffers after a step, so every rank's average is the same without any communication.

The average lives in a `torch.optim.swa_utils.AveragedModel` (its state-dict layout:
`module.<key>` and `n_averaged`), updated here rather than by its `update_parameters`: torch's
stock EMA has a fixed decay (no warm-up) and rounds integer buffers through a float product, and
its update copies the CPU counter `n_averaged` to the GPU at every step, a host synchronisation.
Ours is one `_foreach_lerp_` per (device, dtype) on the model's device; the counter stays on the
CPU.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel


class WeightAverage:
    """The EMA of a model's parameters and buffers.

    Args:
        model: the model being trained (not a DDP or compiled wrapper); copied once.
        decay: `d` above, in (0, 1).
        warmup: the decay's warm-up constant in optimizer steps (0: none).
    """

    def __init__(self, model: nn.Module, decay: float, warmup: int) -> None:
        self.decay, self.warmup = decay, warmup
        self.steps = 0  # optimizer steps averaged so far
        self.averaged = AveragedModel(model, use_buffers=True)
        # Never trained: its weights and buffers change only by averaging.
        self.averaged.eval().requires_grad_(False)
        self.restart(model)

    @classmethod
    def of(cls, model: nn.Module, system_config: Any) -> WeightAverage | None:
        """The average `system.ema_decay` asks for, or None when it is off."""
        if system_config.ema_decay is None:
            return None
        return cls(model, system_config.ema_decay, system_config.ema_warmup)

    @property
    def module(self) -> nn.Module:
        """The averaged model, in eval mode."""
        return self.averaged.module

    def decay_at(self, step: int) -> float:
        """d_k of optimizer step `step` (1-based)."""
        if not self.warmup:
            return self.decay
        return self.decay * (1.0 - math.exp(-step / self.warmup))

    def _pairs(self, model: nn.Module) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(averaged, current) for every parameter and buffer, in the module's order."""
        mine = itertools.chain(self.module.parameters(), self.module.buffers())
        theirs = itertools.chain(model.parameters(), model.buffers())
        return ((a, b.detach()) for a, b in zip(mine, theirs))

    @torch.no_grad()
    def update(self, model: nn.Module, skip: torch.Tensor | None = None) -> None:
        """Average in the weights of `model` after an optimizer step: device work only, queued
        without waiting for the device. `skip` (a bool on the device): where true, the float
        weights are averaged with weight 0, i.e. left as they were (a step skipped there)."""
        self.steps += 1
        weight = 1.0 - self.decay_at(self.steps)
        floats: dict[tuple, tuple[list, list]] = defaultdict(lambda: ([], []))
        integers: tuple[list, list] = ([], [])
        for averaged, current in self._pairs(model):
            group = floats[averaged.device, averaged.dtype] if averaged.is_floating_point() \
                else integers
            group[0].append(averaged)
            group[1].append(current)
        for averaged, current in floats.values():
            if skip is None:
                torch._foreach_lerp_(averaged, current, weight)
                continue
            # The new average where the step was taken, the old one where it was skipped (a
            # select, not a zero weight: the skipped step's weights may hold NaN).
            for kept, new in zip(averaged, torch._foreach_lerp(averaged, current, weight)):
                kept.copy_(torch.where(skip, kept, new))
        if integers[0]:
            torch._foreach_copy_(*integers)
        self.averaged.n_averaged += 1  # a CPU tensor: no device work

    @torch.no_grad()
    def restart(self, model: nn.Module) -> None:
        """Start the average again at the weights of `model` (no step averaged yet)."""
        for averaged, current in self._pairs(model):
            averaged.copy_(current)
        self.averaged.n_averaged.fill_(1)
        self.steps = 0

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The averaged weights and buffers (`module.<key>`) and `n_averaged` (steps + 1)."""
        return self.averaged.state_dict()

    def load(self, state: dict[str, torch.Tensor] | None, model: nn.Module) -> None:
        """Continue the average of a snapshot; one without an average (EMA was off, or an
        official state dict) restarts it at `model`'s weights, which it must hold already."""
        if state is None:
            self.restart(model)
            return
        self.averaged.load_state_dict(state)
        self.steps = int(state["n_averaged"]) - 1
