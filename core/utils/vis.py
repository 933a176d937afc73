"""Drawing detections on images: boxes, class names and scores, one stable colour per class."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

FONT = cv2.FONT_HERSHEY_SIMPLEX


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


def save_detections(path: Path, image: np.ndarray, top_bboxes: dict[int, np.ndarray],
                    cls2name: Callable[[int], str], thresh: float = 0.5) -> Path:
    """Write `image` with the detections of `top_bboxes` ({cls 1..C: (n, 5)}) as a JPEG."""
    named = {cls2name(cls): boxes for cls, boxes in top_bboxes.items() if len(boxes)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), draw_detections(image, named, thresh)):
        raise OSError(f"could not write {path}")
    return path
