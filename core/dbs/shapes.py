"""Shapes: a generated detection dataset that a small model learns in minutes on a CPU.

On first use it writes, under `<data_dir>/shapes/`, JPEGs of 1-6 filled shapes (rectangle,
ellipse, triangle, cross) on textured backgrounds, and COCO-format annotation files; then it
reads them through the COCO code path. Every image is a pure function of (generation seed, split,
index), so the files are the same on every machine and in every process.

Layout: images/{train,val}/NNNNNN.jpg, annotations/instances_{train,val}.json, and COMPLETE.json,
written last, holding the generation parameters. The set is generated in a sibling folder and
renamed into place under an exclusive file lock, so concurrent processes (DDP ranks) wait for one
generation and an interrupted one is redone, never half used.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import cv2
import numpy as np

from core.config import ConfigError, DatasetSettings, SystemConfig, lookup

from .coco import COCO
from .detection import Log, to_stderr

SHAPE_CLASSES = ("rectangle", "ellipse", "triangle", "cross")
SPLITS = {"train": 0, "val": 1}
GENERATION_SEED = 20190501
# Part of the completeness marker: bump it whenever the drawing changes, to regenerate.
GENERATOR_VERSION = 2
JPEG_QUALITY = 95

_MIN_SIDE, _MAX_SIDE = 128, 192
_MIN_OBJECT, _MAX_OBJECT = 12, 100
_MIN_VISIBLE = 0.6  # fraction of its pixels an occluded object keeps visible
_MIN_BOX_IOU = 0.75  # IoU of an occluded object's visible box with its whole box


def _muted_colour(rng: np.random.Generator) -> np.ndarray:
    """(3,) float32 BGR of low saturation: backgrounds never compete with the objects."""
    hsv = np.array([[[rng.integers(0, 180), rng.integers(0, 90), rng.integers(50, 200)]]],
                   dtype=np.uint8)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0].astype(np.float32)


def _background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """(H, W, 3) float32: blotchy noise, a linear gradient or soft stripes."""
    first, second = _muted_colour(rng), _muted_colour(rng)
    kind = rng.integers(3)
    if kind == 0:
        noise = rng.normal(0.0, 1.0, (height // 8 + 1, width // 8 + 1)).astype(np.float32)
        weight = cv2.resize(noise, (width, height), interpolation=cv2.INTER_CUBIC)
        weight = np.clip(0.5 + 0.25 * weight, 0.0, 1.0)
    else:
        angle = rng.uniform(0.0, np.pi)
        ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
        along = xs * np.cos(angle) + ys * np.sin(angle)
        if kind == 1:
            weight = (along - along.min()) / max(float(np.ptp(along)), 1.0)
        else:
            period = rng.uniform(6.0, 24.0)
            weight = 0.5 + 0.5 * np.sin(along * (2 * np.pi / period))
    return first + weight[..., None] * (second - first)


def _shape_mask(rng: np.random.Generator, kind: str, height: int, width: int) -> np.ndarray:
    """(H, W) bool mask of one shape of class `kind`, placed wholly inside the image."""
    size = np.exp(rng.uniform(np.log(_MIN_OBJECT), np.log(min(_MAX_OBJECT, 0.75 * min(height,
                                                                                      width)))))
    aspect = np.exp(rng.uniform(np.log(0.5), np.log(2.0)))
    w = round(max(size * min(aspect, 1.0), 8))
    h = round(max(size / max(aspect, 1.0), 8))
    x0, y0 = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
    x1, y1 = x0 + w - 1, y0 + h - 1
    canvas = np.zeros((height, width), dtype=np.uint8)
    if kind == "rectangle":
        cv2.rectangle(canvas, (x0, y0), (x1, y1), 1, thickness=-1)
    elif kind == "ellipse":
        centre = ((x0 + x1) // 2, (y0 + y1) // 2)
        cv2.ellipse(canvas, centre, ((w - 1) // 2, (h - 1) // 2), 0, 0, 360, 1, thickness=-1)
    elif kind == "triangle":
        # The apex sits on one side of the box, the base spans the opposite side.
        apex = rng.uniform(0.2, 0.8)
        corners = {
            0: [(x0 + apex * (w - 1), y0), (x0, y1), (x1, y1)],
            1: [(x0 + apex * (w - 1), y1), (x0, y0), (x1, y0)],
            2: [(x0, y0 + apex * (h - 1)), (x1, y0), (x1, y1)],
            3: [(x1, y0 + apex * (h - 1)), (x0, y0), (x0, y1)],
        }[int(rng.integers(4))]
        cv2.fillPoly(canvas, [np.round(corners).astype(np.int32)], 1)
    else:
        bar_w = max(round(w * rng.uniform(0.25, 0.4)), 3)
        bar_h = max(round(h * rng.uniform(0.25, 0.4)), 3)
        cx, cy = x0 + (w - bar_w) // 2, y0 + (h - bar_h) // 2
        cv2.rectangle(canvas, (cx, y0), (cx + bar_w - 1, y1), 1, thickness=-1)
        cv2.rectangle(canvas, (x0, cy), (x1, cy + bar_h - 1), 1, thickness=-1)
    return canvas.astype(bool)


def _box(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Pixel extent (x1, y1, x2, y2) of a non-empty mask, x2 and y2 exclusive."""
    ys, xs = np.nonzero(mask)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def _iou(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    inter = max(min(a[2], b[2]) - max(a[0], b[0]), 0) * max(min(a[3], b[3]) - max(a[1], b[1]), 0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


def render_image(split: str, index: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Image `index` of `split` before JPEG encoding.

    Returns the image (H, W, 3) uint8 BGR, its label map (H, W) int16 (0 background, k the k-th
    object's visible pixels) and the classes [cls of object 1, ...] in 1..len(SHAPE_CLASSES).
    """
    rng = np.random.default_rng([GENERATION_SEED, SPLITS[split], index])
    height, width = (int(v) for v in rng.integers(_MIN_SIDE, _MAX_SIDE + 1, size=2))
    image = _background(rng, height, width)
    label = np.zeros((height, width), dtype=np.int16)
    classes: list[int] = []
    full_boxes: list[tuple[int, int, int, int]] = []
    areas: list[int] = []
    target = int(rng.integers(1, 7))
    for _ in range(8 * target):
        if len(classes) == target:
            break
        cls = int(rng.integers(len(SHAPE_CLASSES))) + 1
        mask = _shape_mask(rng, SHAPE_CLASSES[cls - 1], height, width)
        candidate = label.copy()
        candidate[mask] = len(classes) + 1
        visible = np.bincount(candidate.ravel(), minlength=len(classes) + 2)[1:]
        if any(visible[k] < _MIN_VISIBLE * areas[k]
               or _iou(_box(candidate == k + 1), full_boxes[k]) < _MIN_BOX_IOU
               for k in range(len(classes))):
            continue
        label = candidate
        classes.append(cls)
        full_boxes.append(_box(mask))
        areas.append(int(mask.sum()))

    hues: list[int] = []
    for k in range(1, len(classes) + 1):
        # Keep each object's hue apart from the others' so touching objects stay separable.
        hue = int(rng.integers(180))
        for _ in range(10):
            if all(min(abs(hue - other), 180 - abs(hue - other)) >= 20 for other in hues):
                break
            hue = int(rng.integers(180))
        hues.append(hue)
        hsv = np.array([[[hue, rng.integers(150, 256), rng.integers(150, 256)]]], dtype=np.uint8)
        image[label == k] = cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0]
    image += rng.normal(0.0, 4.0, image.shape).astype(np.float32)
    return np.clip(np.round(image), 0, 255).astype(np.uint8), label, classes


def _write_split(root: Path, split: str, count: int) -> None:
    """Images and the instances json of one split."""
    image_dir = root / "images" / split
    image_dir.mkdir(parents=True)
    images, annotations = [], []
    for index in range(count):
        image, label, classes = render_image(split, index)
        file_name = f"{index:06d}.jpg"
        # Full-resolution chroma: subsampling would smear the colour edges that the boxes follow.
        ok, encoded = cv2.imencode(".jpg", image, [
            cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY,
            cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444])
        if not ok:
            raise OSError(f"cannot encode {image_dir / file_name}")
        (image_dir / file_name).write_bytes(encoded.tobytes())
        images.append({"id": index + 1, "file_name": file_name,
                       "height": image.shape[0], "width": image.shape[1]})
        for k, cls in enumerate(classes, start=1):
            x1, y1, x2, y2 = _box(label == k)
            annotations.append({
                "id": len(annotations) + 1, "image_id": index + 1, "category_id": cls,
                "bbox": [x1, y1, x2 - x1, y2 - y1], "area": int((label == k).sum()),
                "iscrowd": 0, "segmentation": [[x1, y1, x2, y1, x2, y2, x1, y2]],
            })
    categories = [{"id": cls, "name": name, "supercategory": "shape"}
                  for cls, name in enumerate(SHAPE_CLASSES, start=1)]
    (root / "annotations").mkdir(exist_ok=True)
    (root / "annotations" / f"instances_{split}.json").write_text(json.dumps(
        {"info": {"description": "Shapes, generated"}, "images": images,
         "annotations": annotations, "categories": categories}))


def _params(num_train: int, num_val: int) -> dict:
    return {"version": GENERATOR_VERSION, "seed": GENERATION_SEED, "classes": list(SHAPE_CLASSES),
            "jpeg_quality": JPEG_QUALITY, "num_train_images": num_train,
            "num_val_images": num_val}


def _complete(root: Path, params: dict) -> bool:
    """Whether `root` holds a whole set generated with `params`."""
    try:
        if json.loads((root / "COMPLETE.json").read_text()) != params:
            return False
    except (OSError, ValueError):
        return False
    counts = {"train": params["num_train_images"], "val": params["num_val_images"]}
    return all((root / "annotations" / f"instances_{split}.json").is_file()
               and all((root / "images" / split / f"{i:06d}.jpg").is_file() for i in range(n))
               for split, n in counts.items())


def ensure_shapes(root: Path, num_train: int, num_val: int, log: Log = to_stderr) -> Path:
    """Generate the set under `root` unless a complete one with these parameters is there,
    saying so to `log`."""
    params = _params(num_train, num_val)
    if _complete(root, params):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.with_name(root.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if _complete(root, params):  # another process generated it while we waited
            return root
        log(f"generating the Shapes dataset ({num_train} train, {num_val} val images) in "
            f"{root}")
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        _write_split(partial, "train", num_train)
        _write_split(partial, "val", num_val)
        (partial / "COMPLETE.json").write_text(json.dumps(params))
        if root.exists():
            shutil.rmtree(root)
        os.rename(partial, root)
    return root


class Shapes(COCO):
    """The generated Shapes dataset, split keys "train" and "val"; see DETECTION."""

    generated = True  # each split drawn from its own seeds: no image is in two splits

    def __init__(self, db_config: dict, split: str | None = None,
                 settings: DatasetSettings | None = None, log: Log = to_stderr, *,
                 sys_config: SystemConfig | None = None) -> None:
        super().__init__(db_config, split, settings, log, sys_config=sys_config)
        if split is None:
            self._set_classes(list(range(1, len(SHAPE_CLASSES) + 1)), list(SHAPE_CLASSES))

    def _split_files(self, split: str, settings: DatasetSettings) -> tuple[Path, Path]:
        if self._configs["image_dirs"] is not None or self._configs["annotation_files"] is not None:
            raise ConfigError("the Shapes dataset writes its own files: remove db.image_dirs and "
                              "db.annotation_files, or use system.dataset \"COCO\" for your own")
        lookup(SPLITS, split, "Shapes split")
        root = ensure_shapes(settings.data_dir / "shapes", self._configs["num_train_images"],
                             self._configs["num_val_images"], self.log)
        return root / "images" / split, root / "annotations" / f"instances_{split}.json"
