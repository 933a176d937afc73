"""Corner pooling without compiled code: flip, `torch.cummax`, flip.

Each pool maps (B, C, H, W) to the same shape. For every position it takes the maximum over a
ray that starts at that position:

- TopPool:    out[..., y, x] = max over y' >= y of in[..., y', x]  (looks down)
- BottomPool: out[..., y, x] = max over y' <= y of in[..., y', x]  (looks up)
- LeftPool:   out[..., y, x] = max over x' >= x of in[..., y, x']  (looks right)
- RightPool:  out[..., y, x] = max over x' <= x of in[..., y, x']  (looks left)

Autograd comes from `cummax`: the gradient of each output goes to the single input element
whose index cummax returned. On ties cummax keeps the element it reached last in its scan, so
the gradient goes to the tied maximum nearest to the output position along the ray.
"""
from __future__ import annotations

import torch
from torch import nn

from .modules import convolution


def directional_max(x: torch.Tensor, dim: int, reverse: bool) -> torch.Tensor:
    """Running maximum along `dim`; from the far end towards index 0 when `reverse`."""
    if _is_channels_last(x):
        return channels_last_max(x, dim, reverse)
    if reverse:
        return torch.cummax(x.flip(dim), dim)[0].flip(dim)
    return torch.cummax(x, dim)[0]


def _is_channels_last(x: torch.Tensor) -> bool:
    return (x.dim() == 4 and not x.is_contiguous()
            and x.is_contiguous(memory_format=torch.channels_last))


def channels_last_max(x: torch.Tensor, dim: int, reverse: bool) -> torch.Tensor:
    """`directional_max` of a channels_last (B, C, H, W) tensor, channels_last as well.

    `cummax` returns a contiguous (NCHW) result whatever its input, so the next convolution
    would copy it back; scanning the (B, H, W, C) view, which is contiguous, costs no copy and
    gives the same values and gradients.
    """
    nhwc = x.permute(0, 2, 3, 1)
    return directional_max(nhwc, dim - 1, reverse).permute(0, 3, 1, 2)


def max_scan(x: torch.Tensor, dim: int, reverse: bool, max_length: int) -> torch.Tensor:
    """`directional_max` from ops every ONNX runtime has (ONNX has no CumMax).

    After step k every position holds the maximum of the 2**k positions ending (or, when
    `reverse`, starting) at it: the running maximum with the tensor shifted by 2**k along `dim`,
    the gap filled with -inf. Max involves no rounding, so the values equal cummax's bit for bit
    for any size up to `max_length` (the steps are fixed, so an exported graph keeps them for
    every input size). Used only when exporting: training keeps cummax and its gradient.

    A step is a Pad with -inf, a Slice and the comparison: four graph nodes (a filler tensor
    concatenated took seven), so the four pools' scans, most of what torch.onnx traces, cost it
    a third less CPU.

    Args:
        x: (B, C, H, W) float.
        dim: 2 (vertical) or 3 (horizontal).
        reverse: scan from the far end towards index 0.
        max_length: the largest size along `dim` the result must be exact for.

    Returns:
        Same shape and dtype as `x`.
    """
    length = x.shape[dim]
    before = [0, 0] * (x.dim() - 1 - dim)  # F.pad's pairs run from the last dimension
    shift = 1
    while shift < max_length:
        gap = [0, shift] if reverse else [shift, 0]
        grown = nn.functional.pad(x, [*before, *gap], value=float("-inf"))
        shifted = grown.narrow(dim, shift if reverse else 0, length)
        # On ties keep the nearer element, as cummax does: -0.0 and 0.0 come out as it gives.
        x = torch.where(shifted > x, shifted, x)
        shift *= 2
    return x


class TopPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return directional_max(x, 2, reverse=True)


class BottomPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return directional_max(x, 2, reverse=False)


class LeftPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return directional_max(x, 3, reverse=True)


class RightPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return directional_max(x, 3, reverse=False)


class corner_pool(nn.Module):
    """Corner-pooling module of CornerNet: (B, dim, H, W) -> (B, dim, H, W).

    Two conv/BN/ReLU branches (to `mid_dim` channels) are pooled in two directions
    (pool1, pool2 = TopPool, LeftPool for top-left corners; BottomPool, RightPool for
    bottom-right), summed and projected back by conv/BN; a 1x1 conv/BN skip of the input is
    added, then ReLU and a 3x3 conv/BN/ReLU. The published models use mid_dim 128.
    """

    def __init__(self, dim: int, pool1: type[nn.Module], pool2: type[nn.Module],
                 mid_dim: int = 128) -> None:
        super().__init__()
        self.p1_conv1 = convolution(3, dim, mid_dim)
        self.p2_conv1 = convolution(3, dim, mid_dim)
        self.p_conv1 = nn.Conv2d(mid_dim, dim, 3, padding=1, bias=False)
        self.p_bn1 = nn.BatchNorm2d(dim)
        self.conv1 = nn.Conv2d(dim, dim, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(dim)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = convolution(3, dim, dim)
        self.pool1 = pool1()
        self.pool2 = pool2()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.pool1(self.p1_conv1(x)) + self.pool2(self.p2_conv1(x))
        pooled = self.p_bn1(self.p_conv1(pooled))
        skip = self.bn1(self.conv1(x))
        return self.conv2(self.relu1(pooled + skip))


def tl_pool(dim: int, mid_dim: int = 128) -> corner_pool:
    """Top-left corner module."""
    return corner_pool(dim, TopPool, LeftPool, mid_dim)


def br_pool(dim: int, mid_dim: int = 128) -> corner_pool:
    """Bottom-right corner module."""
    return corner_pool(dim, BottomPool, RightPool, mid_dim)
