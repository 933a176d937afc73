"""Test helpers: the coco128 dataset as the samplers see it, and a plain numpy dense-target
builder that follows the original's drawing rules one object at a time (the renderer must match
it exactly)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from core.config import SystemConfig, load_config
from core.dbs import datasets


def coco128_db(coco128: Path, config: str, cache_dir: Path, image_dir: Path | None = None,
               seed: int = 0, **db_overrides: object):
    """The real COCO dataset over coco128 with the db section of configs/<config>.json."""
    _, db_config = load_config(config)
    db_config.update(
        image_dirs={"all": str(image_dir or coco128 / "images")},
        annotation_files={"all": str(coco128 / "annotations" / "instances_coco128.json")},
        **db_overrides)
    system = SystemConfig().update_config({"cache_dir": str(cache_dir), "seed": seed})
    return datasets["COCO"](db_config, split="all", sys_config=system)


def system_config(batch_size: int, strict_images: bool = False) -> SystemConfig:
    return SystemConfig().update_config({"batch_size": batch_size,
                                         "strict_images": strict_images})


def _radius(height: int, width: int, iou: float) -> float:
    """Smallest radius over the three corner-placement cases of the CornerNet paper."""
    a1, b1, c1 = 1, height + width, width * height * (1 - iou) / (1 + iou)
    r1 = (b1 - np.sqrt(b1 ** 2 - 4 * a1 * c1)) / (2 * a1)
    a2, b2, c2 = 4, 2 * (height + width), (1 - iou) * width * height
    r2 = (b2 - np.sqrt(b2 ** 2 - 4 * a2 * c2)) / (2 * a2)
    a3, b3, c3 = 4 * iou, -2 * iou * (height + width), (iou - 1) * width * height
    r3 = (b3 + np.sqrt(b3 ** 2 - 4 * a3 * c3)) / (2 * a3)
    return min(r1, r2, r3)


def _gaussian(radius: int) -> np.ndarray:
    diameter = 2 * radius + 1
    sigma = diameter / 6
    offsets = np.arange(diameter) - radius
    kernel = np.exp(-(offsets[None, :] ** 2 + offsets[:, None] ** 2) / (2 * sigma * sigma))
    kernel[kernel < np.finfo(np.float64).eps * kernel.max()] = 0
    return kernel


def _draw(heatmap: np.ndarray, x: int, y: int, radius: int) -> None:
    """Element-wise max of the gaussian centred at (x, y) into heatmap (h, w), clipped."""
    height, width = heatmap.shape
    left, right = min(x, radius), min(width - x, radius + 1)
    top, bottom = min(y, radius), min(height - y, radius + 1)
    region = heatmap[y - top:y + bottom, x - left:x + right]
    patch = _gaussian(radius)[radius - top:radius + bottom, radius - left:radius + right]
    np.maximum(region, patch, out=region)


def _corner_maps(boxes, classes, count, configs, categories):
    batch, slots = classes.shape
    height, width = configs["output_sizes"][0]
    tl_heat = np.zeros((batch, categories, height, width), np.float32)
    br_heat = np.zeros_like(tl_heat)
    mask = np.zeros((batch, slots), np.uint8)
    tl_off = np.zeros((batch, slots, 2), np.float32)
    br_off = np.zeros_like(tl_off)
    tl_ind = np.zeros((batch, slots), np.int64)
    br_ind = np.zeros_like(tl_ind)
    for b in range(batch):
        for n in range(count[b]):
            fx1, fy1, fx2, fy2 = boxes[b, n]
            x1, y1, x2, y2 = int(fx1), int(fy1), int(fx2), int(fy2)
            if not configs["gaussian_bump"]:
                radius = 0
            elif configs["gaussian_radius"] >= 0:
                radius = configs["gaussian_radius"]
            else:
                box_h, box_w = math.ceil(fy2 - fy1), math.ceil(fx2 - fx1)
                radius = max(0, int(_radius(box_h, box_w, configs["gaussian_iou"])))
            _draw(tl_heat[b, classes[b, n]], x1, y1, radius)
            _draw(br_heat[b, classes[b, n]], x2, y2, radius)
            mask[b, n] = 1
            tl_off[b, n] = [fx1 - x1, fy1 - y1]
            br_off[b, n] = [fx2 - x2, fy2 - y2]
            tl_ind[b, n] = y1 * width + x1
            br_ind[b, n] = y2 * width + x2
    return [tl_heat, br_heat, mask, tl_off, br_off, tl_ind, br_ind]


def dense_targets(batch: dict[str, np.ndarray], configs: dict, categories: int) -> list:
    """The targets of `render_targets`, as numpy arrays, in the same order."""
    targets = _corner_maps(batch["boxes"], batch["classes"], batch["num_objects"], configs,
                           categories)
    if "ignore_boxes" not in batch:
        return targets
    ignored = _corner_maps(batch["ignore_boxes"], batch["ignore_classes"], batch["num_ignore"],
                           configs, categories)
    targets += [(ignored[0] == 0).astype(np.float32), (ignored[1] == 0).astype(np.float32)]
    atts = []
    for scale, (att_h, att_w) in enumerate(configs["att_sizes"]):
        att = np.zeros((len(batch["boxes"]), 1, att_h, att_w), np.float32)
        for b, cells in enumerate(batch["att_cells"][:, scale]):
            for cell in cells[cells >= 0]:
                att[b, 0, cell // att_w, cell % att_w] = 1
        atts.append(att)
    targets.append(atts)
    return targets
