# ruff: noqa: N999  (module names are the model names users pass, as in the original)
"""CornerNet (Law & Deng, 2018) with the CornerNet-Lite layout: Hourglass-104, 2 stacks.

Input (B, 3, H, W) float32, normalised; outputs at stride 4 (511 -> 128, 255 -> 64).
See `hg_net` for what forward returns in the train and test paths.
"""
from __future__ import annotations

from torch import nn

from .py_utils.builders import corner_heads, stacked_hourglass
from .py_utils.losses import CornerNet_Loss
from .py_utils.modules import convolution, hg_module, hg_net, residual


class model(hg_net):
    """CornerNet: 201,035,212 parameters with 80 categories."""

    def __init__(self, categories: int = 80) -> None:
        stacks = 2
        pre = nn.Sequential(convolution(7, 3, 128, stride=2), residual(128, 256, stride=2))
        hg_mods = nn.ModuleList([
            hg_module(5, [256, 256, 384, 384, 384, 512], [2, 2, 2, 2, 2, 4])
            for _ in range(stacks)
        ])
        super().__init__(stacked_hourglass(pre, hg_mods), **corner_heads(stacks, categories))
        self.loss = CornerNet_Loss(pull_weight=1e-1, push_weight=1e-1)
