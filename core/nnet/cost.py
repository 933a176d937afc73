"""What a model costs: parameters, FLOPs of a forward, and activation memory of a training step.

FLOPs are counted by `torch.utils.flop_counter.FlopCounterMode` (2 per multiply-accumulate of
convolutions and matrix products; element-wise work, pooling and decoding are not counted) on the
meta device, so even CornerNet at 511 x 511 is counted in a second without memory. The test
forward is the test path's network (the backbone and the last stack's heads, and the attention
maps for Saccade); the training forward is every stack's heads.

Activation memory is what a training step holds between its forward and its backward: on CUDA
the measured peak of allocated memory during forward and backward of one image, above what was
allocated before; elsewhere the bytes of the tensors the forward saves for the backward
(counted once per storage, weights left out), counted on the meta device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def parameter_counts(model: nn.Module) -> dict[str, Any]:
    """{"total", "trainable", "modules": {top-level child name: count}} of `model`."""
    modules = {name: sum(p.numel() for p in child.parameters())
               for name, child in model.named_children()}
    return {"total": sum(p.numel() for p in model.parameters()),
            "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "modules": {name: count for name, count in modules.items() if count}}


def _test_network(model: nn.Module, image: torch.Tensor) -> list[torch.Tensor]:
    """The network part of the test path (decoding left out): backbone, last stack's heads,
    and the attention maps of that stack if the model has them."""
    heads, atts = model.last_stack(image)
    return [*heads, *atts]


def forward_flops(model: nn.Module, size: tuple[int, int], test: bool) -> int:
    """FLOPs of one forward of a (1, 3, H, W) image through `model` (on the meta device)."""
    image = torch.empty(1, 3, *size, device="meta")
    model.train(not test)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        if test:
            _test_network(model, image)
        else:
            model(image)
    return int(counter.get_total_flops())


def _flat(outs: Any) -> list[torch.Tensor]:
    if isinstance(outs, torch.Tensor):
        return [outs]
    return [t for item in outs for t in _flat(item)]


def saved_activation_bytes(model: nn.Module, size: tuple[int, int]) -> int:
    """Bytes of the tensors a training forward of one (1, 3, H, W) image saves for backward,
    each storage once, the model's own parameters and buffers left out."""
    weights = {t.untyped_storage()._cdata for t in [*model.parameters(), *model.buffers()]}
    held: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in weights:
            held[storage._cdata] = max(held.get(storage._cdata, 0), storage.nbytes())
        return tensor

    model.train()
    image = torch.empty(1, 3, *size, device=next(model.parameters()).device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(image)
    return sum(held.values())


def cuda_step_peak_bytes(model: nn.Module, size: tuple[int, int], device: torch.device) -> int:
    """Peak CUDA memory allocated by forward and backward of one image (the sum of the outputs
    as the loss) above what was allocated before."""
    model.train()
    image = torch.randn(1, 3, *size, device=device)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    sum(out.float().sum() for out in _flat(model(image))).backward()
    torch.cuda.synchronize(device)
    model.zero_grad(set_to_none=True)
    return torch.cuda.max_memory_allocated(device) - before
