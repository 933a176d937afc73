"""Untrained weights whose outputs vary with the image, for the export checks and the
deployment benchmark (a fresh initialisation gives near-constant heat maps, where every pair of
corners scores alike and rounding picks among near-ties, so two runtimes disagree on the order)."""

from __future__ import annotations

import torch


def spread_weights(model: torch.nn.Module) -> None:
    """Weights N(0, 1/fan_in), so the maps vary with the image, and heat heads that score class 0
    only, so top-left and bottom-right corners pair up."""
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for param in model.parameters():
            if param.dim() > 1:
                param.copy_(torch.randn(param.shape, generator=generator)
                            / param[0].numel() ** 0.5)
        for heads in (model.tl_heats, model.br_heats):
            heads[-1][-1].weight[1:] = 0
            heads[-1][-1].bias[1:] = -10
