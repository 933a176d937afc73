"""Building blocks of the corner-keypoint detectors.

Attribute names match the original CornerNet-Lite so that state-dict keys (and hence the
official snapshots) line up exactly; the registration order of submodules fixes the key order.
All tensors are NCHW float32 unless autocast says otherwise.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .decode import decode

# Prior probability ~0.1 for a corner/attention logit: sigmoid(-2.19) = 0.1.
HEAT_BIAS = -2.19


class convolution(nn.Module):
    """k x k conv (+ BN) + ReLU; (B, inp_dim, H, W) -> (B, out_dim, H/stride, W/stride).

    Without BN the conv carries a bias and `bn` is an empty Sequential (no state-dict keys).
    """

    def __init__(self, k: int, inp_dim: int, out_dim: int, stride: int = 1,
                 with_bn: bool = True) -> None:
        super().__init__()
        pad = (k - 1) // 2
        self.conv = nn.Conv2d(inp_dim, out_dim, k, stride=stride, padding=pad, bias=not with_bn)
        self.bn = nn.BatchNorm2d(out_dim) if with_bn else nn.Sequential()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


class residual(nn.Module):
    """Basic residual block (two k x k conv/BN) with a 1x1 conv/BN projection when needed."""

    def __init__(self, inp_dim: int, out_dim: int, k: int = 3, stride: int = 1) -> None:
        super().__init__()
        pad = (k - 1) // 2
        self.conv1 = nn.Conv2d(inp_dim, out_dim, k, stride=stride, padding=pad, bias=False)
        self.bn1 = nn.BatchNorm2d(out_dim)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_dim, out_dim, k, padding=pad, bias=False)
        self.bn2 = nn.BatchNorm2d(out_dim)
        project = stride != 1 or inp_dim != out_dim
        self.skip = nn.Sequential(
            nn.Conv2d(inp_dim, out_dim, 1, stride=stride, bias=False),
            nn.BatchNorm2d(out_dim),
        ) if project else nn.Sequential()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu(y + self.skip(x))


class fire_module(nn.Module):
    """SqueezeNet-style fire block of CornerNet-Squeeze.

    1x1 squeeze to out_dim/sr, then a 1x1 and a depthwise 3x3 expand (out_dim/2 each,
    concatenated), BN, identity skip when shapes allow, ReLU.
    """

    def __init__(self, inp_dim: int, out_dim: int, sr: int = 2, stride: int = 1) -> None:
        super().__init__()
        mid = out_dim // sr
        self.conv1 = nn.Conv2d(inp_dim, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv_1x1 = nn.Conv2d(mid, out_dim // 2, 1, stride=stride, bias=False)
        self.conv_3x3 = nn.Conv2d(mid, out_dim // 2, 3, padding=1, stride=stride,
                                  groups=mid, bias=False)
        self.bn2 = nn.BatchNorm2d(out_dim)
        self.skip = stride == 1 and inp_dim == out_dim
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        squeezed = self.bn1(self.conv1(x))
        y = self.bn2(torch.cat((self.conv_1x1(squeezed), self.conv_3x3(squeezed)), 1))
        return self.relu(y + x) if self.skip else self.relu(y)


class upsample(nn.Module):
    """Nearest-neighbour upsampling by an integer factor."""

    def __init__(self, scale_factor: int) -> None:
        super().__init__()
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.interpolate(x, scale_factor=self.scale_factor)


class merge(nn.Module):
    """Joins the skip and the upsampled branch of an hourglass level by addition."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


# Layer factories: (inp_dim, out_dim, modules) -> nn.Module, as the hourglass expects.
LayerFactory = Callable[[int, int, int], nn.Module]


def make_layer(inp_dim: int, out_dim: int, modules: int, block: type = residual,
               stride: int = 1) -> nn.Sequential:
    """`modules` blocks; the first changes the width (and applies `stride`)."""
    first = block(inp_dim, out_dim, stride=stride)
    return nn.Sequential(first, *[block(out_dim, out_dim) for _ in range(1, modules)])


def make_layer_revr(inp_dim: int, out_dim: int, modules: int,
                    block: type = residual) -> nn.Sequential:
    """`modules` blocks; the last changes the width (the way back up the hourglass)."""
    layers = [block(inp_dim, inp_dim) for _ in range(modules - 1)]
    return nn.Sequential(*layers, block(inp_dim, out_dim))


def make_hg_layer(inp_dim: int, out_dim: int, modules: int,
                  block: type = residual) -> nn.Sequential:
    """Down-sampling layer: a stride-2 block replaces max pooling (the CornerNet-Lite choice)."""
    return make_layer(inp_dim, out_dim, modules, block=block, stride=2)


def make_pool_layer(dim: int) -> nn.Module:
    """No pooling: the stride-2 first block of `make_hg_layer` halves the resolution."""
    return nn.Sequential()


def make_unpool_layer(dim: int) -> nn.Module:
    return upsample(scale_factor=2)


def make_merge_layer(dim: int) -> nn.Module:
    return merge()


class hg_module(nn.Module):
    """Recursive hourglass ("kp module") with `n` levels.

    dims[i] / modules[i] are the width / block count of level i (outermost first). Returns the
    list of each level's merged output, innermost (coarsest) first; the last entry is the
    hourglass output (B, dims[0], H, W). Saccade's attention heads read the whole list.
    """

    def __init__(self, n: int, dims: list[int], modules: list[int],
                 make_up_layer: LayerFactory = make_layer,
                 make_pool_layer: Callable[[int], nn.Module] = make_pool_layer,
                 make_hg_layer: LayerFactory = make_hg_layer,
                 make_low_layer: LayerFactory = make_layer,
                 make_hg_layer_revr: LayerFactory = make_layer_revr,
                 make_unpool_layer: Callable[[int], nn.Module] = make_unpool_layer,
                 make_merge_layer: Callable[[int], nn.Module] = make_merge_layer) -> None:
        super().__init__()
        curr_dim, next_dim = dims[0], dims[1]
        curr_mod, next_mod = modules[0], modules[1]
        self.n = n
        self.up1 = make_up_layer(curr_dim, curr_dim, curr_mod)
        self.max1 = make_pool_layer(curr_dim)
        self.low1 = make_hg_layer(curr_dim, next_dim, curr_mod)
        if n > 1:
            self.low2 = hg_module(
                n - 1, dims[1:], modules[1:], make_up_layer=make_up_layer,
                make_pool_layer=make_pool_layer, make_hg_layer=make_hg_layer,
                make_low_layer=make_low_layer, make_hg_layer_revr=make_hg_layer_revr,
                make_unpool_layer=make_unpool_layer, make_merge_layer=make_merge_layer)
        else:
            self.low2 = make_low_layer(next_dim, next_dim, next_mod)
        self.low3 = make_hg_layer_revr(next_dim, curr_dim, curr_mod)
        self.up2 = make_unpool_layer(curr_dim)
        self.merg = make_merge_layer(curr_dim)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        up1 = self.up1(x)
        low1 = self.low1(self.max1(x))
        if self.n > 1:
            merges = self.low2(low1)
            low2 = merges[-1]
        else:
            merges, low2 = [], self.low2(low1)
        merged = self.merg(up1, self.up2(self.low3(low2)))
        return [*merges, merged]


def merge_mod(dim: int = 256) -> nn.Sequential:
    """1x1 conv + BN used to combine features between stacks."""
    return nn.Sequential(nn.Conv2d(dim, dim, 1, bias=False), nn.BatchNorm2d(dim))


class hg(nn.Module):
    """Stacked hourglass backbone with intermediate supervision.

    forward: (B, 3, H, W) -> (cnvs, merges): cnvs[s] is stack s's output feature map, merges[s]
    the per-level list returned by its `hg_module` (innermost first).
    """

    def __init__(self, pre: nn.Module, hg_modules: nn.ModuleList, cnvs: nn.ModuleList,
                 inters: nn.ModuleList, cnvs_: nn.ModuleList, inters_: nn.ModuleList) -> None:
        super().__init__()
        self.pre = pre
        self.hgs = hg_modules
        self.cnvs = cnvs
        self.inters = inters
        self.inters_ = inters_
        self.cnvs_ = cnvs_

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
        inter = self.pre(x)
        cnvs, merges = [], []
        for ind, (hg_, cnv_) in enumerate(zip(self.hgs, self.cnvs)):
            levels = hg_(inter)
            cnv = cnv_(levels[-1])
            cnvs.append(cnv)
            merges.append(levels)
            if ind < len(self.hgs) - 1:
                inter = self.inters_[ind](inter) + self.cnvs_[ind](cnv)
                inter = self.inters[ind](nn.functional.relu_(inter))
        return cnvs, merges


def pred_mod(out_dim: int, inp_dim: int = 256, cnv_dim: int = 256, k: int = 3,
             bias: float | None = None) -> nn.Sequential:
    """Prediction head: k x k conv + ReLU (no BN), then a 1x1 conv to `out_dim` channels.

    `bias` (HEAT_BIAS for heatmaps and attention maps) initialises the final conv's bias.
    """
    head = nn.Sequential(convolution(k, inp_dim, cnv_dim, with_bn=False),
                         nn.Conv2d(cnv_dim, out_dim, 1))
    if bias is not None:
        nn.init.constant_(head[-1].bias, bias)
    return head


def pred_mods(stacks: int, out_dim: int, **kwargs: float | None) -> nn.ModuleList:
    """One `pred_mod` per stack."""
    return nn.ModuleList([pred_mod(out_dim, **kwargs) for _ in range(stacks)])


class hg_net(nn.Module):
    """Corner detector: backbone, tl/br corner-pool modules, heat/tag/offset heads per stack.

    With `att_modules` (att_modules[s][j] reads level `up_start + j` of stack s's hourglass
    merges, innermost first) this is the CornerNet-Saccade network.

    forward(image (B, 3, H, W) float32) -> [tl_heats, br_heats, tl_tags, br_tags, tl_offs,
    br_offs] (+ atts for Saccade), each a list over stacks of raw logits: heats (B, C, h, w),
    tags (B, 1, h, w), offsets (B, 2, h, w), atts[s][j] (B, 1, h_j, w_j).

    forward(image, test=True, **decode_kwargs) uses the last stack only and, like the original:
    - without attention: returns (detections, tl_heat, br_heat, tl_tag, br_tag), detections
      (B, num_dets, 8) from `decode`, the other four the raw last-stack head maps;
    - with attention: returns (detections, atts) with atts the last stack's attention maps
      after sigmoid, or only detections when `no_att=True`.
    """

    def __init__(self, hg: nn.Module, tl_modules: nn.ModuleList, br_modules: nn.ModuleList,
                 tl_heats: nn.ModuleList, br_heats: nn.ModuleList, tl_tags: nn.ModuleList,
                 br_tags: nn.ModuleList, tl_offs: nn.ModuleList, br_offs: nn.ModuleList,
                 att_modules: nn.ModuleList | None = None, up_start: int = 0) -> None:
        super().__init__()
        self.hg = hg
        self.tl_modules = tl_modules
        self.br_modules = br_modules
        self.tl_heats = tl_heats
        self.br_heats = br_heats
        self.tl_tags = tl_tags
        self.br_tags = br_tags
        self.tl_offs = tl_offs
        self.br_offs = br_offs
        if att_modules is not None:
            self.att_modules = att_modules
        self.with_att = att_modules is not None
        self.up_start = up_start

    def _heads(self, stack: int, cnv: torch.Tensor) -> list[torch.Tensor]:
        tl_mod = self.tl_modules[stack](cnv)
        br_mod = self.br_modules[stack](cnv)
        return [self.tl_heats[stack](tl_mod), self.br_heats[stack](br_mod),
                self.tl_tags[stack](tl_mod), self.br_tags[stack](br_mod),
                self.tl_offs[stack](tl_mod), self.br_offs[stack](br_mod)]

    def _atts(self, stack: int, levels: list[torch.Tensor]) -> list[torch.Tensor]:
        return [att(lvl) for att, lvl in zip(self.att_modules[stack], levels[self.up_start:])]

    def last_stack(self, image: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The raw maps of the last stack, which the test path decodes: ([tl_heat, br_heat,
        tl_tag, br_tag, tl_off, br_off], attention maps innermost first (empty without
        attention heads)), all logits."""
        cnvs, merges = self.hg(image)
        last = len(cnvs) - 1
        heads = self._heads(last, cnvs[-1])
        return heads, self._atts(last, merges[-1]) if self.with_att else []

    def _train(self, image: torch.Tensor) -> list[list]:
        cnvs, merges = self.hg(image)
        per_stack = [self._heads(s, cnv) for s, cnv in enumerate(cnvs)]
        outs = [list(maps) for maps in zip(*per_stack)]
        if self.with_att:
            outs.append([self._atts(s, levels) for s, levels in enumerate(merges)])
        return outs

    def _test(self, image: torch.Tensor, no_att: bool = False,
              **kwargs: Any) -> tuple | torch.Tensor:
        if no_att and not self.with_att:
            raise ValueError("no_att applies only to models with attention heads (Saccade)")
        outs, atts = self.last_stack(image)
        detections = decode(*outs, **kwargs)
        if not self.with_att:
            return (detections, *outs[:4])
        if no_att:
            return detections
        return detections, [torch.sigmoid(a) for a in atts]

    def forward(self, image: torch.Tensor, test: bool = False,
                **kwargs: Any) -> list | tuple | torch.Tensor:
        if test:
            return self._test(image, **kwargs)
        return self._train(image, **kwargs)
