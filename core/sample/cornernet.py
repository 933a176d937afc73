"""CornerNet's training sample: random scale and crop around a random centre, resize, flip and
colour jitter (the original's semantics), shipped as a compact batch (see `core.sample`).

`sample_batch` is the loop both samplers share: walk db.db_inds from k_ind, shuffle on wrapping,
skip unreadable images, and let the sampler fill one slot per image. `cornernet_batch` takes the
values it reads; `cornernet` is the original's call form, which reads them from a SystemConfig.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from core.sample.utils import (
    ColorJitter,
    View,
    color_affine,
    draw_color_jitter,
    get_border,
    place_boxes,
    render_view,
    whole_view,
)
from core.utils.images import ImageReadError

if TYPE_CHECKING:
    from ..config import SystemConfig

# fill(batch, slot, image, detections, meta) writes one image's records into the batch.
Fill = Callable[[dict, int, np.ndarray, np.ndarray, dict], None]


# A sampling function's batch layout: key -> (shape of one image's array, dtype); the batch's
# arrays are these with the batch size B in front. The one source of both the arrays a sampler
# allocates and the bytes a prefetch ring slot takes (`core.sample.image_bytes`).
Layout = dict[str, tuple[tuple[int, ...], type]]


def cornernet_layout(configs: dict) -> Layout:
    """The arrays every sampler ships (shapes in the `core.sample` docstring)."""
    height, width = configs["input_size"]
    slots = configs["max_objects"]
    return {
        "image": ((height, width, 3), np.uint8),
        "color": ((3, 4), np.float32),
        "boxes": ((slots, 4), np.float32),
        "classes": ((slots,), np.int64),
        "num_objects": ((), np.int64),
    }


def allocate(layout: Layout, batch_size: int,
             initial: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """The arrays of `layout` for `batch_size` images, zeroed (or filled with `initial[key]`)."""
    initial = initial or {}
    # np.zeros where nothing else is asked: its pages come zeroed, written only as they are filled
    return {key: np.full((batch_size, *shape), initial[key], dtype) if initial.get(key)
            else np.zeros((batch_size, *shape), dtype) for key, (shape, dtype) in layout.items()}


def sample_batch(db: Any, k_ind: int, batch_size: int, strict_images: bool, layout: Layout,
                 fill: Fill, initial: dict[str, int] | None = None) -> tuple[dict, int]:
    """Build `batch_size` images from position `k_ind` of `db.db_inds`.

    Calls `db.shuffle_inds()` whenever the position wraps to 0. An image that raises ImageReadError
    is skipped and its path recorded in meta["skipped"] (re-raised under `strict_images`). Returns
    the batch (the arrays of `layout`, `initial` as `allocate` takes it, and "meta") and the
    next position.
    """
    batch: dict[str, Any] = allocate(layout, batch_size, initial)
    meta: dict[str, Any] = {"skipped": [], "dropped_objects": 0}
    db_size = db.db_inds.size
    slot = failures = 0
    while slot < batch_size:
        db_ind = db.db_inds[k_ind]
        k_ind = (k_ind + 1) % db_size
        if k_ind == 0:
            db.shuffle_inds()  # a new epoch: the original shuffles here too
        try:
            image = db.read_image(db_ind)
        except ImageReadError as err:
            if strict_images:
                raise
            meta["skipped"].append(str(err.path))
            failures += 1
            if failures >= db_size:
                raise ImageReadError(err.path, f"{err.reason}; none of the {db_size} images "
                                     f"of this split could be read: check db.image_dirs"
                                     ) from None
            continue
        failures = 0
        fill(batch, slot, image, db.detections(db_ind), meta)
        slot += 1
    batch["meta"] = meta
    return batch, k_ind


def put_objects(boxes: np.ndarray, classes: np.ndarray, out_boxes: np.ndarray,
                out_classes: np.ndarray, meta: dict) -> int:
    """Write up to len(out_boxes) objects into one image's slots; extras are dropped, counted
    in meta["dropped_objects"] (the trainer says so). Returns the number written."""
    count = min(len(boxes), len(out_boxes))
    if count < len(boxes):
        meta["dropped_objects"] += len(boxes) - count
    out_boxes[:count] = boxes[:count]
    out_classes[:count] = classes[:count]
    return count


def output_ratio(configs: dict) -> np.ndarray:
    """(4,) float64 factors from input to output-map coordinates, for x1, y1, x2, y2."""
    (in_h, in_w), (out_h, out_w) = configs["input_size"], configs["output_sizes"][0]
    return np.array([out_w / in_w, out_h / in_h] * 2)


def finish_image(batch: dict, slot: int, db: Any, jitter: ColorJitter | None) -> None:
    """Fold the colour jitter (None: normalisation only) for the crop in batch["image"][slot]."""
    means = np.array(cv2.mean(batch["image"][slot])[:3])
    batch["color"][slot] = color_affine(jitter, means, db)


def cornernet_view(rng: np.random.Generator, image_hw: tuple[int, int], configs: dict) -> View:
    """The original's random crop: a crop of input_size * scale (scale drawn from rand_scales)
    centred on a random point at least `border` (halved until it fits) from the image edges,
    padded with zeros where it leaves the image, then resized to input_size; flipped with
    probability 1/2. Without rand_crop the whole image is resized, then maybe flipped."""
    height, width = image_hw
    in_h, in_w = configs["input_size"]
    view = whole_view(image_hw, configs["input_size"])
    if configs["rand_crop"]:
        scale = rng.choice(configs["rand_scales"])
        crop_h, crop_w = int(in_h * scale), int(in_w * scale)
        w_border, h_border = get_border(configs["border"], width), get_border(configs["border"],
                                                                              height)
        ctx = int(rng.integers(w_border, width - w_border))
        cty = int(rng.integers(h_border, height - h_border))
        left, top = ctx - crop_w // 2, cty - crop_h // 2
        scale_x, scale_y = in_w / crop_w, in_h / crop_h
        view = View((scale_y, scale_x), (-top * scale_y, -left * scale_x),
                    (max(left, 0), max(top, 0), min(ctx + crop_w // 2, width),
                     min(cty + crop_h // 2, height)))
    return View(view.scale, view.shift, view.src_box, flip=bool(rng.uniform() > 0.5))


def cornernet(system_config: SystemConfig, db: Any, k_ind: int, data_aug: bool = True
              ) -> tuple[dict, int]:
    """The original's call form of `cornernet_batch`: system.batch_size images, and
    system.strict_images."""
    return cornernet_batch(db, k_ind, system_config.batch_size, data_aug=data_aug,
                           strict_images=system_config.strict_images)


def cornernet_batch(db: Any, k_ind: int, batch_size: int, *, data_aug: bool = True,
                    strict_images: bool = False) -> tuple[dict, int]:
    """CornerNet / CornerNet-Squeeze batch of `batch_size` images from db.db_inds[k_ind:];
    returns (batch, next k_ind).

    data_aug False: whole image resized to input_size, no flip, normalisation-only colour.
    strict_images: an unreadable image raises instead of being skipped.
    """
    configs = db.configs
    in_h, in_w = configs["input_size"]
    ratio = output_ratio(configs)

    def fill(batch: dict, slot: int, image: np.ndarray, detections: np.ndarray,
             meta: dict) -> None:
        hw = image.shape[:2]
        view = cornernet_view(db.rng, hw, configs) if data_aug else whole_view(
            hw, configs["input_size"])
        placement = render_view(image, view, batch["image"][slot])
        boxes, keep = place_boxes(detections, placement, (0, 0, in_w, in_h), in_w)
        batch["num_objects"][slot] = put_objects(
            boxes * ratio, detections[keep, 4].astype(np.int64) - 1,
            batch["boxes"][slot], batch["classes"][slot], meta)
        jitter = None
        if data_aug and configs["rand_color"]:
            jitter = draw_color_jitter(db.rng, configs["lighting"])
        finish_image(batch, slot, db, jitter)

    return sample_batch(db, k_ind, batch_size, strict_images, cornernet_layout(configs), fill)
