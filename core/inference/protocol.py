"""What the inference code asks of a network, whatever runtime runs it (core/deploy)."""

from __future__ import annotations

from typing import Any, Protocol

import torch


class Network(Protocol):
    """A detector ready to test: `device` is where its inputs go, `test(images (B, 3, H, W)
    float32, **decode_kwargs)` returns `(detections (B, num_dets, 8),)`, with the attention
    maps as a second item for a model with attention heads."""

    device: torch.device

    def test(self, images: torch.Tensor, **kwargs: Any) -> tuple: ...
