"""The parts every corner model assembles the same way: stacked hourglasses and corner heads."""

from __future__ import annotations

from functools import partial

from torch import nn

from .corner_pool import br_pool, tl_pool
from .modules import HEAT_BIAS, convolution, hg, merge_mod, pred_mods, residual


def stacked_hourglass(pre: nn.Module, hg_mods: nn.ModuleList, dim: int = 256) -> hg:
    """`pre`, then the hourglasses of `hg_mods`, each followed by a 3x3 convolution, joined
    between stacks by a residual and two 1x1 merges, as the original builds them."""
    stacks = len(hg_mods)
    return hg(
        pre, hg_mods,
        cnvs=nn.ModuleList([convolution(3, dim, dim) for _ in range(stacks)]),
        inters=nn.ModuleList([residual(dim, dim) for _ in range(stacks - 1)]),
        cnvs_=nn.ModuleList([merge_mod(dim) for _ in range(stacks - 1)]),
        inters_=nn.ModuleList([merge_mod(dim) for _ in range(stacks - 1)]),
    )


def corner_heads(stacks: int, categories: int, dim: int = 256, mid_dim: int = 128,
                 k: int = 3) -> dict[str, nn.ModuleList]:
    """The `hg_net` keyword arguments for the corner pools and the six heads of every stack.

    `k` is the size of the heads' first convolution (3 in CornerNet, 1 in Squeeze).
    """
    head = partial(pred_mods, stacks, inp_dim=dim, cnv_dim=dim, k=k)
    return {
        "tl_modules": nn.ModuleList([tl_pool(dim, mid_dim=mid_dim) for _ in range(stacks)]),
        "br_modules": nn.ModuleList([br_pool(dim, mid_dim=mid_dim) for _ in range(stacks)]),
        "tl_heats": head(categories, bias=HEAT_BIAS), "br_heats": head(categories, bias=HEAT_BIAS),
        "tl_tags": head(1), "br_tags": head(1),
        "tl_offs": head(2), "br_offs": head(2),
    }
