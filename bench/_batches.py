"""A shipped config at a small input size, and a compact training batch drawn for it without any
image files: what bench_syncs and the graph-break tests run the step and the loss on.

The batch follows the contract of `core.sample` (uint8 crops, a colour affine, sparse boxes, and
for Saccade the ignore boxes and attention cells), with objects in every image, so every loss term
has something to weigh; its values are random, its shapes are the config's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from core.config import load_config
from core.models.fit import model_size_rule


def small_config(name: str, side: int | None = None, **system: Any) -> tuple[Any, dict]:
    """configs/<name>.json with the smallest input its model takes at or above `side` (default:
    the model's smallest fitting side, at least 64), its output and attention sizes to match,
    and the `system` changes."""
    system_config, db = load_config(name)
    system_config = system_config.replace(**system) if system else system_config
    rule = model_size_rule(system_config.model_name)
    side = max(side or 64, 1)
    while not rule.fits(side):
        side += 1
    db.update(input_size=[side, side], output_sizes=[rule.output_size([side, side])])
    if rule.att_levels:
        db.update(att_sizes=rule.att_sizes([side, side]))
    return system_config, db


def compact_batch(db: dict, batch: int, objects: int = 3, seed: int = 0,
                  saccade: bool = False) -> dict[str, torch.Tensor]:
    """A compact training batch of `batch` images for the db config `db`, `objects` boxes each
    (fewer than db.max_objects slots), deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    height, width = db["input_size"]
    out_h, out_w = db["output_sizes"][0]
    slots, categories = db["max_objects"], db["categories"]

    def boxes_of(count: int) -> tuple[np.ndarray, np.ndarray]:
        boxes = np.zeros((batch, slots, 4), np.float32)
        x1 = rng.uniform(0, out_w * 0.6, (batch, count))
        y1 = rng.uniform(0, out_h * 0.6, (batch, count))
        boxes[:, :count] = np.stack([x1, y1, x1 + rng.uniform(2, out_w * 0.4, (batch, count)),
                                     y1 + rng.uniform(2, out_h * 0.4, (batch, count))], -1)
        classes = np.zeros((batch, slots), np.int64)
        classes[:, :count] = rng.integers(0, categories, (batch, count))
        return boxes, classes

    color = np.zeros((batch, 3, 4), np.float32)
    color[:, :, :3] = np.eye(3, dtype=np.float32) / 255.0 / 0.25
    color[:, :, 3] = -0.45 / 0.25
    boxes, classes = boxes_of(objects)
    out = {"image": rng.integers(0, 256, (batch, height, width, 3), dtype=np.uint8),
           "color": color, "boxes": boxes, "classes": classes,
           "num_objects": np.full(batch, objects, np.int64)}
    if saccade:
        ignore_boxes, ignore_classes = boxes_of(1)
        scales = db["att_sizes"]
        cells = np.full((batch, len(scales), slots), -1, np.int64)
        for s, (att_h, att_w) in enumerate(scales):
            cells[:, s, :objects] = rng.integers(0, att_h * att_w, (batch, objects))
        out.update(ignore_boxes=ignore_boxes, ignore_classes=ignore_classes,
                   num_ignore=np.ones(batch, np.int64), att_cells=cells)
    return {key: torch.from_numpy(value) for key, value in out.items()}
