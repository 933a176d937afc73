"""CornerNet-Saccade's training sample (the original's semantics): the image is scaled so that a
randomly chosen reference object gets a random size in its own size band, then an input_size
crop is taken that contains that object (or is centred near it), then flipped and colour
jittered. Objects that end up too small or mostly cut off are not trained as objects: they are
shipped as ignore boxes (the loss ignores the heatmaps there). Attention targets mark the centre
of every object, per scale, in the cell of that scale's grid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from core.sample.cornernet import (
    Layout,
    cornernet_layout,
    finish_image,
    output_ratio,
    put_objects,
    sample_batch,
)
from core.sample.utils import (
    Placement,
    View,
    draw_color_jitter,
    place_boxes,
    render_view,
    whole_view,
)

if TYPE_CHECKING:
    from ..config import SystemConfig

# Size bands of the reference object (longest side, input pixels) and the ranges its scaled
# longest side is drawn from, as in the original.
_REF_BANDS = ((96, 96, 255), (32, 32, 97), (0, 16, 33))
# Half-width of the jitter around the reference object's centre for centred crops.
_CENTRE_JITTER = 15


def ref_scale(rng: np.random.Generator, boxes: np.ndarray,
              rand_crop: bool) -> tuple[float | None, int | None]:
    """(scale, index) of the reference object, or (None, None) for a plain random scale (no
    objects, or with rand_crop, 3 times in 10)."""
    if len(boxes) == 0 or (rand_crop and rng.uniform() > 0.7):
        return None, None
    ref = int(rng.integers(len(boxes)))
    size = max(boxes[ref, 3] - boxes[ref, 1], boxes[ref, 2] - boxes[ref, 0])
    low, high = next((low, high) for floor, low, high in _REF_BANDS if size > floor)
    return float(rng.integers(low, high)) / float(size), ref


def _crop_centre(rng: np.random.Generator, size: int, view: int,
                 ref: tuple[float, float] | None, centred: bool) -> int:
    """Crop centre along one axis of a scaled image of `size`: a random window containing the
    reference span `ref` (anywhere without one), or near the reference centre if `centred`."""
    if size <= view:
        return size // 2
    if ref is None or not centred:
        low = max(ref[1] - view, 0) if ref is not None else 0
        high = min(size - view, ref[0]) if ref is not None else size - view
        # A reference larger than the window (configs other than the original's) gets any crop
        # starting at `low`.
        return int(rng.integers(int(low), max(int(low), int(high)) + 1)) + view // 2
    mid = (ref[0] + ref[1]) // 2
    low = max(mid - rng.integers(0, _CENTRE_JITTER), 0)
    high = min(mid + rng.integers(0, _CENTRE_JITTER), size - 1)
    return int(rng.integers(int(low), int(high) + 1))


def saccade_view(rng: np.random.Generator, image_hw: tuple[int, int], boxes: np.ndarray,
                 configs: dict) -> View:
    """Scale (reference object or rand_scales), crop centre and flip; `boxes` (N, 4) are the
    objects clipped to the image."""
    height, width = image_hw
    in_h, in_w = configs["input_size"]
    scale, ref = ref_scale(rng, boxes, configs["rand_crop"])
    if scale is None:
        scale = float(rng.choice(configs["rand_scales"]))
    ref_box = boxes[ref, :4] * scale if ref is not None else None
    centred = configs["rand_center"] and rng.uniform() > 0.5
    xc = _crop_centre(rng, int(width * scale), in_w,
                      None if ref_box is None else (ref_box[0], ref_box[2]), centred)
    yc = _crop_centre(rng, int(height * scale), in_h,
                      None if ref_box is None else (ref_box[1], ref_box[3]), centred)
    return View((scale, scale), (float(in_h // 2 - yc), float(in_w // 2 - xc)),
                (0, 0, width, height), flip=bool(rng.uniform() > 0.5))


def attention_cells(boxes: np.ndarray, configs: dict, slots: int) -> np.ndarray:
    """(S, slots) int64 flat cells `y * w + x` of the attention grids (att_sizes) holding an
    object centre, -1 padded. An object counts at scale s when its longest side (input pixels)
    lies in att_ranges[s]; its cell is its centre divided by att_ratios[s]."""
    scales = zip(configs["att_sizes"], configs["att_ranges"], configs["att_ratios"])
    cells = np.full((len(configs["att_sizes"]), slots), -1, np.int64)
    longest = np.maximum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1])
    for s, ((att_h, att_w), (low, high), ratio) in enumerate(scales):
        sel = boxes[(longest >= low) & (longest <= high)]
        x = np.minimum(((sel[:, 0] + sel[:, 2]) / 2 / ratio).astype(np.int64), att_w - 1)
        y = np.minimum(((sel[:, 1] + sel[:, 3]) / 2 / ratio).astype(np.int64), att_h - 1)
        flat = np.unique(y * att_w + x)[:slots]
        cells[s, :len(flat)] = flat
    return cells


def cornernet_saccade(system_config: SystemConfig, db: Any, k_ind: int, data_aug: bool = True
                      ) -> tuple[dict, int]:
    """The original's call form of `cornernet_saccade_batch`: system.batch_size images, and
    system.strict_images."""
    return cornernet_saccade_batch(db, k_ind, system_config.batch_size, data_aug=data_aug,
                                   strict_images=system_config.strict_images)


def cornernet_saccade_layout(configs: dict) -> Layout:
    """CornerNet's arrays and Saccade's own: ignore boxes, their classes and count, attention
    cells (shapes in the `core.sample` docstring)."""
    slots = configs["max_objects"]
    return {
        **cornernet_layout(configs),
        "ignore_boxes": ((slots, 4), np.float32),
        "ignore_classes": ((slots,), np.int64),
        "num_ignore": ((), np.int64),
        "att_cells": ((len(configs["att_sizes"]), slots), np.int64),
    }


def cornernet_saccade_batch(db: Any, k_ind: int, batch_size: int, *, data_aug: bool = True,
                            strict_images: bool = False) -> tuple[dict, int]:
    """CornerNet-Saccade batch of `batch_size` images from db.db_inds[k_ind:]; returns (batch,
    next k_ind).

    data_aug False: whole image resized to input_size, no flip, normalisation-only colour.
    strict_images: an unreadable image raises instead of being skipped.
    """
    configs = db.configs
    lengths = {key: len(configs[key]) for key in ("att_sizes", "att_ranges", "att_ratios")}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"db.att_sizes, db.att_ranges and db.att_ratios give one entry per "
                         f"attention scale and must have equal lengths, got {lengths}")
    slots = configs["max_objects"]
    in_w = configs["input_size"][1]
    ratio = output_ratio(configs)

    def fill(batch: dict, slot: int, image: np.ndarray, detections: np.ndarray,
             meta: dict) -> None:
        height, width = image.shape[:2]
        identity = Placement(np.ones(2), np.zeros(2), (0, 0, width, height), False)
        inside, keep = place_boxes(detections, identity, identity.region, width)
        view = (saccade_view(db.rng, (height, width), inside, configs) if data_aug
                else whole_view((height, width), configs["input_size"]))
        placement = render_view(image, view, batch["image"][slot])
        boxes, kept = place_boxes(inside, placement, placement.region, in_w)
        keep = keep[kept]

        full = detections[keep, :4].astype(np.float64)
        full_area = ((full[:, 2] - full[:, 0]) * (full[:, 3] - full[:, 1])
                     * placement.a[0] * placement.a[1])
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        corners = np.trunc(boxes)
        longest = np.maximum(corners[:, 2] - corners[:, 0], corners[:, 3] - corners[:, 1])
        positive = (area / full_area > 0.5) & (longest >= configs["min_scale"])
        classes = detections[keep, 4].astype(np.int64) - 1

        batch["num_objects"][slot] = put_objects(
            boxes[positive] * ratio, classes[positive],
            batch["boxes"][slot], batch["classes"][slot], meta)
        batch["num_ignore"][slot] = put_objects(
            boxes[~positive] * ratio, classes[~positive],
            batch["ignore_boxes"][slot], batch["ignore_classes"][slot], meta)
        batch["att_cells"][slot] = attention_cells(boxes, configs, slots)
        # The original's Saccade sampler always jitters colour and lighting (it reads neither
        # rand_color nor lighting); so does this one, when augmenting.
        finish_image(batch, slot, db, draw_color_jitter(db.rng, True) if data_aug else None)

    return sample_batch(db, k_ind, batch_size, strict_images, cornernet_saccade_layout(configs),
                        fill, initial={"att_cells": -1})
