"""One image's (or video frame's) detections, as `Detector.predict` yields them."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from core.errors import UsageError
from core.utils.vis import draw_detections


def _finite(values: list) -> list:
    """`values` (numbers or lists of them) with every NaN or infinity as None."""
    return [_finite(v) if isinstance(v, list) else (v if math.isfinite(v) else None)
            for v in values]


def _nan(values: list) -> list:
    """`values` with every None (a null of `to_json`) as NaN."""
    return [_nan(v) if isinstance(v, list) else (math.nan if v is None else v) for v in values]


@dataclass(eq=False)
class Result:
    """Detections of one image or frame, in its pixels.

    Attributes:
        boxes: (n, 4) float32 [x1, y1, x2, y2] in image pixels, best score first.
        scores: (n,) float32.
        classes: (n,) int64, the model's class 1..C.
        names: n class names (`class <c>` where the classes have no names).
        category_ids: (n,) int64, the dataset's ids of the classes (COCO's ids for COCO).
        source: the file, folder entry, camera or stream the image came from ("array <k>" for
            a numpy image).
        frame: the frame's index in its video or stream (0 for a picture).
        image: (H, W, 3) uint8 BGR, the image itself (not serialised; None once read back).
    """

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    names: list[str]
    category_ids: np.ndarray
    source: str
    frame: int = 0
    image: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __eq__(self, other: object) -> bool:
        """Equal detections of the same source and frame (the image is not compared)."""
        if not isinstance(other, Result):
            return NotImplemented
        return (self.source, self.frame, self.names) == (other.source, other.frame,
                                                         other.names) and all(
            np.array_equal(getattr(self, key), getattr(other, key))
            for key in ("boxes", "scores", "classes", "category_ids"))

    def __len__(self) -> int:
        return len(self.scores)

    def to_dict(self) -> dict:
        """The fields as plain Python values; a number that is not finite (NaN, inf) is None,
        as JSON has no such number."""
        return {"source": self.source, "frame": self.frame,
                "boxes": _finite(self.boxes.tolist()), "scores": _finite(self.scores.tolist()),
                "classes": self.classes.tolist(), "names": list(self.names),
                "category_ids": self.category_ids.tolist()}

    def to_json(self) -> str:
        """One line of valid JSON: source, frame, boxes, scores, classes, names, category_ids.
        The rule for values JSON cannot hold: NaN and +-inf are written as null (and read back
        by `from_json` as NaN)."""
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Result:
        """The result `to_json` wrote (without the image); float32 values come back exactly."""
        data = json.loads(text)
        return cls(boxes=np.asarray(_nan(data["boxes"]), np.float32).reshape(-1, 4),
                   scores=np.asarray(_nan(data["scores"]), np.float32),
                   classes=np.asarray(data["classes"], np.int64),
                   names=list(data["names"]),
                   category_ids=np.asarray(data["category_ids"], np.int64),
                   source=data["source"], frame=int(data["frame"]))

    def to_coco(self, image_id: int) -> list[dict]:
        """COCO result entries: {image_id, category_id, bbox [x, y, w, h], score}."""
        return [{"image_id": image_id, "category_id": int(cat),
                 "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
                 "score": float(score)}
                for (x1, y1, x2, y2), score, cat in zip(self.boxes, self.scores,
                                                        self.category_ids)]

    def draw(self, image: np.ndarray | None = None, thresh: float = 0.0) -> np.ndarray:
        """A copy of `image` (default: the result's own) with the boxes scoring above
        `thresh` drawn and labelled "name score"."""
        image = self.image if image is None else image
        if image is None:
            raise ValueError("this result holds no image (read back from JSON): pass one")
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 \
                or image.shape[2] != 3:
            what = (f"dtype {image.dtype}, shape {image.shape}" if isinstance(image, np.ndarray)
                    else type(image).__name__)
            raise UsageError(f"Result.draw: the image must be (H, W, 3) uint8 BGR (0..255), as "
                             f"the detector takes it, got {what}; convert it, e.g. with "
                             "np.clip(image, 0, 255).astype(np.uint8)")
        named: dict[str, list] = {}
        for box, score, name in zip(self.boxes, self.scores, self.names):
            named.setdefault(name, []).append([*box, score])
        return draw_detections(image, {name: np.asarray(rows, np.float32)
                                       for name, rows in named.items()}, thresh)
