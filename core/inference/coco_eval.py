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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

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


def _backend(name: str) -> tuple[type, type]:
    if name == "faster":
        from faster_coco_eval import COCO, COCOeval_faster
        return COCO, COCOeval_faster
    if name == "pycocotools":
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
        return COCO, COCOeval
    raise ValueError(f"unknown COCO evaluation backend '{name}'; valid: {', '.join(BACKENDS)}")


def evaluate_coco(annotation_file: str | Path, results: list[dict], image_ids: Iterable[int],
                  category_ids: Iterable[int], backend: str = "faster") -> dict[str, float]:
    """The 12 standard COCO box metrics of `results` on `image_ids` and `category_ids`.

    Args:
        annotation_file: COCO instances json with the ground truth.
        results: entries as `to_coco_results` makes them; may be empty.
        image_ids, category_ids: what is evaluated (the images that were run, all classes).
        backend: "faster" (faster-coco-eval) or "pycocotools".

    Returns:
        {name: value} for METRIC_NAMES; -1 where COCO has nothing to measure (no ground truth
        in an area range).
    """
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
    return {name: float(value) for name, value in zip(METRIC_NAMES, evaluator.stats[:12])}


def format_metrics(metrics: dict[str, float]) -> str:
    """Two aligned lines: the AP numbers, then the AR numbers."""
    names = list(METRIC_NAMES)
    return "\n".join(
        "  ".join(f"{n}={metrics[n]:.4f}" for n in part) for part in (names[:6], names[6:])
    )


def save_and_evaluate(db: Any, top_bboxes: dict[int, dict[int, np.ndarray]], out_dir: Path,
                      backend: str = "faster") -> dict[str, float] | None:
    """Write `results.json` to `out_dir` and, when the split has annotations, `metrics.json`.

    Args:
        db: dataset with `cls2coco`, `num_classes`, `annotation_file`, `has_annotations`.
        top_bboxes: {image_id: {cls 1..C: (n, 5) [x1, y1, x2, y2, score]}} of the images run.
        out_dir: results/<Cfg>/<iter>/<split>; created if needed.
        backend: see `evaluate_coco`.

    Returns:
        The metrics, or None for a split without annotations (test-dev), which is only written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = to_coco_results(top_bboxes, db.cls2coco)
    result_file = out_dir / "results.json"
    result_file.write_text(json.dumps(results))
    print(f"wrote {len(results)} detections of {len(top_bboxes)} images to {result_file}")
    if not db.has_annotations:
        print("this split has no annotations: evaluation skipped (submit results.json to the "
              "evaluation server)")
        return None

    category_ids = [db.cls2coco(cls) for cls in range(1, db.num_classes + 1)]
    metrics = evaluate_coco(db.annotation_file, results, top_bboxes.keys(), category_ids,
                            backend)
    print(format_metrics(metrics))
    metrics_file = out_dir / "metrics.json"
    metrics_file.write_text(json.dumps({
        "metrics": metrics, "backend": backend, "num_images": len(top_bboxes),
        "annotation_file": str(db.annotation_file),
    }, indent=2))
    print(f"wrote {metrics_file}")
    return metrics
