"""Detector models, one module per model name, each exposing `model`."""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn


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
