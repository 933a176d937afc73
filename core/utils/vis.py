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


def draw_detections(image: np.ndarray, bboxes: dict[str, np.ndarray], thresh: float = 0.5,
                    font_scale: float = 0.5) -> np.ndarray:
    """Draw the boxes scoring above `thresh` with a "name score" label.

    Args:
        image: (H, W, 3) uint8 BGR; not modified.
        bboxes: {class name: (n, 5) float [x1, y1, x2, y2, score]} in image pixels.
        thresh: only boxes with a score above it are drawn.
        font_scale: size of the label text.

    Returns:
        (H, W, 3) uint8 BGR copy with the drawings.
    """
    image = image.copy()
    for name, boxes in bboxes.items():
        color = class_color(name)
        for x1, y1, x2, y2, score in np.asarray(boxes)[:, :5]:
            if score <= thresh:
                continue
            x1, y1, x2, y2 = (int(v) for v in (x1, y1, x2, y2))
            label = f"{name} {score:.2f}"
            (tw, th), _ = cv2.getTextSize(label, FONT, font_scale, 1)
            # The label sits above the box, or inside it when the box touches the top edge.
            top = y1 - th - 4 if y1 - th - 4 >= 0 else y1
            cv2.rectangle(image, (x1, top), (x1 + tw + 2, top + th + 4), color, -1)
            cv2.putText(image, label, (x1 + 1, top + th + 1), FONT, font_scale, (0, 0, 0), 1,
                        cv2.LINE_AA)
            cv2.rectangle(image, (x1, y1), (x2, y2), color, 2)
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
