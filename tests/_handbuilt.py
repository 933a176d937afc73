"""A hand-built detection set whose per-category AP and error breakdown are known.

Categories: 1 cat and 2 dog (supercategory animal), 3 car (vehicle), 4 unicorn (animal, no
objects). Every image is 100 x 100 and holds at most one object, at BOX (x, y, w, h).

    image 1: cat   <- cat 0.8, exact                      (a hit at every IoU)
    image 2: cat   <- cat 0.6, IoU 0.6                    (a hit at 0.5, not at 0.75)
    image 3: cat   <- cat 0.4, IoU 0.3                    (a localisation error)
    image 4: cat   (nothing found)                        (a miss)
    image 5: dog   <- cat 0.5, exact                      (confusion with a similar class)
    image 6: car   <- car 0.95 exact, cat 0.7 exact       (cat: confusion with another class)
    image 7: none  <- cat 0.9                             (cat: on background)

So dog has AP 0 (nothing found), car AP 1 (found exactly, first), and cat's detections in
score order are BG, hit, Oth, hit@0.5, Sim, hit@0.1 against 4 objects.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

BOX = [10.0, 10.0, 40.0, 40.0]
NARROW = {0.6: [10.0, 10.0, 24.0, 40.0], 0.3: [10.0, 10.0, 12.0, 40.0]}  # IoU with BOX
CATEGORIES = [{"id": 1, "name": "cat", "supercategory": "animal"},
              {"id": 2, "name": "dog", "supercategory": "animal"},
              {"id": 3, "name": "car", "supercategory": "vehicle"},
              {"id": 4, "name": "unicorn", "supercategory": "animal"}]
OBJECTS = {1: 1, 2: 1, 3: 1, 4: 1, 5: 2, 6: 3}  # image -> category of its object
DETECTIONS = [(1, 1, BOX, 0.8), (2, 1, NARROW[0.6], 0.6), (3, 1, NARROW[0.3], 0.4),
              (5, 1, BOX, 0.5), (6, 3, BOX, 0.95), (6, 1, BOX, 0.7), (7, 1, BOX, 0.9)]

# 101 recall points: r = 0, 0.01, ..., 1; reaching recall R with precision P gives
# P * (points <= R) / 101. Cat's curves (4 objects) step by step:
#   C75: BG, hit -> P 0.5 up to R 0.25 (26 points)
#   C50: BG, hit, Oth, hit -> P 0.5 up to R 0.5 (51)
#   Loc: ..., Sim, hit -> P 0.5 up to R 0.75 (76)
#   Sim: the Sim detection ignored: BG, hit, Oth, hit, hit -> 3/5 up to R 0.75
#   Oth: the Oth one too: BG, hit, hit, hit -> 3/4 up to R 0.75
#   BG:  no false positive left -> 1 up to R 0.75
CAT = {"C75": 0.5 * 26 / 101, "C50": 0.5 * 51 / 101, "Loc": 0.5 * 76 / 101,
       "Sim": 0.6 * 76 / 101, "Oth": 0.75 * 76 / 101, "BG": 76 / 101, "FN": 1.0}


def write(folder: Path) -> tuple[Path, Path]:
    """Write annotations.json and results.json into `folder`; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    annotations = {
        "images": [{"id": i, "file_name": f"{i}.jpg", "width": 100, "height": 100}
                   for i in range(1, 8)],
        "annotations": [{"id": i, "image_id": i, "category_id": c, "bbox": BOX,
                         "area": BOX[2] * BOX[3], "iscrowd": 0} for i, c in OBJECTS.items()],
        "categories": CATEGORIES,
    }
    results = [{"image_id": i, "category_id": c, "bbox": box, "score": s}
               for i, c, box, s in DETECTIONS]
    (folder / "annotations.json").write_text(json.dumps(annotations))
    (folder / "results.json").write_text(json.dumps(results))
    return folder / "annotations.json", folder / "results.json"


def dataset(annotation_file: Path) -> SimpleNamespace:
    """What `core.inference.score` needs of a dataset, for the hand-built set."""
    return SimpleNamespace(cls2coco=lambda cls: CATEGORIES[cls - 1]["id"],
                           cls2name=lambda cls: CATEGORIES[cls - 1]["name"],
                           num_classes=len(CATEGORIES), annotation_file=annotation_file,
                           has_annotations=True)


def detections() -> dict[int, dict[int, np.ndarray]]:
    """DETECTIONS as `score` takes them: {image_id: {class: (n, 5) [x1, y1, x2, y2, score]}}."""
    found: dict[int, dict[int, list]] = {i: {} for i in range(1, 8)}
    for image_id, category, (x, y, w, h), score in DETECTIONS:
        found[image_id].setdefault(category, []).append([x, y, x + w, y + h, score])
    return {i: {c: np.array(rows) for c, rows in per.items()} for i, per in found.items()}
