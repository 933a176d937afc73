"""The pictures of an evaluation: precision-recall curves, per-class AP and a confusion matrix.

The curves are read from the COCO evaluator's own precision array (see per_class.py for its
axes), so each curve's area, taken as COCO takes AP (the mean of the precision at its 101
recall points), is the AP the evaluator reports: overall it is the mean over the categories
with ground truth at each recall point. Drawing needs matplotlib (the `plot` extra) and uses a
Figure without pyplot; without it the report is one line saying how to get it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..utils.files import write_file_atomic

if TYPE_CHECKING:  # matplotlib is an extra, imported where a figure is drawn
    from matplotlib.figure import Figure

IOUS = {"0.5": 0, "0.75": 5}  # IoU threshold -> index into the evaluator's ten thresholds
RECALL = np.linspace(0.0, 1.0, 101)  # COCO's recall points
# matplotlib is a dependency: this is said only where an environment lost it
NO_MATPLOTLIB = ("report pictures need matplotlib, a dependency this environment lacks: pip "
                 "install matplotlib (the metrics and results are written without them)")
PICTURES = ("pr_curves.png", "per_class_ap.png", "confusion_matrix.png")


def pr_curves(precision: np.ndarray, names: Sequence[str]) -> dict:
    """{"recall": [101], "0.5" / "0.75": {"overall": [101] | None, "per_class": {name: [101] |
    None}}}: precision at each recall point, area "all", 100 detections; None where a category
    (or every category) has no ground truth."""
    curves: dict = {"recall": RECALL.tolist()}
    for iou, t in IOUS.items():
        part = precision[t, :, :, 0, -1]  # (R, K)
        valid = (part > -1).all(axis=0)
        curves[iou] = {
            "overall": part[:, valid].mean(axis=1).tolist() if valid.any() else None,
            "per_class": {str(name): part[:, k].tolist() if valid[k] else None
                          for k, name in enumerate(names)}}
    return curves


def area(curve: Sequence[float] | None) -> float | None:
    """The area under a precision-recall curve as COCO computes AP: the mean of its points."""
    return None if curve is None else float(np.mean(curve))


def matplotlib_missing() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return True
    return False


def write_report(out_dir: Path, precision: np.ndarray, names: Sequence[str],
                 matrix: np.ndarray | None = None, log: Callable[[str], None] = print
                 ) -> list[Path]:
    """pr_curves.json always; pr_curves.png, per_class_ap.png and (given `matrix`, as
    error_analysis.confusion_matrix makes it) confusion_matrix.png when matplotlib is
    installed, else one line. Returns the pictures written."""
    out_dir = Path(out_dir)
    curves = pr_curves(precision, names)
    (out_dir / "pr_curves.json").write_text(json.dumps(curves))
    if matplotlib_missing():
        log(NO_MATPLOTLIB)
        return []
    written = [_save(out_dir / "pr_curves.png", _pr_figure(curves)),
               _save(out_dir / "per_class_ap.png", _ap_figure(curves, names))]
    if matrix is not None:
        written.append(_save(out_dir / "confusion_matrix.png", _matrix_figure(matrix, names)))
    log(f"wrote the report pictures to {out_dir}: {', '.join(p.name for p in written)}")
    return written


def _save(path: Path, figure: Figure) -> Path:
    figure.tight_layout()
    write_file_atomic(path, lambda file: figure.savefig(file, format="png"))
    return path


def _pr_figure(curves: dict) -> Figure:
    from matplotlib.figure import Figure

    figure = Figure(dpi=100, figsize=(12, 5.5))
    axes = figure.subplots(1, len(IOUS), squeeze=False)[0]
    for axis, iou in zip(axes, IOUS):
        for curve in curves[iou]["per_class"].values():
            if curve is not None:
                axis.plot(RECALL, curve, linewidth=0.6, alpha=0.35)
        overall = curves[iou]["overall"]
        if overall is not None:
            axis.plot(RECALL, overall, color="black", linewidth=2.5,
                      label=f"all classes, area {area(overall):.3f}")
            axis.legend(loc="lower left")
        axis.set(title=f"precision-recall at IoU {iou} (thin: each class)", xlabel="recall",
                 ylabel="precision", xlim=(0, 1), ylim=(0, 1.02))
        axis.grid(True, alpha=0.3)
    return figure


def _ap_figure(curves: dict, names: Sequence[str]) -> Figure:
    from matplotlib.figure import Figure

    rows = [(str(n), area(curves["0.5"]["per_class"][str(n)]),
             area(curves["0.75"]["per_class"][str(n)])) for n in names]
    rows = sorted((r for r in rows if r[1] is not None), key=lambda r: -r[1])
    figure = Figure(dpi=100, figsize=(8, max(3.0, 0.22 * len(rows) + 1.2)))
    axis = figure.subplots()
    place = np.arange(len(rows))
    axis.barh(place - 0.2, [r[1] for r in rows], height=0.4, label="AP50")
    axis.barh(place + 0.2, [r[2] for r in rows], height=0.4, label="AP75")
    axis.set_yticks(place, [r[0] for r in rows], fontsize="small")
    axis.invert_yaxis()
    axis.set(xlim=(0, 1), xlabel="AP", title="AP of each class with ground truth")
    axis.legend(loc="lower right")
    return figure


def _matrix_figure(matrix: np.ndarray, names: Sequence[str]) -> Figure:
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    labels = [*map(str, names), "background / missed"]
    size = max(5.0, 0.16 * len(labels) + 2)
    figure = Figure(dpi=100, figsize=(size + 1, size))
    axis = figure.subplots()
    shown = np.ma.masked_equal(matrix, 0)
    image = axis.imshow(shown, cmap="viridis",
                        norm=LogNorm(vmin=1, vmax=max(int(matrix.max()), 2)))
    figure.colorbar(image, ax=axis, label="count", fraction=0.04, shrink=0.6)
    ticks = np.arange(len(labels))
    small = 5 if len(labels) > 30 else 8
    axis.set_xticks(ticks, labels, rotation=90, fontsize=small)
    axis.set_yticks(ticks, labels, fontsize=small)
    axis.set(xlabel="detected as", ylabel="true class",
             title="confusion matrix (score > 0.3, IoU >= 0.5)")
    return figure
