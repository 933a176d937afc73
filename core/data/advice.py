"""Settings that fit the data: from a training split's own image and box sizes, the input
size, crop scale range and test scales to change, with the share of objects the training crops
remove today and under the suggestion, as a `--set` line to paste.

The rule (CornerNet's own proportions on COCO: 511-pixel inputs, crops of 0.6-1.4 input sizes
on images of about 640 pixels, tested at full size):

- the input grows (to a multiple of 32, at most 512) until the small objects (the 10th
  percentile of sqrt(box area)) cover `SMALL_OBJECT_PX` input pixels when the image is scaled to
  the input; it never shrinks, so a config keeps at least its own compute;
- the crop scales become 0.6-1.4 (step 0.1) times S / input, S the median long side of the
  images, so that a crop spans about the image as in the original, and the test scale
  input / S, the mean scale the network was trained at;
- nothing is suggested for a setting within 1.5 times of its suggested value.

The crop loss is measured, not modelled: the config's own view drawing (`cornernet_view`) on
sampled images, a few views each, today and under the suggestion, with the same draws.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..dbs.converted import image_size
from ..sample import sampling_function
from ..sample.cornernet import cornernet_view
from ..sample.utils import place_boxes, render_view

SMALL_OBJECT_PX = 12  # input pixels of a small object after the image is scaled to the input
MAX_INPUT = 512
NEAR = 1.5  # a setting within this factor of its suggestion is left as it is
VIEWS = 4  # training views drawn per sampled image


def _removed(boxes: np.ndarray, image_hw: tuple[int, int], configs: dict,
             rng: np.random.Generator) -> int:
    """How many of `boxes` one training view of an image of `image_hw` leaves out entirely."""
    view = cornernet_view(rng, image_hw, configs)
    in_h, in_w = configs["input_size"]
    placement = render_view(np.zeros((*image_hw, 3), np.uint8), view,
                            np.zeros((in_h, in_w, 3), np.uint8))
    _, rows = place_boxes(boxes, placement, (0, 0, in_w, in_h), in_w)
    return len(boxes) - len(rows)


def _scales(configs: dict) -> np.ndarray:
    return np.asarray(configs["rand_scales"], dtype=np.float64).reshape(-1)


def suggest(configs: dict, long_side: float, small: float) -> dict[str, Any]:
    """The db settings to change ({key: value}, empty when everything fits), by the rule of
    the module docstring, for images of median long side `long_side` and small objects of
    `small` pixels."""
    in_h, in_w = configs["input_size"]
    size = max(in_h, in_w)
    changes: dict[str, Any] = {}
    wanted = 32 * math.ceil(SMALL_OBJECT_PX * long_side / max(small, 1.0) / 32)
    new = min(max(wanted, size), max(size, MAX_INPUT))
    out_h = configs["output_sizes"][0][0]
    if new > NEAR * size and in_h == in_w and (new * out_h) % in_h == 0:
        changes["input_size"] = [new, new]
        changes["output_sizes"] = [[new * o // in_h, new * o // in_h]
                                   for o, _ in configs["output_sizes"]]
        size = new
    k = long_side / size
    if configs["rand_crop"] and not 1 / NEAR <= float(_scales(configs).mean()) / k <= NEAR:
        changes.update(rand_scales=None, rand_scale_min=round(0.6 * k, 2),
                       rand_scale_max=round(1.4 * k, 2), rand_scale_step=round(0.1 * k, 3))
    test = round(size / long_side, 2)
    current = float(np.mean(configs["test_scales"]))
    if not 1 / NEAR <= current / test <= NEAR:
        changes["test_scales"] = [test]
    return changes


def apply(configs: dict, changes: dict) -> dict:
    """`configs` with `changes`, `rand_scales: null` expanded as the config loader does."""
    out = {**configs, **changes}
    if "rand_scales" in changes:
        out["rand_scales"] = np.arange(out["rand_scale_min"], out["rand_scale_max"],
                                       out["rand_scale_step"])
    return out


def set_line(changes: dict) -> str:
    """The `--set` arguments of `changes`, in the form the command line reads."""
    return "--set " + " ".join(f"db.{key}={json.dumps(value, separators=(',', ':'))}"
                               for key, value in changes.items())


# Settings that change together: a --set of one keeps the config's whole group.
GROUPS = ({"input_size", "output_sizes"},
          {"rand_scales", "rand_scale_min", "rand_scale_max", "rand_scale_step"},
          {"test_scales"})


def settings_advice(db: Any, sampling: str, samples: int = 64, seed: int = 0,
                    held: frozenset[str] = frozenset()) -> dict:
    """The advice for the training split `db` (see the module docstring): image and object
    sizes, the crop loss today, the changes and the crop loss under them, the `--set` line.
    The db keys in `held` (set by the user) are not changed, nor the others of their group."""
    if not sampling_function(sampling).advice:
        return {"note": f"no settings advice for sampling_function '{sampling}' (its crops "
                        f"are drawn around objects)"}
    sizes, small, objects = [], [], []
    for ind in range(len(db)):
        size = image_size(Path(db.image_path(ind)))
        if size is None:
            continue
        boxes = db.detections(ind)
        sizes.append(max(size))
        small += np.sqrt(np.maximum((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]),
                                    0.0)).tolist()
        if len(boxes):
            objects.append((ind, size))
    if not small:
        return {"note": "no objects to advise from"}
    long_side = float(np.median(sizes))
    small_px = float(np.percentile(small, 10))
    kept = set().union(*(group for group in GROUPS if group & held))
    changes = {key: value for key, value in suggest(db.configs, long_side, small_px).items()
               if key not in kept}
    rng = np.random.default_rng(seed)
    picked = [objects[k] for k in sorted(rng.choice(len(objects), min(samples, len(objects)),
                                                    replace=False))]
    today = _crop_loss(db, picked, db.configs, seed)
    after = _crop_loss(db, picked, apply(db.configs, changes), seed) if changes else today
    return {"median_long_side": long_side, "small_object_px": small_px,
            "sampled_images": len(picked), "views_each": VIEWS,
            "removed_today": today, "changes": changes, "removed_after": after,
            "set": set_line(changes) if changes else ""}


def _crop_loss(db: Any, picked: list[tuple[int, tuple[int, int]]], configs: dict,
               seed: int) -> float:
    """The share of objects that the training views remove entirely, on the images `picked`,
    VIEWS draws each (the same draws for every `configs`)."""
    if not configs["rand_crop"]:
        return 0.0
    rng = np.random.default_rng(seed)
    removed = total = 0
    for ind, (width, height) in picked:
        boxes = db.detections(ind)
        for _ in range(VIEWS):
            removed += _removed(boxes, (height, width), configs, rng)
            total += len(boxes)
    return removed / max(total, 1)


def advice_lines(advice: dict) -> list[str]:
    """What the check prints of `advice`."""
    if "note" in advice:
        return [f"settings: {advice['note']}"]
    head = (f"settings: images of median long side {advice['median_long_side']:g} px, small "
            f"objects (10th percentile) {advice['small_object_px']:.0f} px; the training crops "
            f"remove {advice['removed_today']:.1%} of the objects ({advice['sampled_images']} "
            f"images, {advice['views_each']} views each)")
    if not advice["changes"]:
        return [head, "  the input size, crop scales and test scales fit these sizes"]
    after = (f"  under the settings below they would remove {advice['removed_after']:.1%}; to "
             f"train and test with them, add:")
    return [head, after, f"  {advice['set']}"]

