"""Input and output sizes a model can take, checked on the meta device before a run starts.

The model's `pre` block downsamples the input by a stride and each level of its hourglass halves
the map, so only some input sizes work and each gives one output size; a config that asks for
another is refused here, at start, naming the sizes that fit.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import ConfigError
from . import build_model


def _meta_model(model_name: str, categories: int) -> nn.Module:
    """The model with parameters on the meta device: shapes only, no memory, no compute."""
    with torch.device("meta"):
        return build_model(model_name, categories)


def _fitting_input(size: int, stride: int, multiple: int) -> list[int]:
    """The input sizes nearest `size`, one below and one above, that the model can take,
    in the original's form (511 for 128 output cells of stride 4)."""
    below = max(multiple, (math.ceil(size / stride) // multiple) * multiple)
    return sorted({below * stride - 1, (below + multiple) * stride - 1})


def check_input_fit(model_name: str, categories: int, size: tuple[int, int] | list[int],
                    what: str = "db.input_size") -> tuple[nn.Module, int]:
    """Refuse an input (height, width) the model `model_name` cannot take, naming it `what`
    and the nearest sides that fit (see `check_model_fit`); returns the meta-device model and
    its stride."""
    height, width = size
    model = _meta_model(model_name, categories)
    with torch.no_grad():
        levels = model.hg.hgs[0].n
        multiple, probe = 2 ** levels, 2 ** (levels + 5)
        stride = probe // model.hg.pre(torch.empty(1, 3, probe, probe, device="meta")).shape[-1]
        for side, name in ((height, "height"), (width, "width")):
            if side < 1 or math.ceil(side / stride) % multiple:
                raise ConfigError(
                    f"{what} {name} {side} does not fit model {model_name}: it "
                    f"downsamples by {stride} and then halves {levels} times, so "
                    f"input / {stride} (rounded up) must be a multiple of {multiple}; use "
                    f"{' or '.join(map(str, _fitting_input(max(side, 1), stride, multiple)))}")
    return model, stride


def check_model_fit(model_name: str, db_configs: dict) -> None:
    """Refuse input and output sizes the model `model_name` cannot produce.

    The model's `pre` block downsamples the input by a stride (4 in CornerNet: 511 -> 128;
    8 in Squeeze: 511 -> 64) and each of its hourglass's levels halves the map, so
    input_size / stride (rounded up) must be a multiple of 2 ** levels; db.output_sizes[0]
    must then be that map's size, and for attention models db.att_sizes the attention maps'.
    Sizes are found by running the model on the meta device (about a second, no memory).
    """
    height, width = db_configs["input_size"]
    model, stride = check_input_fit(model_name, db_configs["categories"], (height, width))
    with torch.no_grad():
        try:
            cnvs, merges = model.hg(torch.empty(1, 3, height, width, device="meta"))
        except RuntimeError as err:
            raise ConfigError(f"db.input_size {[height, width]} does not fit model "
                              f"{model_name}: {err}") from None
    produced = list(cnvs[-1].shape[-2:])
    if db_configs["output_sizes"][0] != produced:
        raise ConfigError(f"db.output_sizes[0] is {db_configs['output_sizes'][0]} but model "
                          f"{model_name} turns input_size {[height, width]} into {produced} "
                          f"(stride {stride}); set db.output_sizes to {[produced]}")
    if model.with_att:
        atts = [list(level.shape[-2:]) for level in merges[-1][model.up_start:]]
        if db_configs["att_sizes"] != atts:
            raise ConfigError(f"db.att_sizes is {db_configs['att_sizes']} but model "
                              f"{model_name} makes attention maps of {atts} for input_size "
                              f"{[height, width]}; set db.att_sizes to {atts}")
