"""Canvas buckets: a few fixed network input sizes at test time (db.test_buckets).

Every image gets its own canvas (`side | 127`, the image centred on it: core/inference/
cornernet.py), so a test run on COCO feeds the network a dozen input shapes. On a GPU each new
shape builds new cuDNN plans for about 210 convolutions (CornerNet-Squeeze's test.py spent
1.09 s per image on an H200 against 2.1 ms for the network alone; bench/README.md), and images
of different sizes cannot share a forward. With buckets, a canvas is pasted at the top-left
corner of the smallest bucket that holds it: the network sees at most one shape per bucket,
and the canvas keeps its pixels' places on the grid of every hourglass level (bucket sides are
`k * 128 - 1` too), so the image's placement (border, output/input ratios, the flip's mirror
width) is the canvas's own and the output over the canvas is the top-left part of the output
over the bucket. A canvas larger than every bucket keeps its own size.

On the CPU there are no plans to build, and a larger canvas is only more arithmetic: `auto`
(the default) buckets on a GPU only, so a CPU run computes exactly what it computed before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

# `auto` on a GPU: the canvases of COCO-sized images (sides up to 640) at scale 1 in five shapes
# (coco128's validation images: 8 canvases in 4 buckets), and 255 x 255 for small images.
GPU_BUCKETS = ((255, 255), (511, 511), (511, 767), (767, 511), (767, 767))
Bucket = tuple[int, int]


def canvas_buckets(setting: Any, device: torch.device | str) -> tuple[Bucket, ...]:
    """The buckets of `db.test_buckets` for a network on `device`: "auto" is `GPU_BUCKETS`
    off the CPU and none on it; a list is those sizes everywhere."""
    if setting == "auto":
        return GPU_BUCKETS if torch.device(device).type != "cpu" else ()
    return tuple((int(height), int(width)) for height, width in setting)


def bucket_of(canvas_hw: tuple[int, int], buckets: tuple[Bucket, ...]) -> Bucket:
    """The smallest bucket (by area, the first of equal ones) holding a canvas of `canvas_hw`;
    the canvas's own size when none holds it."""
    height, width = canvas_hw
    holding = [b for b in buckets if b[0] >= height and b[1] >= width]
    return min(holding, key=lambda b: b[0] * b[1]) if holding else (height, width)


def paste(pixels: np.ndarray, bucket: Bucket) -> np.ndarray:
    """Canvases (N, h, w, 3) uint8 at the top-left corner of zero canvases (N, *bucket, 3);
    `pixels` itself when it already has the bucket's size."""
    if pixels.shape[1:3] == bucket:
        return pixels
    out = np.zeros((pixels.shape[0], *bucket, pixels.shape[3]), dtype=pixels.dtype)
    out[:, :pixels.shape[1], :pixels.shape[2]] = pixels
    return out
