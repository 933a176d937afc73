# ruff: noqa: N999  (module names are the model names users pass, as in the original)
"""CornerNet-Saccade: Hourglass-54 (3 stacks, 3-level hourglasses) with attention heads.

Input (B, 3, H, W) float32, normalised; corner outputs at stride 4 (255 -> 64). Attention
maps come from the hourglass levels, innermost first: atts[s][0] (B, 1, H/16, W/16) from 384
channels, atts[s][1] (B, 1, H/8, W/8) from 384, atts[s][2] (B, 1, H/4, W/4) from 256.
See `hg_net` for what forward returns (the test path returns (detections, atts)).
"""
from __future__ import annotations

from torch import nn

from .py_utils.builders import corner_heads, stacked_hourglass
from .py_utils.losses import CornerNet_Saccade_Loss
from .py_utils.modules import HEAT_BIAS, convolution, hg_module, hg_net, pred_mod, residual


class model(hg_net):
    """CornerNet-Saccade: 116,969,339 parameters with 80 categories."""

    def __init__(self, categories: int = 80) -> None:
        stacks = 3
        pre = nn.Sequential(convolution(7, 3, 128, stride=2), residual(128, 256, stride=2))
        hg_mods = nn.ModuleList([
            hg_module(3, [256, 384, 384, 512], [1, 1, 1, 1]) for _ in range(stacks)
        ])
        att_mods = nn.ModuleList([
            nn.ModuleList([pred_mod(1, inp_dim=dim, bias=HEAT_BIAS) for dim in (384, 384, 256)])
            for _ in range(stacks)
        ])
        super().__init__(stacked_hourglass(pre, hg_mods), **corner_heads(stacks, categories),
                         att_modules=att_mods)
        self.loss = CornerNet_Saccade_Loss(pull_weight=1e-1, push_weight=1e-1)
