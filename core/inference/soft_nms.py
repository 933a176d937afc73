"""Soft-NMS (Bodla et al., 2017) and its box-merging variant, in numpy.

Semantics follow the original CornerNet-Lite `soft_nms` / `soft_nms_merge` (Fast R-CNN lineage):
boxes are picked greedily by their current score; every later box that overlaps the pick (with
the legacy "+1" pixel convention, so touching boxes overlap) is rescored by a weight of its IoU
with the pick, and dropped when its new score falls below `score_threshold`. Boxes that overlap
nothing keep their score, however low.

The original Cython code moves the best box to the front by copying only its first five columns
(x1, y1, x2, y2, score), so the two corner scores in columns 5 and 6 stay behind in the old row and
the merge variant weights each box by another box's corner scores; discarding a box copies five
columns of the last row over it the same way. Here a box's columns always travel together.
"""

from __future__ import annotations

import numpy as np

from ..config.system import NMS_ALGORITHMS

METHODS = NMS_ALGORITHMS  # checked in the config already; a direct call is checked here


def _weights(iou: np.ndarray, method: str, nms_threshold: float, sigma: float) -> np.ndarray:
    """Score multipliers of overlapping boxes given their IoU with the picked box."""
    if method == "linear_soft_nms":
        return np.where(iou > nms_threshold, 1.0 - iou, 1.0)
    if method == "exp_soft_nms":
        return np.exp(-(iou * iou) / sigma)
    return np.where(iou > nms_threshold, 0.0, 1.0)


def soft_nms(
    boxes: np.ndarray,
    method: str = "nms",
    nms_threshold: float = 0.3,
    sigma: float = 0.5,
    score_threshold: float = 0.001,
    weight_exp: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy (soft) non-maximum suppression of one class's boxes.

    Args:
        boxes: (N, D) float, D >= 5, rows `[x1, y1, x2, y2, score, ...]`; with `weight_exp`
            D >= 7 and columns 5, 6 hold the top-left and bottom-right corner scores.
        method: "nms" (hard: weight 0 above `nms_threshold`), "linear_soft_nms" (weight 1 - IoU
            above `nms_threshold`) or "exp_soft_nms" (weight exp(-IoU^2 / sigma)).
        nms_threshold: IoU above which "nms" and "linear_soft_nms" act (strictly above).
        sigma: width of the gaussian of "exp_soft_nms".
        score_threshold: a rescored box whose score falls below this is dropped.
        weight_exp: when given, the merge variant: each picked box becomes the average of itself
            and the boxes it suppresses, weighted by corner score times (1 - weight) ** weight_exp
            (top-left corner scores for x1, y1; bottom-right for x2, y2). The IoUs of later
            boxes are taken with the pick before merging, as in the original.

    Returns:
        keep: (M,) int64 row indices into `boxes`, in the order the boxes were picked;
        out: (M, D) float32, `boxes[keep]` with column 4 the score at the time of the pick and,
        for the merge variant, columns 0-3 the merged box.
    """
    if method not in METHODS:
        raise ValueError(f"unknown nms_algorithm '{method}'; valid: {', '.join(METHODS)}")
    if boxes.ndim != 2 or boxes.shape[1] < (7 if weight_exp is not None else 5):
        raise ValueError(f"soft_nms needs (N, >=5) boxes, (N, >=7) for merging; got {boxes.shape}")
    data = boxes.astype(np.float64)
    x1, y1, x2, y2 = data[:, 0], data[:, 1], data[:, 2], data[:, 3]
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    scores = data[:, 4].copy()
    out = data.copy()

    keep = []
    alive = np.arange(len(data))
    while alive.size:
        best = int(np.argmax(scores[alive]))
        pick = alive[best]
        keep.append(pick)
        rest = np.delete(alive, best)

        iw = np.minimum(x2[pick], x2[rest]) - np.maximum(x1[pick], x1[rest]) + 1
        ih = np.minimum(y2[pick], y2[rest]) - np.maximum(y1[pick], y1[rest]) + 1
        overlap = (iw > 0) & (ih > 0)
        inter = np.where(overlap, iw * ih, 0.0)
        iou = inter / (areas[pick] + areas[rest] - inter)
        weight = np.where(overlap, _weights(iou, method, nms_threshold, sigma), 1.0)

        if weight_exp is not None:
            out[pick, 0:4] = _merged(data, pick, rest, np.where(overlap, (1 - weight), 0.0),
                                     weight_exp)
        out[pick, 4] = scores[pick]
        scores[rest] *= weight
        alive = rest[~(overlap & (scores[rest] < score_threshold))]

    keep_arr = np.asarray(keep, dtype=np.int64)
    return keep_arr, out[keep_arr].astype(np.float32)


def _merged(data: np.ndarray, pick: int, rest: np.ndarray, suppression: np.ndarray,
            weight_exp: float) -> np.ndarray:
    """The picked box averaged with the boxes in `rest`, weighted as `soft_nms` describes."""
    mw = suppression ** weight_exp
    tl = np.concatenate(([data[pick, 5]], data[rest, 5] * mw))
    br = np.concatenate(([data[pick, 6]], data[rest, 6] * mw))
    rows = np.concatenate(([pick], rest))
    xy1 = (data[rows, 0:2] * tl[:, None]).sum(0) / tl.sum()
    xy2 = (data[rows, 2:4] * br[:, None]).sum(0) / br.sum()
    return np.concatenate((xy1, xy2))
