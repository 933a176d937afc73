"""The pictures of `test.py --vis N`: detections and ground truth of the first N images.

The rule: the pictures of the first N images are those of the detections the results hold. An
image this run detects is drawn as it is journalled; an image the journal held and this run did
not detect again is drawn from the journal (an earlier run may have stopped between journalling
and drawing it, or drawn fewer), so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..utils import vis
from ..utils.images import ImageReadError
from .journal import Done
from .loop import ImageResult


def ground_truth(db: Any, ind: int) -> dict[str, np.ndarray] | None:
    """{class name: (n, 4) [x1, y1, x2, y2]} of an annotated image, or None."""
    if not db.has_annotations:
        return None
    boxes = db.detections(ind)
    return {db.cls2name(int(cls)): boxes[boxes[:, 4] == cls, :4]
            for cls in set(boxes[:, 4].tolist())}


class Pictures:
    """Draws the images `inds` (db indices, the first N of a run) into `folder` as
    <image id>.jpg, with the detections scoring above `thresh`."""

    def __init__(self, db: Any, inds: Sequence[int], folder: Path, thresh: float) -> None:
        self.db, self.folder, self.thresh = db, folder, thresh
        self.inds = {db.image_id(ind): ind for ind in inds}

    def draw(self, ind: int, image: np.ndarray, detections: dict[int, np.ndarray]) -> None:
        vis.save_detections(self.folder / f"{self.db.image_id(ind)}.jpg", image, detections,
                            self.db.cls2name, self.thresh,
                            ground_truth=ground_truth(self.db, ind))

    def on_result(self, result: ImageResult) -> None:
        """Draw an image of this run as it comes, when it is one of the first N."""
        if result.image_id in self.inds and result.detections is not None:
            self.draw(result.ind, result.image, result.detections)

    def from_journal(self, done: Done, redone: Container[int],
                     log: Callable[[str], None]) -> None:
        """Draw the images the journal `done` held and this run (image ids `redone`) did not
        detect again; an image that no longer reads is named to `log`."""
        for image_id, ind in self.inds.items():
            if image_id in done.detections and image_id not in redone:
                try:
                    self.draw(ind, self.db.read_image(ind), done.detections[image_id])
                except ImageReadError as err:
                    log(f"not drawn: {err}")
