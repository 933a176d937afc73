"""The constructions the CUDA tests (test_cuda.py) rest on, shared with the CPU tests that
check them where CI runs (test_cuda_construction.py): the fp16 loss scale, the scores'
tolerance between a GPU and the CPU, and the logits the decode tests feed."""

from __future__ import annotations

import torch

# The first fp16 loss scale of the training test: the largest gradient at initialisation (the
# heat head's bias, about 4.6) times this is far below fp16's largest value, 65504.
FP16_SCALE = 2.0 ** 10
# Sigmoid scores of a GPU and of the CPU: a few float32 ulps apart at most.
SCORE_RTOL = 4 * torch.finfo(torch.float32).eps


def decode_logits() -> torch.Tensor:
    """(3, 80, 64, 64) float32, seeded: mostly below the sigmoid's middle, as a heat map is."""
    return torch.randn(3, 80, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 5
