"""The COCO error breakdown and the confusion matrix on the hand-built set, whose answers are
worked out in tests/_handbuilt.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.errors import UsageError
from core.inference.coco_eval import score
from core.inference.error_analysis import (
    STEPS,
    Boxes,
    breakdown,
    confusion_matrix,
    read_run,
    shuffled_truth,
)
from tests import _handbuilt as hand


@pytest.fixture()
def run(tmp_path):
    annotation_file, results_file = hand.write(tmp_path / "set")
    return read_run(annotation_file, results_file)


def test_breakdown_of_each_error_kind_is_the_worked_out_one(run):
    rows = {row["name"]: row for row in breakdown(*run)["per_class"]}
    for step in STEPS:
        assert rows["cat"][step] == pytest.approx(hand.CAT[step], abs=1e-12), step
    assert rows["cat"]["objects"] == 4
    assert [rows["car"][step] for step in STEPS] == pytest.approx([1.0] * 7)
    # dog: nothing found, so every step is 0 but the last
    assert [rows["dog"][step] for step in STEPS] == [0.0] * 6 + [1.0]
    assert rows["unicorn"]["objects"] == 0 and rows["unicorn"]["C50"] is None


def test_overall_is_the_mean_over_categories_with_objects_and_matches_the_evaluator(
        run, tmp_path):
    analysis = breakdown(*run)
    cat, dog, car = hand.CAT["C50"], 0.0, 1.0
    assert analysis["overall"]["C50"] == pytest.approx((cat + dog + car) / 3)
    annotation_file = tmp_path / "set" / "annotations.json"
    metrics = score(hand.dataset(annotation_file), hand.detections(), tmp_path / "out",
                    image_ids=list(range(1, 8)))
    assert analysis["overall"]["C50"] == pytest.approx(metrics["AP50"], rel=1e-6)
    assert analysis["overall"]["C75"] == pytest.approx(metrics["AP75"], rel=1e-6)


def test_similar_class_needs_the_same_supercategory(tmp_path):
    annotation_file, results_file = hand.write(tmp_path / "set")
    content = json.loads(annotation_file.read_text())
    content["categories"][1]["supercategory"] = "pet"  # dog is no longer like cat
    annotation_file.write_text(json.dumps(content))
    cat = breakdown(*read_run(annotation_file, results_file))["per_class"][0]
    assert cat["Sim"] == pytest.approx(cat["Loc"])  # nothing forgiven at Sim
    assert cat["Oth"] == pytest.approx(hand.CAT["Oth"])  # the dog confusion forgiven at Oth


def test_a_detection_on_a_crowd_region_is_neither_hit_nor_error(tmp_path):
    annotation_file, results_file = hand.write(tmp_path / "set")
    content = json.loads(annotation_file.read_text())
    content["annotations"].append({"id": 99, "image_id": 7, "category_id": 1, "bbox": hand.BOX,
                                   "area": 1600.0, "iscrowd": 1})
    annotation_file.write_text(json.dumps(content))
    cat = breakdown(*read_run(annotation_file, results_file))["per_class"][0]
    assert cat["objects"] == 4  # a crowd region is not an object
    # Without the background detection first, C75 is one hit then nothing: P 1 up to R 0.25.
    assert cat["C75"] == pytest.approx(26 / 101)


def test_confusion_matrix_counts_hits_confusions_background_and_misses(run):
    truth, found, categories = run
    matrix = confusion_matrix(truth, found, [c["id"] for c in categories], score_threshold=0.3)
    expected = np.zeros((5, 5), dtype=np.int64)
    cat, dog, car, background = 0, 1, 2, 4
    expected[cat, cat] = 2           # images 1 and 2 (IoU 1 and 0.6)
    expected[cat, background] = 2    # image 3 (IoU 0.3 < 0.5) and image 4: missed
    expected[background, cat] = 3    # image 3's narrow box, image 6's second box, image 7
    expected[dog, cat] = 1           # image 5
    expected[car, car] = 1           # image 6
    assert matrix.tolist() == expected.tolist()
    higher = confusion_matrix(truth, found, [c["id"] for c in categories], score_threshold=0.85)
    assert higher[background, cat] == 1 and higher[car, car] == 1 and higher[cat, cat] == 0


def test_shuffled_labels_move_every_object_to_another_category_and_perfect_answers_to_zero(run):
    truth, _, categories = run
    perfect = {i: Boxes(g.xyxy, g.category, np.linspace(1.0, 0.5, len(g.category)), g.crowd * 0)
               for i, g in truth.items()}
    assert breakdown(truth, perfect, categories)["overall"]["C50"] == pytest.approx(1.0)
    for seed in range(5):
        shuffled = shuffled_truth(truth, seed)
        for image_id, g in truth.items():
            assert np.array_equal(shuffled[image_id].xyxy, g.xyxy)
            assert not np.any(shuffled[image_id].category == g.category)
        # cat, dog and car each become another of the three: counts move with them
        labels = np.concatenate([g.category for g in shuffled.values()])
        assert sorted(int(np.sum(labels == k)) for k in (1, 2, 3)) == [1, 1, 4]
        assert breakdown(shuffled, perfect, categories)["overall"]["C50"] == 0.0


def test_shuffling_the_labels_of_one_category_is_refused(run):
    truth, _, _ = run
    only_cats = {i: g.where(g.category == 1) for i, g in truth.items()}
    with pytest.raises(ValueError, match="at least two categories"):
        shuffled_truth(only_cats)


@pytest.mark.parametrize("damage, words", [
    (lambda text: text[: len(text) // 2], "is damaged"),
    (lambda text: json.dumps({"not": "a list"}), "is not a COCO results list"),
    (lambda text: json.dumps([{"image_id": 1, "bbox": [0, 0, 1, 1], "score": 0.5}]),
     "detection 0 is not a COCO result"),
    (lambda text: json.dumps([{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1],
                               "score": 0.5}]), "detection 0 is not a COCO result"),
])
def test_a_damaged_results_file_is_one_line_naming_it(tmp_path, damage, words):

    annotation_file, results_file = hand.write(tmp_path / "set")
    results_file.write_text(damage(results_file.read_text()))
    with pytest.raises(UsageError) as caught:
        read_run(annotation_file, results_file)
    assert str(caught.value).startswith(f"{results_file}") or words == "is damaged"
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_results_naming_images_or_categories_of_another_dataset_are_refused(tmp_path):

    annotation_file, results_file = hand.write(tmp_path / "set")
    results = json.loads(results_file.read_text())
    results[0] = {**results[0], "image_id": 987654}
    results[1] = {**results[1], "category_id": 4242}
    results_file.write_text(json.dumps(results))
    with pytest.raises(UsageError, match=r"names image ids \[987654\] and category ids \[4242\] "
                                         r"that .* does not have: these results are of another"):
        read_run(annotation_file, results_file)
