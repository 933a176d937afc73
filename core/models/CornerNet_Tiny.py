# ruff: noqa: N999  (module names are the model names users pass, as in the original)
"""CornerNet-Tiny: a small one-stack corner detector for generated data and fast tests.

Same heads, corner pooling and loss as CornerNet, at a fraction of the cost: a stride-2 7x7
conv and a stride-2 residual (`pre`, stride 4), one 3-level hourglass ([dim, 64, 96, 128]
channels at strides 4/8/16/32), corner-pool modules and 1x1-conv heads (as in Squeeze).

Input (B, 3, H, W) float32 with H, W multiples of 32 (target 128 x 128). Train path:
[tl_heats, br_heats, tl_tags, br_tags, tl_offs, br_offs], each a one-element list (one stack)
of raw logits at H/4 x W/4: heats (B, categories, H/4, W/4), tags (B, 1, ...), offsets
(B, 2, ...). The test path returns what `hg_net` documents.
"""
from __future__ import annotations

from torch import nn

from .py_utils.builders import corner_heads, stacked_hourglass
from .py_utils.losses import CornerNet_Loss
from .py_utils.modules import convolution, hg_module, hg_net, residual


class model(hg_net):
    """CornerNet-Tiny; `dim` is the width at output resolution (stride 4)."""

    def __init__(self, categories: int = 80, dim: int = 32, stacks: int = 1) -> None:
        pre = nn.Sequential(convolution(7, 3, dim, stride=2), residual(dim, dim, stride=2))
        hg_mods = nn.ModuleList([hg_module(3, [dim, 64, 96, 128], [1, 1, 1, 1])
                                 for _ in range(stacks)])
        super().__init__(stacked_hourglass(pre, hg_mods, dim),
                         **corner_heads(stacks, categories, dim, mid_dim=dim, k=1))
        self.loss = CornerNet_Loss(pull_weight=1e-1, push_weight=1e-1)
