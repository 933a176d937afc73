"""COCO results files and the 12 standard box metrics.

Detections are kept per image and per contiguous class (1..C); writing them out maps each class
to its dataset category id through the dataset (`db.cls2coco`), so a wrong mapping shows up as a
wrong AP rather than silently. The evaluator is faster-coco-eval by default; pycocotools, the
reference implementation, is selectable and gives the same numbers.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserMistake
from ..utils import hints
from .error_analysis import confusion_matrix, read_run
from .per_class import format_per_class, per_class_ap
from .report import matplotlib_missing, write_report

METRIC_NAMES = ("AP", "AP50", "AP75", "APs", "APm", "APl",
                "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")
BACKENDS = ("faster", "pycocotools")


def to_coco_results(top_bboxes: dict[int, dict[int, np.ndarray]],
                    cls2coco: Callable[[int], int]) -> list[dict]:
    """COCO "results" entries for every detection.

    Args:
        top_bboxes: {image_id: {cls 1..C: (n, 5) float [x1, y1, x2, y2, score]}}.
        cls2coco: contiguous class (1-based) -> the annotation file's category id.

    Returns:
        [{"image_id", "category_id", "bbox": [x, y, w, h], "score"}]; coordinates are rounded
        to 0.01 px and scores to 1e-4 (the original's 0.01 for scores made ties that change AP).
    """
    results = []
    for image_id, per_class in top_bboxes.items():
        for cls, boxes in per_class.items():
            category_id = int(cls2coco(cls))
            for x1, y1, x2, y2, score in np.asarray(boxes, dtype=np.float64)[:, :5]:
                results.append({
                    "image_id": int(image_id),
                    "category_id": category_id,
                    "bbox": [round(x1, 2), round(y1, 2), round(x2 - x1, 2), round(y2 - y1, 2)],
                    "score": round(score, 4),
                })
    return results


class MissingEvaluator(UserMistake, ImportError):
    """The COCO evaluator of a backend is not installed; the message says how to install it."""


def _backend(name: str) -> tuple[type, type]:
    try:
        if name == "faster":
            from faster_coco_eval import COCO, COCOeval_faster
            return COCO, COCOeval_faster
        if name == "pycocotools":
            from pycocotools.coco import COCO
            from pycocotools.cocoeval import COCOeval
            return COCO, COCOeval
    except ImportError as err:
        package = "faster-coco-eval" if name == "faster" else "pycocotools"
        raise MissingEvaluator(
            f"COCO evaluation needs {package} ({err}): install the 'coco' extra with "
            f"{hints.install('coco')}, or choose the other --backend") from None
    raise ValueError(f"unknown COCO evaluation backend '{name}'; valid: {', '.join(BACKENDS)}")


def require_backend(name: str) -> None:
    """Raise `MissingEvaluator` now, before a long run, when `name` cannot be imported."""
    _backend(name)


def _cocoeval(annotation_file: str | Path, results: list[dict], image_ids: Iterable[int],
              category_ids: Iterable[int], backend: str) -> Any:
    """A COCO box evaluator of `results` (entries as `to_coco_results` makes them; may be
    empty) against the ground truth of `annotation_file` on `image_ids` and `category_ids`,
    evaluated, accumulated and summarized; `backend` is "faster" (faster-coco-eval) or
    "pycocotools". `_summary` reads its 12 standard metrics (-1 where COCO has nothing to
    measure)."""
    coco_cls, eval_cls = _backend(backend)
    # Both backends print while loading and evaluating; the caller prints one summary instead.
    with contextlib.redirect_stdout(io.StringIO()):
        gt = coco_cls(str(annotation_file))
        if results:
            dt = gt.loadRes(results)
        else:
            # loadRes cannot take an empty list; an empty result set still scores 0 AP.
            dt = coco_cls()
            dt.dataset = {"images": gt.dataset["images"], "categories": gt.dataset["categories"],
                          "annotations": []}
            dt.createIndex()
        evaluator = eval_cls(gt, dt, "bbox")
        evaluator.params.imgIds = sorted(int(i) for i in image_ids)
        evaluator.params.catIds = sorted(int(c) for c in category_ids)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return evaluator


def _summary(evaluator: Any) -> dict[str, float]:
    return {name: float(value) for name, value in zip(METRIC_NAMES, evaluator.stats[:12])}


def format_metrics(metrics: dict[str, float]) -> str:
    """Two aligned lines: the AP numbers, then the AR numbers."""
    names = list(METRIC_NAMES)
    return "\n".join(
        "  ".join(f"{n}={metrics[n]:.4f}" for n in part) for part in (names[:6], names[6:])
    )


def score(db: Any, detections: dict[int, dict[int, np.ndarray]], out_dir: Path,
          backend: str = "faster", *, image_ids: Sequence[int] | None = None,
          unreadable: Mapping[int, str] | None = None,
          results_name: str = "results.json", weights: str = "raw",
          class_table: bool = False, report: bool = True,
          log: Callable[[str], None] = print) -> dict[str, float] | None:
    """Write the COCO results file to `out_dir` and, when the split has boxes, `metrics.json`
    (the summary, and AP and AP50 of each category under "per_class").

    Args:
        db: dataset with `cls2coco`, `num_classes`, `annotation_file`, `has_annotations`.
        detections: {image_id: {cls 1..C: (n, 5) [x1, y1, x2, y2, score]}} of the images run.
        out_dir: results/<Cfg>/<iter>/<split>; created if needed.
        backend: "faster" (faster-coco-eval) or "pycocotools"; "none" writes the results file
            only.
        image_ids: every image evaluated (default: those of `detections` and `unreadable`);
            results are written in this order, and an image without detections (unreadable,
            or nothing found) counts as a miss for each of its objects.
        unreadable: {image_id: reason} of the images that could not be read; counted in
            metrics.json.
        results_name: file name of the results (test-dev submissions have a fixed pattern).
        weights: which weights made the detections ("raw" or "ema"), recorded in metrics.json.
        class_table: report the AP and AP50 of each category (all go to metrics.json).
        report: also write the report (report.py): pr_curves.json and, with matplotlib, the
            precision-recall curves, per-class AP bars and confusion matrix pictures.
        log: where the lines about what was written, the metrics table and the report go
            (test.py passes print, training its run's log; the benchmark drops them).

    Returns:
        The 12 metrics, or None for a split without boxes (test-dev) or backend "none", which
        are only written.
    """
    unreadable = dict(unreadable or {})
    if image_ids is None:
        image_ids = [*detections, *(i for i in unreadable if i not in detections)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ordered = {image_id: detections[image_id] for image_id in image_ids
               if image_id in detections}
    results = to_coco_results(ordered, db.cls2coco)
    result_file = out_dir / results_name
    result_file.write_text(json.dumps(results))
    log(f"wrote {len(results)} detections of {len(ordered)} images to {result_file}")
    if unreadable:
        log(f"{len(unreadable)} of {len(image_ids)} images could not be read and are scored "
            f"as images without detections: {_first(unreadable.values())}")
    if backend == "none" and db.has_annotations:
        log("not scored: --backend none (no COCO evaluator asked for)")
        return None
    if not db.has_annotations:
        log("evaluation skipped: this split has no boxes (an image-info file); submit "
            f"{result_file.name} to the COCO evaluation server")
        return None

    names = {db.cls2coco(cls): db.cls2name(cls) for cls in range(1, db.num_classes + 1)}
    evaluator = _cocoeval(db.annotation_file, results, image_ids, list(names), backend)
    metrics = _summary(evaluator)
    classes = per_class_ap(evaluator.eval["precision"], evaluator.params.catIds,
                           [names[i] for i in evaluator.params.catIds])
    if class_table:
        log(format_per_class(classes))
    log(format_metrics(metrics))
    metrics_file = out_dir / "metrics.json"
    metrics_file.write_text(json.dumps({
        "metrics": metrics, "per_class": classes, "weights": weights, "backend": backend,
        "num_images": len(image_ids), "unreadable": len(unreadable),
        "unreadable_images": sorted(unreadable.values()),
        "annotation_file": str(db.annotation_file),
    }, indent=2))
    log(f"wrote {metrics_file}")
    if report:
        order = evaluator.params.catIds
        matrix = None
        if not matplotlib_missing():
            truth, found, _ = read_run(Path(db.annotation_file), result_file, image_ids)
            matrix = confusion_matrix(truth, found, order)
        write_report(out_dir, evaluator.eval["precision"], [names[i] for i in order], matrix,
                     log)
    return metrics


def _first(reasons: Iterable[str], count: int = 3) -> str:
    reasons = list(reasons)
    more = f" (and {len(reasons) - count} more)" if len(reasons) > count else ""
    return "; ".join(reasons[:count]) + more
