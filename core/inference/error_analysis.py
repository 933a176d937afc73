"""What limits AP: the COCO error breakdown and a confusion matrix of a results file.

The breakdown is the one of the COCO detection analysis (Hoiem et al. 2012, as the COCO site
shows it): for each category, the area under the precision-recall curve (101 recall points, as
the evaluator) as errors are forgiven one kind after another:

    C75  at IoU 0.75;  C50  at IoU 0.50;  Loc  at IoU 0.10 (poor localisation forgiven);
    Sim  also ignoring detections on objects of another category of the same supercategory;
    Oth  also ignoring detections on objects of any other category;
    BG   also dropping every remaining false positive (detections on background);
    FN   1: what the objects never found cost.

Each step's gain is what that kind of error costs. Matching is the evaluator's, per image and
category: detections by descending score (the best 100), each taking the unmatched object of its
category with the highest IoU at or above the threshold; one on a crowd region (intersection
over the detection's area) or on an ignored object counts neither way. "overall" is the mean
over the categories with objects; its C75 and C50 are the evaluator's AP75 and AP50.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..utils import hints

STEPS = ("C75", "C50", "Loc", "Sim", "Oth", "BG", "FN")
RECALLS = np.linspace(0.0, 1.0, 101)  # the evaluator's recall points
MAX_DETS = 100


@dataclass
class Boxes:
    """Boxes of one image: `xyxy` (n, 4) float64, `category` (n,) int64 dataset ids, `score`
    (n,) float64 (1 for ground truth), `crowd` (n,) bool (False for detections)."""
    xyxy: np.ndarray
    category: np.ndarray
    score: np.ndarray
    crowd: np.ndarray

    @classmethod
    def of(cls, entries: list[dict], truth: bool) -> Boxes:
        xywh = np.array([e["bbox"] for e in entries], dtype=np.float64).reshape(-1, 4)
        xyxy = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
        return cls(xyxy, np.array([e["category_id"] for e in entries], dtype=np.int64),
                   np.array([1.0 if truth else e["score"] for e in entries]),
                   np.array([bool(truth and e.get("iscrowd", 0)) for e in entries], dtype=bool))

    def where(self, mask: np.ndarray) -> Boxes:
        return Boxes(self.xyxy[mask], self.category[mask], self.score[mask], self.crowd[mask])


def overlaps(dets: np.ndarray, gts: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """(D, G) IoU of xyxy boxes; for a crowd object, intersection over the detection's area."""
    lt = np.maximum(dets[:, None, :2], gts[None, :, :2])
    rb = np.minimum(dets[:, None, 2:], gts[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_d = np.prod(dets[:, 2:] - dets[:, :2], axis=1)[:, None]
    area_g = np.prod(gts[:, 2:] - gts[:, :2], axis=1)[None, :]
    union = np.where(crowd[None, :], area_d, area_d + area_g - inter)
    return inter / np.maximum(union, np.finfo(np.float64).eps)


def average_precision(score: np.ndarray, outcome: np.ndarray, objects: int) -> float:
    """Area under the interpolated precision-recall curve at RECALLS, as the evaluator computes
    it. `outcome` per detection: 1 true positive, 0 false positive, -1 ignored."""
    keep = outcome >= 0
    order = np.argsort(-score[keep], kind="mergesort")
    hit = outcome[keep][order].astype(np.float64)
    tp, fp = np.cumsum(hit), np.cumsum(1 - hit)
    recall = tp / objects
    precision = np.maximum.accumulate((tp / np.maximum(tp + fp, 1e-12))[::-1])[::-1]
    at = np.searchsorted(recall, RECALLS, side="left")
    sampled = np.zeros(len(RECALLS))
    reached = at < len(precision)
    sampled[reached] = precision[at[reached]]
    return float(sampled.mean())


def _outcomes(dets: Boxes, gts: Boxes, category: int, threshold: float,
              ignored: set[int]) -> np.ndarray:
    """Per detection of `category` in one image: 1 matched, 0 false positive, -1 ignored (on a
    crowd region of its category, or on an object of an `ignored` category)."""
    own = (gts.category == category) & ~gts.crowd
    regions = ((gts.category == category) & gts.crowd) | np.isin(gts.category, list(ignored))
    iou = overlaps(dets.xyxy, gts.xyxy, gts.crowd)
    taken = np.zeros(len(gts.category), dtype=bool)
    result = np.zeros(len(dets.score), dtype=np.int64)
    for d in range(len(dets.score)):
        candidates = np.where(own & ~taken, iou[d], -1.0)
        best = int(np.argmax(candidates)) if len(candidates) else -1
        if best >= 0 and candidates[best] >= threshold:
            taken[best], result[d] = True, 1
        elif np.any(iou[d][regions] >= threshold):
            result[d] = -1
    return result


def breakdown(truth: dict[int, Boxes], found: dict[int, Boxes], categories: list[dict]
              ) -> dict:
    """The breakdown of every category and overall.

    Args:
        truth: {image_id: ground truth}; every image evaluated, with or without objects.
        found: {image_id: detections} (images without any may be absent).
        categories: the annotation file's entries ({"id", "name", "supercategory"}).

    Returns:
        {"per_class": [{"id", "name", "supercategory", "objects", STEPS...}], "overall":
        {STEPS...}}; a category without objects has None for every step.
    """
    superof = {c["id"]: c.get("supercategory", c["name"]) for c in categories}
    rows = []
    for category in categories:
        k = category["id"]
        similar = {c for c, s in superof.items() if s == superof[k] and c != k}
        others = set(superof) - {k}
        objects = sum(int(np.sum((g.category == k) & ~g.crowd)) for g in truth.values())
        row = {"id": k, "name": category["name"], "supercategory": superof[k],
               "objects": objects}
        if not objects:
            rows.append({**row, **dict.fromkeys(STEPS)})
            continue
        per_step: dict[str, list] = {step: [] for step in ("C75", "C50", "Loc", "Sim", "Oth")}
        scores = []
        for image_id, gts in truth.items():
            dets = found.get(image_id)
            if dets is None:
                continue
            dets = dets.where(dets.category == k)
            dets = dets.where(np.argsort(-dets.score, kind="mergesort")[:MAX_DETS])
            scores.append(dets.score)
            for step, threshold, ignored in (("C75", 0.75, set()), ("C50", 0.5, set()),
                                             ("Loc", 0.1, set()), ("Sim", 0.1, similar),
                                             ("Oth", 0.1, others)):
                per_step[step].append(_outcomes(dets, gts, k, threshold, ignored))
        score = np.concatenate(scores) if scores else np.zeros(0)
        for step, parts in per_step.items():
            outcome = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            row[step] = average_precision(score, outcome, objects)
            if step == "Oth":  # BG: every false positive left is dropped
                row["BG"] = average_precision(score, np.where(outcome == 0, -1, outcome),
                                              objects)
        row["FN"] = 1.0
        rows.append(row)
    measured = [row for row in rows if row["objects"]]
    overall = {step: (float(np.mean([row[step] for row in measured])) if measured else None)
               for step in STEPS}
    return {"per_class": rows, "overall": overall}


def confusion_matrix(truth: dict[int, Boxes], found: dict[int, Boxes], category_ids: list[int],
                     score_threshold: float = 0.3, iou_threshold: float = 0.5) -> np.ndarray:
    """(C + 1, C + 1) int64 counts: row = true category (last: background), column = detected
    category (last: none found), in the order of `category_ids`.

    Per image, detections above `score_threshold` by descending score each take the unmatched
    object of any category with the highest IoU >= `iou_threshold` (counted in [object's row,
    detection's column]); a detection left over counts as background, an object left over as
    missed. Detections on crowd regions are not counted.
    """
    index = {c: i for i, c in enumerate(category_ids)}
    none = len(category_ids)
    matrix = np.zeros((none + 1, none + 1), dtype=np.int64)
    for image_id, gts in truth.items():
        dets = found.get(image_id)
        objects = gts.where(~gts.crowd)
        taken = np.zeros(len(objects.score), dtype=bool)
        if dets is not None:
            dets = dets.where(dets.score > score_threshold)
            dets = dets.where(np.argsort(-dets.score, kind="mergesort"))
            iou = overlaps(dets.xyxy, objects.xyxy, objects.crowd)
            crowd = gts.where(gts.crowd)
            on_crowd = overlaps(dets.xyxy, crowd.xyxy, crowd.crowd)
            for d, category in enumerate(dets.category):
                candidates = np.where(taken, -1.0, iou[d])
                best = int(np.argmax(candidates)) if len(candidates) else -1
                if best >= 0 and candidates[best] >= iou_threshold:
                    taken[best] = True
                    matrix[index[int(objects.category[best])], index[int(category)]] += 1
                elif not np.any(on_crowd[d] >= iou_threshold):
                    matrix[none, index[int(category)]] += 1
        for category in objects.category[~taken]:
            matrix[index[int(category)], none] += 1
    return matrix


def shuffled_truth(truth: dict[int, Boxes], seed: int = 0) -> dict[int, Boxes]:
    """`truth` with its category ids permuted so that every category that has objects becomes
    another one (a derangement, drawn with `seed`); boxes, crowd flags and images stay.

    A control for a memorisation run: a model that learnt the labels scores far lower against
    these (C50 near 0), while an AP that a broken label path would reach just as well stays."""
    present = np.unique(np.concatenate([g.category for g in truth.values()]
                                       or [np.zeros(0, np.int64)]))
    if len(present) < 2:
        raise ValueError("shuffling labels needs objects of at least two categories")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(present))
    # A random cyclic order of the categories: each one takes the next one's id, so none keeps
    # its own.
    mapping = {int(present[order[i]]): int(present[order[(i + 1) % len(present)]])
               for i in range(len(present))}
    return {image_id: Boxes(g.xyxy, np.array([mapping[int(c)] for c in g.category],
                                             dtype=np.int64), g.score, g.crowd)
            for image_id, g in truth.items()}


def read_json(path: Path, what: str) -> object:
    """A JSON file the analysis reads; a missing, unreadable or damaged one is a UsageError
    naming it and what to do."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as err:
        raise UsageError(f"cannot read {what} {path}: {err.strerror or err}") from None
    except (ValueError, RecursionError) as err:
        raise UsageError(f"{what} {path} is damaged ({err}); run {hints.command('test')} "
                         f"again to write it") from None


def _check_results(results: object, results_file: Path, images: set[int],
                   categories: set[int], annotation_file: Path) -> None:
    """Every detection a COCO result ({image_id, category_id, bbox [x, y, w, h], score}) of an
    image and a category of the annotation file; else one UsageError saying which."""
    if not isinstance(results, list):
        raise UsageError(f"{results_file} is not a COCO results list (it holds a "
                         f"{type(results).__name__}); run {hints.command('test')} again to "
                         f"write it")
    foreign_images, foreign_classes = set(), set()
    for k, entry in enumerate(results):
        try:
            image, category = int(entry["image_id"]), int(entry["category_id"])
            numbers = [float(v) for v in entry["bbox"]] + [float(entry["score"])]
            if len(numbers) != 5 or not np.isfinite(numbers).all():
                raise ValueError("bbox is not 4 finite numbers or score not finite")
        except (KeyError, TypeError, ValueError) as err:
            raise UsageError(f"{results_file}: detection {k} is not a COCO result "
                             f"(image_id, category_id, bbox [x, y, w, h], score): "
                             f"{type(err).__name__} {err}; run {hints.command('test')} again "
                             f"to write it") from None
        if image not in images:
            foreign_images.add(image)
        if category not in categories:
            foreign_classes.add(category)
    if foreign_images or foreign_classes:
        parts = ([f"image ids {sorted(foreign_images)[:5]}"] if foreign_images else []) + \
            ([f"category ids {sorted(foreign_classes)[:5]}"] if foreign_classes else [])
        raise UsageError(f"{results_file} names {' and '.join(parts)} that {annotation_file} "
                         f"does not have: these results are of another dataset or split; run "
                         f"{hints.command('test')} on this one again")


def read_run(annotation_file: Path, results_file: Path, image_ids: Iterable[int] | None = None
             ) -> tuple[dict[int, Boxes], dict[int, Boxes], list[dict]]:
    """(truth, found, categories) of a COCO annotation file and a results file, on the images
    of `image_ids` (default: every image of the annotation file). A damaged file, or results
    naming images or categories the annotation file lacks, is a one-line UsageError."""
    gt = read_json(annotation_file, "the annotation file")
    results = read_json(results_file, "the results file")
    try:
        all_images = {int(image["id"]) for image in gt["images"]}
        all_classes = {int(category["id"]) for category in gt["categories"]}
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(f"{annotation_file} is not a COCO instances file ({type(err).__name__}"
                         f" {err})") from None
    _check_results(results, results_file, all_images, all_classes, annotation_file)
    wanted = {int(i) for i in image_ids} if image_ids is not None else all_images
    by_image: dict[int, list] = {i: [] for i in wanted}
    for annotation in gt.get("annotations", []):
        if int(annotation["image_id"]) in wanted:
            by_image[int(annotation["image_id"])].append(annotation)
    truth = {i: Boxes.of(entries, True) for i, entries in sorted(by_image.items())}
    found_lists: dict[int, list] = {}
    for entry in results:
        if int(entry["image_id"]) in wanted:
            found_lists.setdefault(int(entry["image_id"]), []).append(entry)
    found = {i: Boxes.of(entries, False) for i, entries in found_lists.items()}
    categories = sorted(gt["categories"], key=lambda c: c["id"])
    return truth, found, categories


def format_breakdown(analysis: dict) -> str:
    """A table: one row per category with objects, then "overall"."""
    width = max([len("overall"), *(len(r["name"]) for r in analysis["per_class"])])
    lines = [f"{'category':<{width}}  {'objects':>7}  " + "  ".join(f"{s:>5}" for s in STEPS)]
    rows = [r for r in analysis["per_class"] if r["objects"]]
    total = sum(r["objects"] for r in rows)
    for name, objects, values in [*((r["name"], r["objects"], r) for r in rows),
                                  ("overall", total, analysis["overall"])]:
        lines.append(f"{name:<{width}}  {objects:>7}  " + "  ".join(
            f"{values[s]:5.3f}" if values[s] is not None else f"{'-':>5}" for s in STEPS))
    return "\n".join(lines)
