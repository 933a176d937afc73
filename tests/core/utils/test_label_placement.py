"""Drawn labels stay inside the picture, off the small box they name, off each other, and
whole at the edges; the picture drawn has them where `place_labels` says."""

from __future__ import annotations

import numpy as np

from core.utils.vis import _inside, _label_size, class_color, draw_detections, place_labels

SHAPE = (120, 160, 3)
SIZE = (60, 17)  # (w, h) of a label


def inside_picture(rect, shape=SHAPE):
    return 0 <= rect[0] < rect[2] <= shape[1] and 0 <= rect[1] < rect[3] <= shape[0]


def overlap(a, b):
    return (max(0, min(a[2], b[2]) - max(a[0], b[0]))
            * max(0, min(a[3], b[3]) - max(a[1], b[1])))


def test_a_label_goes_above_its_box_at_the_left_corner():
    (rect,) = place_labels([(50, 60, 90, 100)], [SIZE], SHAPE)
    assert rect == (49, 42, 109, 59)  # just above the 2-pixel line


def test_a_small_box_at_the_top_edge_has_its_label_below_not_on_it():
    box = (40, 0, 52, 10)
    (rect,) = place_labels([box], [SIZE], SHAPE)
    assert inside_picture(rect)
    assert overlap(rect, _inside(box)) == 0
    assert rect[1] >= box[3]  # below it: above is outside the picture


def test_labels_at_the_edges_are_moved_in_whole():
    boxes = [(150, 30, 159, 40), (0, 110, 8, 119), (155, 112, 159, 119)]
    for rect, box in zip(place_labels(boxes, [SIZE] * 3, SHAPE), boxes):
        assert inside_picture(rect), (rect, box)
        assert rect[2] - rect[0] == SIZE[0] and rect[3] - rect[1] == SIZE[1]
        assert overlap(rect, _inside(box)) == 0


def test_two_labels_at_one_corner_do_not_overlap():
    boxes = [(50, 50, 100, 100), (50, 50, 70, 70)]  # the same top-left corner
    first, second = place_labels(boxes, [SIZE, SIZE], SHAPE)
    assert overlap(first, second) == 0
    assert overlap(second, _inside(boxes[1])) == 0


def test_many_labels_on_one_spot_never_overlap_while_there_is_room():
    boxes = [(70, 50, 80, 60)] * 4
    rects = place_labels(boxes, [SIZE] * 4, SHAPE)
    assert all(inside_picture(r) for r in rects)
    assert all(overlap(a, b) == 0 for i, a in enumerate(rects) for b in rects[i + 1:])


def test_a_box_as_large_as_the_picture_takes_its_label_in_its_top_left_corner():
    (rect,) = place_labels([(0, 0, 159, 119)], [SIZE], SHAPE)
    assert rect == (0, 0, 60, 17)  # moved into the picture, over the corner's lines


def test_the_drawn_picture_has_the_label_where_placed_and_the_small_box_uncovered():
    image = np.zeros(SHAPE, np.uint8)
    box = [40, 0, 52, 10]
    drawn = draw_detections(image, {"cat": np.array([[*box, 0.9]], np.float32)}, thresh=0.5)
    w, h, _ = _label_size("cat 0.90", 0.5)
    (rect,) = place_labels([tuple(box)], [(w, h)], SHAPE)
    left, top, right, bottom = rect
    color = np.array(class_color("cat"), np.uint8)
    # the label's corners are filled with the class colour (the text is in the middle)
    for y, x in ((top, left), (bottom - 1, right - 1), (top, right - 1), (bottom - 1, left)):
        assert (drawn[y, x] == color).all()
    x1, y1, x2, y2 = _inside(tuple(box))
    assert not drawn[y1:y2, x1:x2].any()  # the object is not covered
    assert not drawn[:, right + 1:].any()  # nothing else drawn right of the label


def test_the_best_scoring_box_gets_the_preferred_place():
    image = np.zeros(SHAPE, np.uint8)
    boxes = {"a": np.array([[50, 50, 70, 70, 0.6]], np.float32),
             "b": np.array([[50, 50, 100, 100, 0.9]], np.float32)}
    drawn = draw_detections(image, boxes, thresh=0.5)
    _, h, _ = _label_size("b 0.90", 0.5)
    # "b" scores higher: its label takes the place above the shared corner
    assert (drawn[50 - 1 - h, 49] == np.array(class_color("b"), np.uint8)).all()
