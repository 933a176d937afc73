"""The first parse of a COCO "instances" json: read it, check every entry, and index it into
per-image tables (core/dbs/coco.py's dataset caches and uses the result).

The json is read with the standard library (pycocotools is slow to index large files), without
the segmentation masks where their form is known (they are most of a file and nothing read
here). Boxes come from whole columns at once (`_fast_tables`) when every annotation is certainly
well formed; otherwise one annotation at a time (`_tables`), which names the first it cannot
read. Boxes are clipped to their image; those with nothing left are dropped, and each kind of
problem is said once, with a count and an example, in the words every converter uses too.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from .detection import DatasetError


def _is_finite(value: object) -> bool:
    """A JSON number that is not NaN or infinite (Python's json reads both); not a bool."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _integer(value: object, what: str, path: Path) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise DatasetError(f"{path}: {what} must be an integer, got {value!r}")


def _require(entry: object, keys: tuple[str, ...], what: str, path: Path) -> None:
    if not isinstance(entry, dict):
        raise DatasetError(f"{path}: {what} is not a JSON object")
    for key in keys:
        if key not in entry:
            raise DatasetError(f"{path}: {what}: missing '{key}'")


# The words for a clipped or dropped box, the same in the loader and in every converter.
CLIPPED = "clipped to the image (they extended outside it)"
ZERO_SIZE = "dropped (zero or negative width or height in the file)"
OUTSIDE = "dropped (wholly outside the image: nothing left after clipping)"


def dropped_why(corners: list[float], width: float, height: float) -> str | None:
    """Why the loader drops the box [x1, y1, x2, y2] of a width x height image, or None: a
    zero or negative size as written, or nothing left of it inside the image."""
    x1, y1, x2, y2 = corners
    if x2 <= x1 or y2 <= y1:
        return ZERO_SIZE
    if min(x2, width) <= max(x1, 0.0) or min(y2, height) <= max(y1, 0.0):
        return OUTSIDE
    return None


class _Problems:
    """Counts one kind of box problem and keeps the first example, to be reported once."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0
        self.example = ""

    def add(self, example: str) -> None:
        self.count += 1
        self.example = self.example or example

    def message(self, path: Path) -> str | None:
        if not self.count:
            return None
        return f"{path}: {self.what}: {self.count} box(es), e.g. {self.example}"


_MASK = re.compile(rb'"segmentation"\s*:\s*')
_LIST_END = re.compile(rb"\]\s*\]")
_OPENING = re.compile(rb"\{|\[\s*\[|\[\s*\]")


def _without_masks(raw: bytes) -> tuple[bytes, int]:
    """`raw` with each annotation's `segmentation` value (a polygon list [[...], ...], an
    empty list, or an RLE map {...}) replaced by 0, and how many were replaced: the masks are
    most of a COCO file and no part of what is read here. (b"", 0) when a value has another
    form, so the caller reads the file whole."""
    pieces, end = [], 0
    for match in _MASK.finditer(raw):
        start = match.end()
        if start < end:
            return b"", 0
        opening = _OPENING.match(raw, start)
        if opening is None:
            return b"", 0
        if opening.group() == b"{":
            stop = raw.find(b"}", start) + 1
        elif opening.group().endswith(b"["):
            found = _LIST_END.search(raw, start)
            stop = found.end() if found else 0
        else:
            stop = opening.end()
        if stop <= 0:
            return b"", 0
        pieces += [raw[end:start], b"0"]
        end = stop
    pieces.append(raw[end:])
    return b"".join(pieces), len(pieces) // 2


def _read_json(raw: bytes, path: Path) -> dict:
    """The file's top level, with its images and categories lists (annotations may be absent).
    Read without the masks when every annotation has one in a known form (a check of the
    count: a `"segmentation":` inside a text would make it disagree), else whole."""
    stripped, masks = _without_masks(raw)
    if masks:
        try:
            content = json.loads(stripped)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            content = None
        del stripped
        annotations = content.get("annotations") if isinstance(content, dict) else None
        if isinstance(annotations, list) and len(annotations) == masks and all(
                type(ann) is dict and ann.get("segmentation") == 0 for ann in annotations):
            return _checked_top(content, path)
    return _checked_top(_loads(raw, path), path)


def _loads(raw: bytes, path: Path) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise DatasetError(f"{path}: malformed JSON at line {err.lineno} column {err.colno}: "
                           f"{err.msg}") from None
    except UnicodeDecodeError as err:
        raise DatasetError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except RecursionError:
        raise DatasetError(f"{path}: JSON nested too deep to read; a COCO instances file "
                           f"nests objects a few levels deep") from None


def _checked_top(content: Any, path: Path) -> dict:
    _require(content, ("images", "categories"), "top level", path)
    for key in ("images", "categories", "annotations"):
        if not isinstance(content.get(key, []), list):
            raise DatasetError(f"{path}: '{key}' must be a list, got "
                               f"{type(content[key]).__name__}")
    return content


def _categories(entries: list, path: Path) -> tuple[list[dict], dict[int, int]]:
    """The categories sorted by id, and each COCO category id's class (1, 2, ... in id order)."""
    for index, category in enumerate(entries):
        _require(category, ("id",), f"category entry #{index}", path)
        _integer(category["id"], f"category entry #{index}: id", path)
    categories = sorted(entries, key=lambda category: category["id"])
    category_ids = [int(category["id"]) for category in categories]
    if len(set(category_ids)) != len(category_ids):
        raise DatasetError(f"{path}: category ids are not unique: {category_ids}")
    return categories, {cat_id: cls for cls, cat_id in enumerate(category_ids, start=1)}


def _image_rows(entries: list, path: Path) -> tuple[dict[int, int], list[tuple[float, float]]]:
    """Each image id's row in the file, and each row's declared (width, height)."""
    rows: dict[int, int] = {}
    sizes = []
    for index, image in enumerate(entries):
        what = (f"image id {image['id']}" if isinstance(image, dict) and "id" in image
                else f"image entry #{index}")
        _require(image, ("id", "file_name", "width", "height"), what, path)
        _integer(image["id"], f"image entry #{index}: id", path)
        if not isinstance(image["file_name"], str) or not image["file_name"]:
            raise DatasetError(f"{path}: {what}: file_name must be a non-empty string, got "
                               f"{image['file_name']!r}")
        for key in ("width", "height"):
            if not (_is_finite(image[key]) and image[key] > 0):
                raise DatasetError(f"{path}: {what}: {key} must be a positive number, got "
                                   f"{image[key]!r}")
        if image["id"] in rows:
            raise DatasetError(f"{path}: image id {image['id']} appears twice")
        rows[image["id"]] = index
        sizes.append((float(image["width"]), float(image["height"])))
    return rows, sizes


def _annotation_name(ann: Any, index: int) -> str:
    """How messages name an annotation: its id, or its label line in a converted dataset."""
    what = (f"annotation id {ann['id']}" if isinstance(ann, dict) and "id" in ann
            else f"annotation entry #{index}")
    if isinstance(ann, dict) and isinstance(ann.get("source"), str):
        what = f"{ann['source']} ({what})"  # the label line of a converted dataset
    return what


def _check_annotation(ann: Any, what: str, coco2cls: dict[int, int], rows: dict[int, int],
                      path: Path) -> None:
    """An annotation's keys, its image and category, iscrowd and bbox, or a DatasetError."""
    _require(ann, ("image_id", "bbox", "category_id"), what, path)
    _integer(ann["image_id"], f"{what}: image_id", path)
    _integer(ann["category_id"], f"{what}: category_id", path)
    if ann.get("iscrowd", 0) not in (0, 1) or isinstance(ann.get("iscrowd", 0), float):
        raise DatasetError(f"{path}: {what}: iscrowd must be 0 or 1, got "
                           f"{ann['iscrowd']!r}")
    if ann["category_id"] not in coco2cls:
        raise DatasetError(f"{path}: {what}: unknown category id {ann['category_id']}; "
                           f"the file's categories are {list(coco2cls)}")
    if ann["image_id"] not in rows:
        raise DatasetError(f"{path}: {what}: unknown image id {ann['image_id']}")
    bbox = ann["bbox"]
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(map(_is_finite, bbox))):
        raise DatasetError(f"{path}: {what}: bbox must be [x, y, w, h], four finite "
                           f"numbers, got {bbox!r}")


def _tables(content: dict, coco2cls: dict[int, int], rows: dict[int, int],
            sizes: list[tuple[float, float]], path: Path) -> tuple:
    """The boxes and crowd regions per image ((rows, counts) each), the messages about clipped
    and dropped boxes, and the first clipped images, one annotation at a time: each is checked
    and the first that cannot be read is named in a DatasetError."""
    per_box: list[list[list[float]]] = [[] for _ in rows]
    per_crowd: list[list[list[float]]] = [[] for _ in rows]
    clipped = _Problems(CLIPPED)
    zero, outside = _Problems(ZERO_SIZE), _Problems(OUTSIDE)
    clipped_images: list[list] = []  # [file_name, declared width, height] of the first three
    for index, ann in enumerate(content.get("annotations", [])):
        what = _annotation_name(ann, index)
        _check_annotation(ann, what, coco2cls, rows, path)
        row = rows[ann["image_id"]]
        width, height = sizes[row]
        bbox = ann["bbox"]
        corners = [bbox[0], bbox[1], bbox[0] + bbox[2], bbox[1] + bbox[3]]
        box = [min(max(corners[0], 0.0), width), min(max(corners[1], 0.0), height),
               min(max(corners[2], 0.0), width), min(max(corners[3], 0.0), height)]
        example = f"{what}: bbox {bbox} in the {width:g}x{height:g} image id {ann['image_id']}"
        if box != corners:
            clipped.add(example)
            file_name = content["images"][row]["file_name"]
            named = [entry[0] for entry in clipped_images]
            if len(clipped_images) < 3 and file_name not in named:
                clipped_images.append([file_name, width, height])
        why = dropped_why(corners, width, height)
        if why:
            (zero if why == ZERO_SIZE else outside).add(example)
        elif ann.get("iscrowd", 0):
            per_crowd[row].append(box)
        else:
            per_box[row].append(box + [coco2cls[ann["category_id"]]])

    problems = [m for m in (clipped.message(path), zero.message(path), outside.message(path))
                if m]
    return (_stacked(per_box, 5), _stacked(per_crowd, 4), problems, clipped_images)


def _stacked(per_image: list[list[list[float]]], width: int) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([b for rows in per_image for b in rows], dtype=np.float32).reshape(-1, width),
            np.array([len(rows) for rows in per_image], dtype=np.int64))


def _fast_tables(annotations: list, coco2cls: dict[int, int], rows: dict[int, int],
                 sizes: list[tuple[float, float]]) -> tuple | None:
    """What `_tables` makes, from whole columns at once, when every annotation is certainly
    well formed (the common case, and the whole cost at COCO size); None when one may not be,
    for `_tables` to name it. The boxes are the same float64 sums, clips and float32 casts."""
    try:
        image_ids = [ann["image_id"] for ann in annotations]
        category_ids = [ann["category_id"] for ann in annotations]
        bboxes = [ann["bbox"] for ann in annotations]
        crowd_flags = [ann.get("iscrowd", 0) for ann in annotations]
    except (KeyError, TypeError, AttributeError):
        return None
    if not annotations:
        empty = np.zeros(len(rows), np.int64)
        return ((np.zeros((0, 5), np.float32), empty), (np.zeros((0, 4), np.float32), empty),
                np.zeros(0, np.int8))
    if (not rows or set(map(type, image_ids)) != {int} or set(map(type, category_ids)) != {int}
            or not set(map(type, crowd_flags)) <= {int} or not set(crowd_flags) <= {0, 1}
            or set(map(type, bboxes)) != {list} or set(map(len, bboxes)) != {4}
            or not set(map(type, itertools.chain.from_iterable(bboxes))) <= {int, float}):
        return None
    row_of = np.array(list(rows), dtype=np.int64)
    order = np.argsort(row_of)
    ids = np.array(image_ids, dtype=np.int64)
    at = np.minimum(np.searchsorted(row_of, ids, sorter=order), len(order) - 1)
    image_rows = order[at]
    cat_keys = np.array(list(coco2cls), dtype=np.int64)
    cats = np.array(category_ids, dtype=np.int64)
    box = np.array(bboxes, dtype=np.float64)
    if (not (row_of[image_rows] == ids).all() or not np.isin(cats, cat_keys).all()
            or not np.isfinite(box).all()):
        return None
    size = np.array(sizes, dtype=np.float64)[image_rows]
    corners = np.concatenate([box[:, :2], box[:, :2] + box[:, 2:]], axis=1)
    clip = np.clip(corners, 0.0, np.concatenate([size, size], axis=1))
    zero = (corners[:, 2] <= corners[:, 0]) | (corners[:, 3] <= corners[:, 1])
    outside = ~zero & ((clip[:, 2] <= clip[:, 0]) | (clip[:, 3] <= clip[:, 1]))
    crowd = np.array(crowd_flags, dtype=bool)
    kept = ~zero & ~outside
    classes = np.array([coco2cls[c] for c in cat_keys.tolist()], dtype=np.float64)
    sorter = np.argsort(cat_keys)
    cls = classes[sorter[np.searchsorted(cat_keys, cats, sorter=sorter)]]
    flags = (np.any(clip != corners, axis=1).astype(np.int8) | zero.astype(np.int8) << 1
             | outside.astype(np.int8) << 2)
    return (_columns(np.concatenate([clip, cls[:, None]], axis=1), image_rows, kept & ~crowd,
                     len(rows)),
            _columns(clip, image_rows, kept & crowd, len(rows)), flags)


def _columns(values: np.ndarray, image_rows: np.ndarray, chosen: np.ndarray,
             images: int) -> tuple[np.ndarray, np.ndarray]:
    """The chosen rows of `values` grouped by image, in file order within each, as float32."""
    picked = np.flatnonzero(chosen)
    picked = picked[np.argsort(image_rows[picked], kind="stable")]
    return (values[picked].astype(np.float32),
            np.bincount(image_rows[picked], minlength=images).astype(np.int64))


def _messages(content: dict, flags: np.ndarray, rows: dict[int, int],
              sizes: list[tuple[float, float]], path: Path) -> tuple[list[str], list[list]]:
    """The messages of `_tables` (count and first example per kind) and its first three
    clipped images, from the flags of `_fast_tables` (1 clipped, 2 zero size, 4 outside)."""
    annotations = content.get("annotations", [])

    def example(index: int) -> str:
        ann = annotations[index]
        width, height = sizes[rows[ann["image_id"]]]
        return (f"{_annotation_name(ann, index)}: bbox {ann['bbox']} in the {width:g}x"
                f"{height:g} image id {ann['image_id']}")

    problems = []
    for bit, what in ((1, CLIPPED), (2, ZERO_SIZE),
                      (4, OUTSIDE)):
        hits = np.flatnonzero(flags & bit)
        if len(hits):
            problems.append(f"{path}: {what}: {len(hits)} box(es), e.g. {example(hits[0])}")
    clipped_images: list[list] = []
    for index in np.flatnonzero(flags & 1).tolist():
        row = rows[annotations[index]["image_id"]]
        name = content["images"][row]["file_name"]
        if name not in [entry[0] for entry in clipped_images]:
            clipped_images.append([name, *sizes[row]])
            if len(clipped_images) == 3:
                break
    return problems, clipped_images


def parse_instances(raw: bytes, path: Path) -> dict:
    """Parse COCO instances json bytes into per-image tables.

    Returns a dict: file_names [N] str, image_ids (N,) int64, boxes (M, 5) float32
    [x1, y1, x2, y2, cls] with box_counts (N,) int64 per image in order, crowds (K, 4) float32
    with crowd_counts (N,) int64, category_ids / category_names sorted by id, has_annotations,
    problems (messages about clipped or dropped boxes, one per kind), clipped_images (up to
    three [file_name, width, height] of images with clipped boxes, as the file declares them).
    """
    content = _read_json(raw, path)
    categories, coco2cls = _categories(content["categories"], path)
    rows, sizes = _image_rows(content["images"], path)
    annotations = content.get("annotations", [])
    fast = _fast_tables(annotations, coco2cls, rows, sizes)
    if fast is None:  # something to name: the loop below finds and names it
        boxes, crowds, problems, clipped_images = _tables(content, coco2cls, rows, sizes, path)
    else:
        boxes, crowds, flags = fast
        problems, clipped_images = _messages(content, flags, rows, sizes, path)
    return {
        "file_names": [str(image["file_name"]) for image in content["images"]],
        "image_ids": np.array(list(rows), dtype=np.int64),
        "boxes": boxes[0], "box_counts": boxes[1], "crowds": crowds[0], "crowd_counts": crowds[1],
        "category_ids": list(coco2cls),
        "category_names": [str(category.get("name", category["id"])) for category in categories],
        "has_annotations": "annotations" in content,
        "problems": problems,
        "clipped_images": clipped_images,
    }
