"""Drawing detections on images: boxes, class names and scores, one stable colour per class."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

FONT = cv2.FONT_HERSHEY_SIMPLEX
# Ground truth is white; class colours (class_color) stay below 255 in every channel.
GT_COLOR = (255, 255, 255)


def class_color(name: str) -> tuple[int, int, int]:
    """A bright BGR colour derived from the class name, the same in every run and picture."""
    rng = np.random.default_rng(zlib.crc32(name.encode("utf-8")))
    return tuple(int(c) for c in (rng.random(3) * 0.6 + 0.4) * 255)


Rect = tuple[int, int, int, int]  # (left, top, right, bottom), right and bottom excluded
# A label's cost per pixel it covers: of another label (never, if avoidable), of its own box's
# inside (the object it names), of another box's inside.
COVER_LABEL, COVER_OWN, COVER_OTHER = 100, 10, 1


def _overlap(a: Rect, b: Rect) -> int:
    """The pixels two rectangles share."""
    return (max(0, min(a[2], b[2]) - max(a[0], b[0]))
            * max(0, min(a[3], b[3]) - max(a[1], b[1])))


def _inside(box: Rect) -> Rect:
    """The pixels inside a box drawn 2 pixels wide on its corners (x1, y1, x2, y2)."""
    x1, y1, x2, y2 = box
    return (x1 + 2, y1 + 2, x2 - 1, y2 - 1)


def _candidates(box: Rect, size: tuple[int, int], shape: tuple[int, ...]) -> list[Rect]:
    """Where a (w, h) label may go, in order of preference: outside the box above or below it
    at either corner, beside it, stacked one or two labels further out (when many boxes share a
    corner), then inside its top-left corner; each moved into the image."""
    (w, h), (x1, y1, x2, y2) = size, box
    spots = [(x1 - 1, y1 - 1 - h), (x1 - 1, y2 + 2), (x2 + 2 - w, y1 - 1 - h),
             (x2 + 2 - w, y2 + 2), (x2 + 2, y1 - 1), (x1 - 1 - w, y1 - 1)]
    spots += [(x1 - 1, y1 - 1 - h * k) for k in (2, 3)] + [(x1 - 1, y2 + 2 + h * k)
                                                            for k in (1, 2)]
    spots.append((x1 + 2, y1 + 2))
    height, width = shape[:2]
    rects = []
    for left, top in spots:
        left, top = min(max(left, 0), max(width - w, 0)), min(max(top, 0), max(height - h, 0))
        rects.append((left, top, left + w, top + h))
    return rects


def place_labels(boxes: list[Rect], sizes: list[tuple[int, int]],
                 shape: tuple[int, ...]) -> list[Rect]:
    """The rectangle of each box's label, placed in the order given (the first: most wanted):
    inside the picture of `shape` (H, W, ...) whenever it fits, off every earlier label and off
    the object it names where a place allows it, else where it covers least
    (`COVER_LABEL`, `COVER_OWN`, `COVER_OTHER` per pixel covered).

    Args:
        boxes: (x1, y1, x2, y2) int corners of the drawn boxes, in pixels.
        sizes: (w, h) of each label.
    """
    insides = [_inside(box) for box in boxes]
    placed: list[Rect] = []
    for k, (box, size) in enumerate(zip(boxes, sizes)):
        def cost(rect: Rect, k: int = k) -> int:
            return (COVER_LABEL * sum(_overlap(rect, other) for other in placed)
                    + COVER_OWN * _overlap(rect, insides[k])
                    + COVER_OTHER * sum(_overlap(rect, inside) for j, inside in
                                        enumerate(insides) if j != k))
        placed.append(min(_candidates(box, size, shape), key=cost))  # ties: the first
    return placed


def _label_size(label: str, font_scale: float) -> tuple[int, int, int]:
    """(w, h, baseline) of a label's filled rectangle and its text's baseline below the top."""
    (tw, th), base = cv2.getTextSize(label, FONT, font_scale, 1)
    return tw + 4, th + base + 3, th + 1


def draw_detections(image: np.ndarray, bboxes: dict[str, np.ndarray], thresh: float = 0.5,
                    font_scale: float = 0.5) -> np.ndarray:
    """Draw the boxes scoring above `thresh` with a "name score" label each, placed by
    `place_labels` (the best-scoring box's label first).

    Args:
        image: (H, W, 3) uint8 BGR; not modified.
        bboxes: {class name: (n, 5) float [x1, y1, x2, y2, score]} in image pixels.
        thresh: only boxes with a score above it are drawn.
        font_scale: size of the label text (smaller for a label wider than the picture).

    Returns:
        (H, W, 3) uint8 BGR copy with the drawings.
    """
    image = image.copy()
    rows = sorted(((float(score), name, tuple(int(v) for v in (x1, y1, x2, y2)))
                   for name, boxes in bboxes.items()
                   for x1, y1, x2, y2, score in np.asarray(boxes).reshape(-1, 5)[:, :5]
                   if score > thresh), key=lambda row: -row[0])
    labels, scales = [f"{name} {score:.2f}" for score, name, _ in rows], []
    for label in labels:
        scale = font_scale
        while _label_size(label, scale)[0] > image.shape[1] and scale > 0.2:
            scale *= 0.8
        scales.append(scale)
    sizes = [_label_size(label, scale) for label, scale in zip(labels, scales)]
    for _, name, box in rows:
        cv2.rectangle(image, box[:2], box[2:], class_color(name), 2)
    spots = place_labels([box for _, _, box in rows], [size[:2] for size in sizes], image.shape)
    for (_, name, _), label, scale, size, spot in zip(rows, labels, scales, sizes, spots):
        cv2.rectangle(image, spot[:2], (spot[2] - 1, spot[3] - 1), class_color(name), -1)
        cv2.putText(image, label, (spot[0] + 2, spot[1] + size[2]), FONT, scale, (0, 0, 0), 1,
                    cv2.LINE_AA)
    return image


def draw_ground_truth(image: np.ndarray, boxes: dict[str, np.ndarray],
                      font_scale: float = 0.4) -> np.ndarray:
    """Draw ground-truth boxes thin and white, labelled "gt name" below their top-left corner.

    Args:
        image: (H, W, 3) uint8 BGR; not modified.
        boxes: {class name: (n, >=4) [x1, y1, x2, y2, ...]} in image pixels.

    Returns:
        (H, W, 3) uint8 BGR copy with the drawings.
    """
    image = image.copy()
    for name, rows in boxes.items():
        for x1, y1, x2, y2 in np.asarray(rows)[:, :4]:
            x1, y1, x2, y2 = (int(v) for v in (x1, y1, x2, y2))
            cv2.rectangle(image, (x1, y1), (x2, y2), GT_COLOR, 1)
            cv2.putText(image, f"gt {name}", (x1 + 2, y1 + 12), FONT, font_scale, GT_COLOR, 1,
                        cv2.LINE_AA)
    return image


def save_detections(path: Path, image: np.ndarray, top_bboxes: dict[int, np.ndarray],
                    cls2name: Callable[[int], str], thresh: float = 0.5,
                    ground_truth: dict[str, np.ndarray] | None = None) -> Path:
    """Write `image` with the detections of `top_bboxes` ({cls 1..C: (n, 5)}) scoring above
    `thresh` and, if given, the `ground_truth` boxes ({class name: (n, 4)}), as a JPEG."""
    named = {cls2name(cls): boxes for cls, boxes in top_bboxes.items() if len(boxes)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    drawn = draw_ground_truth(image, ground_truth) if ground_truth else image
    if not cv2.imwrite(str(path), draw_detections(drawn, named, thresh)):
        raise OSError(f"could not write {path}")
    return path


PANEL_GAP = 4  # white pixels between the panels of draw_batch


def heat_panel(heat: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(H, W, 3) uint8: a (h, w) heatmap in [0, 1], each cell a block of input pixels."""
    big = cv2.resize(heat.astype(np.float32), (size[1], size[0]),
                     interpolation=cv2.INTER_NEAREST)
    return cv2.applyColorMap(np.uint8(np.clip(big, 0, 1) * 255), cv2.COLORMAP_INFERNO)


def draw_batch(batch: dict, targets: list, configs: dict, names: list[str]) -> np.ndarray:
    """(rows, columns, 3) uint8: one row per image of a sampler's `batch` (see core.sample):
    the crop with its boxes, then the top-left and the bottom-right heatmaps of `targets` (as
    render_targets gives them, on the CPU; max over classes) with arrows from each corner's cell
    to its exact position (the offset target), then Saccade's attention maps."""
    in_h, in_w = configs["input_size"]
    out_h, out_w = configs["output_sizes"][0]
    stride = np.array([in_w / out_w, in_h / out_h] * 2)
    rows = []
    for b in range(len(batch["image"])):
        count = int(batch["num_objects"][b])
        boxes = batch["boxes"][b, :count] * stride
        image = batch["image"][b].copy()
        for box, cls in zip(boxes, batch["classes"][b, :count]):
            x1, y1, x2, y2 = (round(v) for v in box)
            cv2.rectangle(image, (x1, y1), (x2, y2), class_color(names[cls]), 1)
        panels = [image]
        for heat, corner in ((targets[0], slice(0, 2)), (targets[1], slice(2, 4))):
            panel = heat_panel(np.asarray(heat[b]).max(axis=0), (in_h, in_w))
            for box in batch["boxes"][b, :count]:
                exact = box[corner]
                cell = np.trunc(exact)
                start = tuple(int(v) for v in (cell + 0.5) * stride[:2])
                end = tuple(int(v) for v in exact * stride[:2])
                cv2.arrowedLine(panel, start, end, GT_COLOR, 1, tipLength=0.4)
            panels.append(panel)
        if len(targets) > 9:
            panels += [heat_panel(np.asarray(att[b, 0]), (in_h, in_w)) for att in targets[9]]
        gap = np.full((in_h, PANEL_GAP, 3), 255, np.uint8)
        rows.append(np.concatenate([p for panel in panels for p in (panel, gap)][:-1], axis=1))
    gap = np.full((PANEL_GAP, rows[0].shape[1], 3), 255, np.uint8)
    return np.concatenate([r for row in rows for r in (row, gap)][:-1], axis=0)
