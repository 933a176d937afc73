"""What a dataset holds and what the model will be shown, before any GPU hour is spent.

`split_report(db, ...)` counts one split: images, objects per class (and the classes it lacks),
objects per image, box sizes in COCO's small / medium / large (by box area: YOLO and VOC have no
masks) and by aspect ratio, what the loader clipped or dropped and why, unreadable images,
images without objects, duplicate images (by content hash; those whose labels differ are
named with their files and labels), and, on a sample of images, the share of objects that the
training crops (the config's own view drawing) cut off or remove.
`training_batch(...)` builds a batch exactly as the sampler does and renders its dense targets
exactly as training does, for `core.utils.vis`-style drawing by the caller.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np
import torch

from ..dbs import datasets
from ..dbs.converted import IMAGE_SUFFIXES
from ..errors import UserMistake
from ..sample import sampling_function
from ..sample.render import render_targets
from ..sample.utils import place_boxes, render_view
from ..utils import hints
from ..utils.files import write_file_atomic
from ..utils.images import ImageReadError, read_image
from ..utils.vis import draw_batch

# COCO's area ranges (pixels^2) and the aspect-ratio bins (width / height) of the report.
SMALL, MEDIUM = 32 ** 2, 96 ** 2
ASPECT_BINS = (0.25, 0.5, 1.0, 2.0, 4.0)
ASPECT_NAMES = ("<1:4", "1:4-1:2", "1:2-1:1", "1:1-2:1", "2:1-4:1", ">4:1")
EXAMPLES = 5  # file names listed per finding; the counts are whole


def _names(db: Any) -> list[str]:
    return [db.cls2name(cls) for cls in range(1, db.num_classes + 1)]


def _box_tables(db: Any) -> dict[str, Any]:
    """Objects per class, per image, by size and by aspect ratio, from the labels alone."""
    names = _names(db)
    per_class = Counter()
    per_image, sizes, aspects = [], Counter(), Counter()
    crowds = 0
    for ind in range(len(db)):
        boxes = db.detections(ind)
        crowds += len(db.crowd_boxes(ind))
        per_image.append(len(boxes))
        per_class.update(int(cls) for cls in boxes[:, 4])
        w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
        area = w * h
        sizes.update(np.where(area < SMALL, "small", np.where(area < MEDIUM, "medium", "large")
                              ).tolist())
        aspects.update(ASPECT_NAMES[k] for k in np.digitize(w / h, ASPECT_BINS))
    counts = np.array(per_image, dtype=np.int64)
    over = counts[counts > db.configs["max_objects"]] - db.configs["max_objects"]
    without = [db.image_ids(ind) for ind in np.flatnonzero(counts == 0)]
    label_file = getattr(db, "label_file", None)  # YOLO: an image's own label file
    missing = ([db.image_ids(ind) for ind in np.flatnonzero(counts == 0)
                if not label_file(int(ind)).is_file()] if label_file else [])
    return {
        "images": len(db),
        "objects": int(counts.sum()),
        "crowd_regions": crowds,
        "objects_per_class": {names[cls - 1]: per_class.get(cls, 0)
                              for cls in range(1, len(names) + 1)},
        "classes_missing": [names[cls - 1] for cls in range(1, len(names) + 1)
                            if not per_class.get(cls)],
        "objects_per_image": {"min": int(counts.min()) if counts.size else 0,
                              "mean": float(counts.mean()) if counts.size else 0.0,
                              "max": int(counts.max(initial=0)),
                              "histogram": {str(k): int(v) for k, v in
                                            sorted(Counter(counts.tolist()).items())}},
        "images_without_labels": {"count": len(without), "examples": without[:EXAMPLES]},
        "label_files_missing": {"count": len(missing), "examples": missing[:EXAMPLES]},
        "over_max_objects": {"images": len(over), "objects_dropped_by_the_sampler":
                             int(over.sum())},
        "box_sizes": {key: sizes.get(key, 0) for key in ("small", "medium", "large")},
        "aspect_ratios": {key: aspects.get(key, 0) for key in ASPECT_NAMES},
    }


def _crop_cuts(boxes: np.ndarray, image: np.ndarray, sampling: str, configs: dict,
               rng: np.random.Generator) -> list[float]:
    """The share of each object's area that one training view of `image` keeps (0: removed)."""
    view = sampling_function(sampling).view(rng, image.shape[:2], boxes, configs)
    in_h, in_w = configs["input_size"]
    placement = render_view(image, view, np.zeros((in_h, in_w, 3), np.uint8))
    whole = boxes[:, :4].astype(np.float64) * np.tile(placement.a, 2) + np.tile(placement.b, 2)
    area = (whole[:, 2] - whole[:, 0]) * (whole[:, 3] - whole[:, 1])
    kept, rows = place_boxes(boxes, placement, (0, 0, in_w, in_h), in_w)
    share = np.zeros(len(boxes))
    share[rows] = (kept[:, 2] - kept[:, 0]) * (kept[:, 3] - kept[:, 1]) / np.maximum(area[rows],
                                                                                     1e-9)
    return np.clip(share, 0.0, 1.0).tolist()


def _labels(db: Any, boxes: np.ndarray) -> str:
    """An image's labels in words, equal for equal labels: its objects' classes and whole-pixel
    boxes, sorted ("no objects" for none)."""
    if not len(boxes):
        return "no objects"
    rows = sorted((db.cls2name(int(b[4])), *(round(float(v)) for v in b[:4]))
                  for b in boxes)
    return f"{len(rows)} object(s): " + ", ".join(
        f"{name} [{x1}, {y1}, {x2}, {y2}]" for name, x1, y1, x2, y2 in rows)


def conflict_lines(report: dict) -> list[str]:
    """The duplicate images of one split's report whose labels differ, each group named with
    its files and their labels, as the check prints them (the first EXAMPLES groups)."""
    conflicting = report["duplicate_images"]["conflicting_labels"]
    if not conflicting:
        return []
    lines = [(f"  duplicate images with conflicting labels: {len(conflicting)} group(s) (the "
              f"same bytes, labelled differently: keep one file, or make the labels agree)")]
    lines += ["    " + " = ".join(f"{name} ({said})" for name, said in group.items())
              for group in conflicting[:EXAMPLES]]
    if len(conflicting) > EXAMPLES:
        lines.append(f"    ... {len(conflicting) - EXAMPLES} more in report.json")
    return lines


def split_report(db: Any, sampling: str, crop_samples: int = 64, seed: int = 0,
                 progress: Callable[[int, int], None] | None = None
                 ) -> tuple[dict, dict, np.ndarray]:
    """The report of one split, {content sha1: [file names]} of its readable images, and
    (N, 4) float64 [cx, cy, w, h] of every object, normalised by its image's size.

    Reads every image once (unreadable ones are listed with the reason); `crop_samples` of
    them, drawn with `seed`, also get one training view each to measure the crop cut-offs.
    """
    report = _box_tables(db)
    report["loader"] = list(db.load_problems)
    rng = np.random.default_rng(seed)
    sampled = set(rng.choice(len(db), size=min(crop_samples, len(db)), replace=False).tolist()
                  if len(db) else [])
    hashes: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    unreadable, shares, points = [], [], []
    for ind in range(len(db)):
        if progress:
            progress(ind, len(db))
        try:
            image = read_image(db.image_path(ind))
        except ImageReadError as err:
            unreadable.append(f"{db.image_ids(ind)}: {err.reason}")
            continue
        with open(db.image_path(ind), "rb") as file:
            digest = hashlib.sha1(file.read()).hexdigest()
        hashes.setdefault(digest, []).append(db.image_ids(ind))
        boxes = db.detections(ind)
        labels[db.image_ids(ind)] = _labels(db, boxes)
        height, width = image.shape[:2]
        points.append(np.stack([(boxes[:, 0] + boxes[:, 2]) / 2 / width,
                                (boxes[:, 1] + boxes[:, 3]) / 2 / height,
                                (boxes[:, 2] - boxes[:, 0]) / width,
                                (boxes[:, 3] - boxes[:, 1]) / height], axis=1))
        if ind in sampled and len(boxes) and db.configs["rand_crop"]:
            shares += _crop_cuts(boxes, image, sampling, db.configs, rng)
    shares_array = np.array(shares)
    report["unreadable_images"] = {"count": len(unreadable), "examples": unreadable[:EXAMPLES]}
    duplicates = [names for names in hashes.values() if len(names) > 1]
    conflicting = [{name: labels[name] for name in names} for names in duplicates
                   if len({labels[name] for name in names}) > 1]
    report["duplicate_images"] = {"groups": len(duplicates), "examples": duplicates[:EXAMPLES],
                                  "conflicting_labels": conflicting}
    report["training_crops"] = {
        "sampled_images": len(sampled), "sampled_objects": len(shares),
        "removed": float((shares_array == 0).mean()) if shares else 0.0,
        "mostly_cut": float(((shares_array > 0) & (shares_array < 0.5)).mean()) if shares
        else 0.0,
        "partly_cut": float(((shares_array >= 0.5) & (shares_array < 0.99)).mean()) if shares
        else 0.0,
        "note": ("" if db.configs["rand_crop"] else "db.rand_crop is off: whole images are used")
        if sampled else "not sampled (the training split is)",
    }
    return report, hashes, np.concatenate(points or [np.zeros((0, 4))]).astype(np.float64)


def across_splits(reports: dict[str, dict], hashes: dict[str, dict]) -> dict:
    """Classes of one split missing from another, and images found in two splits."""
    present = {split: {name for name, n in r["objects_per_class"].items() if n}
               for split, r in reports.items()}
    splits = list(reports)
    only = {f"{a} not in {b}": sorted(present[a] - present[b])
            for a in splits for b in splits if a != b and present[a] - present[b]}
    shared = []
    for k, a in enumerate(splits):
        for b in splits[k + 1:]:
            for digest in hashes[a].keys() & hashes[b].keys():
                shared.append({a: hashes[a][digest], b: hashes[b][digest]})
    return {"classes_in_one_split_only": only,
            "images_in_two_splits": {"count": len(shared), "examples": shared[:EXAMPLES]}}


def unnamed_images(dbs: list[Any]) -> dict:
    """{"count", "examples"}: the image files in the folders of the splits' images that no
    split's annotations name (a labelImg image never given an xml, a COCO export's image that
    its json leaves out): they are in no split. Paths are compared as given, links not followed
    (a YOLO folder of links into a larger one counts only its own files)."""
    named = {os.path.abspath(db.image_path(ind)) for db in dbs for ind in range(len(db))}
    unnamed = sorted(
        path for folder in {os.path.dirname(p) for p in named}
        for path in (os.path.join(folder, name) for name in os.listdir(folder))
        if os.path.splitext(path)[1].lower() in IMAGE_SUFFIXES and path not in named)
    return {"count": len(unnamed), "examples": unnamed[:EXAMPLES]}


def class_lines(report: dict) -> list[str]:
    """The objects per class and the label files of one split's report, as the check prints
    them: a lost labels folder (files missing) is told apart from background images (files
    empty or without objects)."""
    per_class = ", ".join(f"{name} {n}" for name, n in report["objects_per_class"].items())
    without, missing = report["images_without_labels"], report["label_files_missing"]
    lines = [f"  objects per class: {per_class}"]
    if without["count"]:
        lines.append(f"  images without objects {without['count']}: label file missing "
                     f"{missing['count']}" + (f" (e.g. {missing['examples'][0]})"
                                              if missing["count"] else "") +
                     f", empty or background {without['count'] - missing['count']}")
    return lines


def same_images(db_a: Any, db_b: Any) -> list[tuple[str, str]]:
    """(image of db_b, image of db_a) pairs that are one file or the same bytes: paths first,
    then a hash of only the files of equal size (a stat each, so COCO-sized splits stay
    quick)."""
    def files(db: Any) -> dict[str, str]:
        return {os.path.realpath(db.image_path(ind)): db.image_ids(ind) for ind in range(len(db))}

    a, b = files(db_a), files(db_b)
    pairs = [(b[path], a[path]) for path in b.keys() & a.keys()]
    by_size: dict[int, list[str]] = {}
    for path in a.keys() - b.keys():
        with contextlib.suppress(OSError):
            by_size.setdefault(os.path.getsize(path), []).append(path)
    digests: dict[str, str] = {}
    for path in sorted(b.keys() - a.keys()):
        try:
            candidates = by_size.get(os.path.getsize(path), [])
        except OSError:
            continue
        for other in candidates:
            if other not in digests:
                digests[other] = _sha1(other)
            if digests[other] == _sha1(path):
                pairs.append((b[path], a[other]))
                break
    return sorted(pairs)


def _sha1(path: str) -> str:
    try:
        with open(path, "rb") as file:
            return hashlib.sha1(file.read()).hexdigest()
    except OSError:
        return path  # unreadable: equal to nothing else


def warn_split_overlap(system_config: Any, db_config: dict, db: Any, split: str,
                       log: Callable[[str], None], loading: bool = False) -> int:
    """Say to `log` when images of `split` (held by `db`) are also in the other split of the
    pair train/validation (the training split for any other), as the same split, the same file
    or the same bytes: a score on them is inflated. Returns how many; a split that does not
    load is not compared (its own command says why). `loading`: the other split's loader
    lines (a dataset cache rebuilt, boxes dropped) go to `log` too, where this is its first
    loading in the run."""
    other = (system_config.val_split if split == system_config.train_split
             else system_config.train_split)
    if getattr(db, "generated", False):
        return 0
    if other == split:  # one split given for both: every image is shared
        log(f"warning: split '{split}' is both the training and the validation split "
            f"(system.train_split, system.val_split): the validation loss and AP are scored on "
            f"the {len(db)} training images and are inflated; give validation images of their "
            f"own")
        return len(db)
    try:
        dataset = datasets[system_config.dataset]
        other_db = dataset(db_config, split=other, sys_config=system_config,
                           log=log if loading else lambda line: None)
    except (UserMistake, OSError):  # advice only: the run goes on without the comparison
        return 0
    pairs = same_images(other_db, db)
    if pairs:
        log(f"warning: {len(pairs)} of the {len(db)} images of split '{split}' are also in "
            f"split '{other}' (same file or same bytes, e.g. {pairs[0][0]} = {pairs[0][1]}); "
            f"scores on them are inflated: remove them from one split ({hints.command('check')} "
            f"lists them)")
    return len(pairs)


def training_batch(sample: Callable, db: Any, images: int) -> tuple[dict, list]:
    """A batch of `images` built by `sample` (`core.sample.sampler`) with augmentation, from
    the start of the split's order as db.rng shuffles it, and its dense targets as training
    renders them (on the CPU). Returns (batch of numpy arrays, targets as torch tensors)."""
    db.shuffle_inds()
    batch, _ = sample(db, 0, images, data_aug=True)
    tensors = {key: torch.from_numpy(value) for key, value in batch.items() if key != "meta"}
    return batch, render_targets(tensors, db.configs, db.num_classes, static=False)


def save_batch_picture(sample: Callable, db: Any, path: Any, images: int = 4) -> None:
    """Write `path` (a .jpg): `images` augmented training images of `db`, built by `sample`
    (`core.sample.sampler`), with their boxes and rendered targets (see
    `core.utils.vis.draw_batch`). `db` is changed (its order is shuffled): pass one of its own."""
    batch, targets = training_batch(sample, db, images)
    names = [db.cls2name(cls) for cls in range(1, db.num_classes + 1)]
    encoded = cv2.imencode(".jpg", draw_batch(batch, targets, db.configs, names))[1]
    write_file_atomic(path, lambda file: file.write(encoded.tobytes()))
