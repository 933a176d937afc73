"""Detector models by name: `MODELS[name]` is a module exposing `model(categories=...)`."""
from __future__ import annotations

import importlib
from collections.abc import Mapping

import torch
from torch import nn

from ..errors import lookup

# Model modules by name: `system.model`, or the config name, selects one of these.
MODELS = {name: f"core.models.{name}" for name in (
    "CornerNet", "CornerNet_Squeeze", "CornerNet_Saccade", "CornerNet_Tiny")}


def build_model(name: str, categories: int) -> nn.Module:
    """The model module `name`'s `model(categories=...)`; an unknown name lists the valid ones."""
    return importlib.import_module(lookup(MODELS, name, "model")).model(categories=categories)


def strip_module_prefix(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keys without the `module.` prefix the original's wrapper put on every saved key."""
    return {k.removeprefix("module."): v for k, v in state_dict.items()}


def load_original_state_dict(model: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Load weights saved by the original code (keys prefixed `module.`) or by this one, strictly.

    Raises RuntimeError naming the missing and unexpected keys when the sets differ; shape
    mismatches raise torch's RuntimeError.
    """
    stripped = strip_module_prefix(state_dict)
    own = model.state_dict().keys()
    missing = [k for k in own if k not in stripped]
    unexpected = [k for k in stripped if k not in own]
    if missing or unexpected:
        raise RuntimeError(
            f"state dict does not fit {type(model).__module__}.{type(model).__name__}: "
            f"{len(missing)} missing keys {missing[:10]}, "
            f"{len(unexpected)} unexpected keys {unexpected[:10]}")
    model.load_state_dict(stripped, strict=True)
