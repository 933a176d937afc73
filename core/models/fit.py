"""The size rule of a model: which input sides it takes and what map sizes it makes of them.

The model's `pre` block downsamples the input by a stride (each stride-2 layer rounding up) and
each level of its hourglass halves the map and doubles it back, so only some input sizes work
and each gives one output size. `size_rule(model)` reads the rule from the model's structure (no
forward pass); every other place that needs a stride or a map size (the check of a config at
start, export, inference) asks it. The test suite checks the rule against a forward pass on the
meta device for every shipped config.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from torch import nn

from ..errors import ConfigError
from . import build_model


def output_side(side: int, stride: int) -> int:
    """The output map's side for an input side: `pre` divides by `stride`, rounding up at each
    stride-2 layer (which is rounding up once), and the hourglass gives back what it takes."""
    return -(-side // stride)


@dataclass(frozen=True)
class SizeRule:
    """`stride`: what `pre` divides a side by (rounding up); `levels`: how often the hourglass
    halves it; `att_levels`: which levels of the last hourglass (0 = innermost) the attention
    maps read, empty without attention heads."""

    stride: int
    levels: int
    att_levels: tuple[int, ...] = ()

    @property
    def multiple(self) -> int:
        """A side H fits when it lies in (j*multiple - stride, j*multiple] for some j >= 1."""
        return self.stride * 2 ** self.levels

    def output(self, side: int) -> int:
        """The output map's side for an input side (the corner heads' resolution)."""
        return output_side(side, self.stride)

    def fits(self, side: int) -> bool:
        """Whether the network takes an input side."""
        return side >= 1 and self.output(side) % 2 ** self.levels == 0

    def output_size(self, size: tuple[int, int] | list[int]) -> list[int]:
        """[height, width] of the output maps for an input [height, width]."""
        return [self.output(side) for side in size]

    def att_sizes(self, size: tuple[int, int] | list[int]) -> list[list[int]]:
        """[height, width] of each attention map, innermost first, for an input size."""
        return [[self.output(side) >> (self.levels - 1 - level) for side in size]
                for level in self.att_levels]

    def nearest(self, side: int) -> list[int]:
        """The fitting sides nearest `side`, one below and one above, in the original's form
        (511 for 128 output cells of stride 4)."""
        cells = 2 ** self.levels
        below = max(cells, (self.output(max(side, 1)) // cells) * cells)
        return sorted({below * self.stride - 1, (below + cells) * self.stride - 1})

    def describe(self) -> str:
        """The sides that fit, in words, for error messages."""
        multiple, stride = self.multiple, self.stride
        first = ", ".join(f"{j * multiple - stride + 1}..{j * multiple}" for j in (1, 2, 3, 4))
        return f"sides in {first}, ... (j*{multiple}-{stride - 1} to j*{multiple})"

    def as_meta(self) -> dict[str, int]:
        """The form an exported file records: {"stride": s, "multiple": m}."""
        return {"stride": self.stride, "multiple": self.multiple}

    @classmethod
    def from_meta(cls, meta: dict[str, int]) -> SizeRule:
        """The rule an exported file recorded with `as_meta`."""
        return cls(meta["stride"], round(math.log2(meta["multiple"] // meta["stride"])))


def _block_stride(block: nn.Module) -> int:
    """A block of `pre` downsamples by its largest convolution stride (a projection's stride,
    where there is one, is the main path's)."""
    return max((conv.stride[0] for conv in block.modules() if isinstance(conv, nn.Conv2d)),
               default=1)


def size_rule(model: nn.Module) -> SizeRule:
    """The size rule of an `hg_net` model, read from its structure."""
    stride = math.prod(_block_stride(block) for block in model.hg.pre.children())
    levels = model.hg.hgs[0].n
    att_levels: tuple[int, ...] = ()
    if model.with_att:
        att_levels = tuple(range(model.up_start, model.up_start + len(model.att_modules[-1])))
    return SizeRule(stride, levels, att_levels)


@functools.cache
def model_size_rule(model_name: str) -> SizeRule:
    """The size rule of the model `model_name` (built once, on the meta device: no memory, no
    forward pass); an unknown name lists the valid ones."""
    import torch

    with torch.device("meta"):
        return size_rule(build_model(model_name, categories=1))


def check_input_fit(model_name: str, size: tuple[int, int] | list[int],
                    what: str = "db.input_size") -> SizeRule:
    """Refuse an input (height, width) the model `model_name` cannot take, naming it `what`
    and the nearest sides that fit; returns the model's size rule."""
    rule = model_size_rule(model_name)
    for side, name in zip(size, ("height", "width")):
        if not rule.fits(side):
            raise ConfigError(
                f"{what} {name} {side} does not fit model {model_name}: it "
                f"downsamples by {rule.stride} and then halves {rule.levels} times, so "
                f"input / {rule.stride} (rounded up) must be a multiple of "
                f"{2 ** rule.levels}; use {' or '.join(map(str, rule.nearest(side)))}")
    return rule


def check_model_fit(model_name: str, db_configs: dict) -> None:
    """Refuse input and output sizes the model `model_name` cannot produce.

    db.input_size must fit the model's size rule (4 in CornerNet: 511 -> 128; 8 in Squeeze:
    511 -> 64), db.output_sizes[0] must be the map it makes of that input, and for attention
    models db.att_sizes the attention maps'.
    """
    size = db_configs["input_size"]
    rule = check_input_fit(model_name, size)
    produced = rule.output_size(size)
    if db_configs["output_sizes"][0] != produced:
        raise ConfigError(f"db.output_sizes[0] is {db_configs['output_sizes'][0]} but model "
                          f"{model_name} turns input_size {list(size)} into {produced} "
                          f"(stride {rule.stride}); set db.output_sizes to {[produced]}")
    if rule.att_levels:
        atts = rule.att_sizes(size)
        if db_configs["att_sizes"] != atts:
            raise ConfigError(f"db.att_sizes is {db_configs['att_sizes']} but model "
                              f"{model_name} makes attention maps of {atts} for input_size "
                              f"{list(size)}; set db.att_sizes to {atts}")


def config_stride(db_configs: dict) -> int:
    """The stride a checked config implies (`check_model_fit` makes db.output_sizes[0] the
    model's output for db.input_size), for code that has the config but not the model."""
    return output_side(db_configs["input_size"][0], db_configs["output_sizes"][0][0])
