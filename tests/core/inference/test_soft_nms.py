"""soft_nms: hand-made cases with known answers, and agreement with a plain per-box reference."""

import math

import numpy as np
import pytest

from core.inference.soft_nms import soft_nms

# Areas 100 and 200 with the "+1" convention; the first lies inside the second: IoU exactly 0.5.
A = [0, 0, 9, 9]
B = [0, 0, 9, 19]
FAR = [100, 100, 109, 109]


def boxes(*rows):
    return np.array(rows, dtype=np.float32)


def reference_soft_nms(boxes, method, nms_threshold, sigma=0.5, score_threshold=0.001,
                       weight_exp=None):
    """Straightforward soft-NMS: pick the best remaining box, loop over every other one."""
    remaining = [list(map(float, row)) + [i] for i, row in enumerate(boxes)]
    keep, out = [], []
    while remaining:
        best = max(range(len(remaining)), key=lambda k: (remaining[k][4], -k))
        pick = remaining.pop(best)
        px1, py1, px2, py2 = pick[:4]
        parea = (px2 - px1 + 1) * (py2 - py1 + 1)
        sums = {"x1": px1 * pick[5], "y1": py1 * pick[5], "tl": pick[5],
                "x2": px2 * pick[6], "y2": py2 * pick[6], "br": pick[6]} if weight_exp else None
        survivors = []
        for box in remaining:
            x1, y1, x2, y2 = box[:4]
            iw = min(px2, x2) - max(px1, x1) + 1
            ih = min(py2, y2) - max(py1, y1) + 1
            if iw > 0 and ih > 0:
                iou = iw * ih / (parea + (x2 - x1 + 1) * (y2 - y1 + 1) - iw * ih)
                if method == "linear_soft_nms":
                    weight = 1 - iou if iou > nms_threshold else 1.0
                elif method == "exp_soft_nms":
                    weight = math.exp(-iou * iou / sigma)
                else:
                    weight = 0.0 if iou > nms_threshold else 1.0
                if weight_exp:
                    mw = (1 - weight) ** weight_exp
                    sums["x1"] += x1 * box[5] * mw
                    sums["y1"] += y1 * box[5] * mw
                    sums["tl"] += box[5] * mw
                    sums["x2"] += x2 * box[6] * mw
                    sums["y2"] += y2 * box[6] * mw
                    sums["br"] += box[6] * mw
                box[4] *= weight
                if box[4] < score_threshold:
                    continue
            survivors.append(box)
        remaining = survivors
        row = pick[:-1]
        if weight_exp:
            row[:4] = [sums["x1"] / sums["tl"], sums["y1"] / sums["tl"],
                       sums["x2"] / sums["br"], sums["y2"] / sums["br"]]
        keep.append(pick[-1])
        out.append(row)
    return (np.array(keep, dtype=np.int64),
            np.array(out, dtype=np.float32).reshape(-1, len(boxes[0])))


def test_linear_rescales_overlap_above_threshold_by_one_minus_iou():
    keep, out = soft_nms(boxes(A + [0.9], B + [0.8]), "linear_soft_nms", nms_threshold=0.3)
    assert keep.tolist() == [0, 1]
    np.testing.assert_allclose(out[:, 4], [0.9, 0.8 * (1 - 0.5)], rtol=1e-6)


def test_linear_leaves_overlap_at_threshold_alone():
    _, out = soft_nms(boxes(A + [0.9], B + [0.8]), "linear_soft_nms", nms_threshold=0.5)
    np.testing.assert_allclose(out[:, 4], [0.9, 0.8], rtol=1e-6)


def test_gaussian_rescales_by_exp_of_squared_iou_over_sigma():
    keep, out = soft_nms(boxes(A + [0.9], B + [0.8], FAR + [0.7]), "exp_soft_nms", sigma=0.5)
    assert keep.tolist() == [0, 2, 1]
    np.testing.assert_allclose(out[:, 4], [0.9, 0.7, 0.8 * math.exp(-0.25 / 0.5)], rtol=1e-6)


def test_hard_nms_removes_boxes_above_threshold_and_keeps_the_rest():
    keep, out = soft_nms(boxes(B + [0.8], A + [0.9], FAR + [0.1]), "nms", nms_threshold=0.4)
    assert keep.tolist() == [1, 2]
    np.testing.assert_allclose(out[:, 4], [0.9, 0.1])
    keep, _ = soft_nms(boxes(B + [0.8], A + [0.9]), "nms", nms_threshold=0.5)
    assert keep.tolist() == [1, 0]


def test_boxes_are_returned_in_pick_order_with_their_rescored_values():
    # C overlaps B only; after B is rescored below C, C is picked before it.
    c = [0, 15, 9, 24]
    keep, out = soft_nms(boxes(A + [0.9], B + [0.8], c + [0.5]), "linear_soft_nms",
                         nms_threshold=0.3)
    assert keep.tolist() == [0, 2, 1]
    np.testing.assert_allclose(out[:, :4], boxes(A, c, B))


def test_low_score_box_overlapping_nothing_is_kept():
    keep, out = soft_nms(boxes(A + [0.9], FAR + [0.0005]), "exp_soft_nms")
    assert keep.tolist() == [0, 1]
    assert out[1, 4] == pytest.approx(0.0005)


def test_rescored_box_below_score_threshold_is_dropped():
    keep, _ = soft_nms(boxes(A + [0.9], B + [0.0015]), "linear_soft_nms", nms_threshold=0.3)
    assert keep.tolist() == [0]


def test_merge_averages_suppressed_box_weighted_by_corner_scores():
    # Hard NMS: the suppressed box gets merge weight (1 - 0) ** exp = 1.
    rows = boxes(A + [0.9, 0.6, 0.2, 0], B + [0.8, 0.3, 0.6, 0])
    keep, out = soft_nms(rows, "nms", nms_threshold=0.4, weight_exp=8)
    assert keep.tolist() == [0]
    np.testing.assert_allclose(out[0, :4], [0, 0, 9, (9 * 0.2 + 19 * 0.6) / 0.8], rtol=1e-6)
    np.testing.assert_allclose(out[0, 4:], [0.9, 0.6, 0.2, 0])


def test_merge_weight_is_one_minus_weight_to_the_power_weight_exp():
    rows = boxes(A + [0.9, 1.0, 1.0, 0], B + [0.8, 1.0, 1.0, 0])
    _, out = soft_nms(rows, "linear_soft_nms", nms_threshold=0.3, weight_exp=2)
    mw = 0.5 ** 2
    np.testing.assert_allclose(out[0, 3], (9 + 19 * mw) / (1 + mw), rtol=1e-6)


def test_corner_scores_travel_with_their_box():
    # The original's defect would merge the best box with row 0's corner scores (0.1, 0.1).
    rows = boxes(B + [0.5, 0.1, 0.1, 0], A + [0.9, 0.9, 0.9, 0])
    _, out = soft_nms(rows, "nms", nms_threshold=0.4, weight_exp=8)
    np.testing.assert_allclose(out[0, 3], (9 * 0.9 + 19 * 0.1) / 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[0, 5:7], [0.9, 0.9])


def test_empty_input_gives_empty_output():
    keep, out = soft_nms(np.zeros((0, 7), np.float32), "exp_soft_nms", weight_exp=8)
    assert keep.shape == (0,) and out.shape == (0, 7)


def test_unknown_method_is_an_error_naming_the_valid_ones():
    with pytest.raises(ValueError, match="exp_soft_nms"):
        soft_nms(boxes(A + [0.9]), "soft")


def random_boxes(rng, n):
    xy = rng.uniform(0, 60, size=(n, 2))
    wh = rng.uniform(2, 40, size=(n, 2))
    scores = rng.uniform(0, 1, size=(n, 3))
    return np.concatenate([xy, xy + wh, scores, np.zeros((n, 1))], axis=1).astype(np.float32)


@pytest.mark.parametrize("method", ["nms", "linear_soft_nms", "exp_soft_nms"])
@pytest.mark.parametrize("weight_exp", [None, 8])
def test_matches_reference_on_random_boxes(method, weight_exp):
    rng = np.random.default_rng(0)
    for trial in range(20):
        rows = random_boxes(rng, int(rng.integers(1, 60)))
        keep, out = soft_nms(rows, method, nms_threshold=0.5, sigma=0.5, weight_exp=weight_exp)
        ref_keep, ref_out = reference_soft_nms(rows, method, 0.5, 0.5, weight_exp=weight_exp)
        np.testing.assert_array_equal(keep, ref_keep, err_msg=f"trial {trial}")
        np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-4, err_msg=f"trial {trial}")
