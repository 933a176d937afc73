"""AP and AP50 of each category, read from the COCO evaluator's precision array.

The evaluator's `eval["precision"]` is (T, R, K, A, M) float: IoU thresholds (0.50:0.95, ten),
recall points (101), categories, area ranges (all, small, medium, large), detection limits
(1, 10, 100). A category's AP is the mean of its (T, R) slice at area "all" and 100 detections,
as detectron2 computes it; entries of -1 mark a category without ground truth, whose AP is
then None. The summary AP is the mean of every valid entry over all categories, so it is the
mean of the per-category APs of the categories with ground truth.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def per_class_ap(precision: np.ndarray, category_ids: Sequence[int],
                 names: Sequence[str]) -> list[dict]:
    """[{"id", "name", "AP", "AP50", "AP75"}] per category, in the order of `category_ids` (the
    evaluator's `params.catIds`); the APs are None for a category without ground truth."""
    rows = []
    for k, (category_id, name) in enumerate(zip(category_ids, names)):
        values = {}
        for key, part in (("AP", precision[:, :, k, 0, -1]), ("AP50", precision[0, :, k, 0, -1]),
                          ("AP75", precision[5, :, k, 0, -1])):
            valid = part[part > -1]
            values[key] = float(valid.mean()) if valid.size else None
        rows.append({"id": int(category_id), "name": str(name), **values})
    return rows


def format_per_class(rows: Sequence[dict], columns: int = 3) -> str:
    """A table of AP and AP50 per category, `columns` categories side by side; "-" marks a
    category without ground truth."""
    width = max([len("category"), *(len(row["name"]) for row in rows)])

    def cell(row: dict | None) -> str:
        if row is None:
            return ""
        shown = [f"{row[key]:6.3f}" if row[key] is not None else f"{'-':>6}"
                 for key in ("AP", "AP50")]
        return f"{row['name']:<{width}}  {shown[0]}  {shown[1]}"

    head = "  |  ".join([f"{'category':<{width}}  {'AP':>6}  {'AP50':>6}"] * min(columns,
                                                                                len(rows)))
    lines = [head, "-" * len(head)]
    for start in range(0, len(rows), columns):
        part = list(rows[start:start + columns])
        lines.append("  |  ".join(cell(row) for row in part).rstrip())
    return "\n".join(lines)
