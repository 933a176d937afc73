# ruff: noqa: N999  (module names are the model names users pass, as in the original)
"""CornerNet-Squeeze: fire modules, depthwise 3x3s, transposed-conv upsampling, 2 stacks.

Input (B, 3, H, W) float32, normalised; outputs at stride 8 (511 -> 64, 255 -> 32) because
`pre` has a third stride-2 block. See `hg_net` for what forward returns.
"""
from __future__ import annotations

from functools import partial

from torch import nn

from .py_utils.builders import corner_heads, stacked_hourglass
from .py_utils.losses import CornerNet_Loss
from .py_utils.modules import (
    convolution,
    fire_module,
    hg_module,
    hg_net,
    make_hg_layer,
    make_layer,
    make_layer_revr,
    residual,
)


def make_unpool_layer(dim: int) -> nn.Module:
    """Learned 2x upsampling, weight layout (in, out, 4, 4)."""
    return nn.ConvTranspose2d(dim, dim, kernel_size=4, stride=2, padding=1)


class model(hg_net):
    """CornerNet-Squeeze: 31,771,852 parameters with 80 categories."""

    def __init__(self, categories: int = 80) -> None:
        stacks = 2
        pre = nn.Sequential(
            convolution(7, 3, 128, stride=2),
            residual(128, 256, stride=2),
            residual(256, 256, stride=2),
        )
        fire_layer = partial(make_layer, block=fire_module)
        hg_mods = nn.ModuleList([
            hg_module(
                4, [256, 256, 384, 384, 512], [2, 2, 2, 2, 4],
                make_up_layer=fire_layer,
                make_hg_layer=partial(make_hg_layer, block=fire_module),
                make_low_layer=fire_layer,
                make_hg_layer_revr=partial(make_layer_revr, block=fire_module),
                make_unpool_layer=make_unpool_layer,
            ) for _ in range(stacks)
        ])
        # Squeeze's heads use a 1x1 first conv instead of 3x3.
        super().__init__(stacked_hourglass(pre, hg_mods), **corner_heads(stacks, categories, k=1))
        self.loss = CornerNet_Loss(pull_weight=1e-1, push_weight=1e-1)
