"""Evaluation: COCO results and metrics on coco128, and mapping detections back to the image."""

import json

import numpy as np
import pytest
import torch

from core.config import SystemConfig, check_db_config
from core.dbs import COCO
from core.inference import cornernet_saccade as saccade
from core.inference.coco_eval import METRIC_NAMES, score, to_coco_results
from core.inference.cornernet import (
    cornernet_inference,
    flip_back,
    map_to_image,
    per_class_nms,
    resize_and_pad,
)
from core.inference.soft_nms import soft_nms

BOX = [20.0, 10.0, 60.0, 50.0]  # x1, y1, x2, y2 in a 100 x 200 (H x W) image


def coco_db(coco128, tmp_path, annotation_file="instances_coco128_val.json"):
    system = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache")})
    db_config = {"image_dirs": {"val": str(coco128 / "images")},
                 "annotation_files": {"val": str(coco128 / "annotations" / annotation_file)}}
    return COCO(db_config, split="val", sys_config=system)


def perfect_predictions(db):
    """{image_id: {cls: (n, 5)}} from the non-crowd ground truth, every score 1."""
    top_bboxes = {}
    for ind in db.db_inds:
        gt = db.detections(ind)
        top_bboxes[db.image_id(ind)] = {
            cls: np.concatenate([gt[gt[:, 4] == cls, :4], np.ones(((gt[:, 4] == cls).sum(), 1))],
                                axis=1)
            for cls in range(1, db.num_classes + 1)
        }
    return top_bboxes


@pytest.mark.parametrize("backend", ["faster", "pycocotools"])
@pytest.mark.slow  # 5 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_perfect_predictions_score_ap_one(coco128, tmp_path, backend):
    db = coco_db(coco128, tmp_path)
    metrics = score(db, perfect_predictions(db), tmp_path / "out", backend=backend)
    assert metrics["AP"] == pytest.approx(1.0)
    assert metrics["AP50"] == pytest.approx(1.0) and metrics["AR100"] == pytest.approx(1.0)
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert list(saved["metrics"]) == list(METRIC_NAMES) and saved["backend"] == backend
    assert len(json.loads((tmp_path / "out" / "results.json").read_text())) == sum(
        len(db.detections(ind)) for ind in db.db_inds)


@pytest.mark.parametrize("backend", ["faster", "pycocotools"])
@pytest.mark.slow  # 5 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_swapping_two_classes_lowers_ap(coco128, tmp_path, backend):
    db = coco_db(coco128, tmp_path)
    top_bboxes = perfect_predictions(db)
    person, car = db.coco2cls(1), db.coco2cls(3)
    for per_class in top_bboxes.values():
        per_class[person], per_class[car] = per_class[car], per_class[person]
    metrics = score(db, top_bboxes, tmp_path, backend=backend)
    assert metrics["AP"] < 0.99


def test_category_ids_come_from_the_dataset_mapping(coco128, tmp_path):
    db = coco_db(coco128, tmp_path)
    boxes = {cls: np.array([[1, 2, 11, 32, 0.5]]) for cls in range(1, db.num_classes + 1)}
    results = to_coco_results({9: boxes}, db.cls2coco)
    assert [r["category_id"] for r in results] == db.class_ids
    assert results[-1]["category_id"] == 90  # class 80 is toothbrush, id 90 after the gaps
    assert results[0]["bbox"] == [1.0, 2.0, 10.0, 30.0] and results[0]["score"] == 0.5


@pytest.mark.slow  # 2 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_wrong_mapping_in_the_dataset_lowers_ap(coco128, tmp_path, monkeypatch):
    db = coco_db(coco128, tmp_path)
    top_bboxes = perfect_predictions(db)
    ids = db.class_ids
    monkeypatch.setattr(db, "cls2coco", lambda cls: ids[cls % len(ids)])
    assert score(db, top_bboxes, tmp_path)["AP"] == pytest.approx(0.0)


@pytest.mark.slow  # 4 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_images_without_detections_count_as_misses(coco128, tmp_path):
    db = coco_db(coco128, tmp_path)
    top_bboxes = perfect_predictions(db)
    first = db.image_id(db.db_inds[0])
    top_bboxes[first] = {cls: np.zeros((0, 5)) for cls in range(1, db.num_classes + 1)}
    metrics = score(db, top_bboxes, tmp_path)
    assert 0.5 < metrics["AR100"] < 1.0
    empty = {image_id: {} for image_id in top_bboxes}
    assert score(db, empty, tmp_path)["AP"] == 0.0


@pytest.mark.slow  # 4 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_an_unreadable_image_is_a_counted_miss(coco128, tmp_path):
    db = coco_db(coco128, tmp_path)
    top_bboxes = perfect_predictions(db)
    all_ids = [db.image_id(ind) for ind in db.db_inds]
    first = all_ids[0]
    assert len(db.detections(db.db_inds[0])) > 0
    readable = score(db, top_bboxes, tmp_path / "readable", image_ids=all_ids)
    del top_bboxes[first]
    missed = score(db, top_bboxes, tmp_path / "missed", image_ids=all_ids,
                   unreadable={first: "cannot read image x.jpg: truncated"})
    assert readable["AP"] == pytest.approx(1.0) and missed["AP"] < readable["AP"]
    assert missed["AR100"] < 1.0
    saved = json.loads((tmp_path / "missed" / "metrics.json").read_text())
    assert saved["num_images"] == len(all_ids) and saved["unreadable"] == 1
    assert saved["unreadable_images"] == ["cannot read image x.jpg: truncated"]


def test_backend_none_writes_the_results_and_scores_nothing(coco128, tmp_path, capsys,
                                                           monkeypatch):
    """test.py --backend none: where no evaluator is installed (a GPU machine without
    network), the detections are still written, and the run says they are not scored."""
    from core.inference import coco_eval
    monkeypatch.setattr(coco_eval, "_backend", lambda name: pytest.fail("evaluator imported"))
    db = coco_db(coco128, tmp_path)
    assert score(db, perfect_predictions(db), tmp_path / "out", backend="none") is None
    assert "not scored: --backend none" in capsys.readouterr().out
    assert len(json.loads((tmp_path / "out" / "results.json").read_text())) == sum(
        len(db.detections(ind)) for ind in db.db_inds)
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_split_without_annotations_writes_results_only(coco128, tmp_path, capsys):
    content = json.loads((coco128 / "annotations" / "instances_coco128_val.json").read_text())
    del content["annotations"]
    (tmp_path / "testdev.json").write_text(json.dumps(content))
    system = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache")})
    db = COCO({"image_dirs": {"testdev": str(coco128 / "images")},
               "annotation_files": {"testdev": str(tmp_path / "testdev.json")}},
              split="testdev", sys_config=system)
    top_bboxes = {db.image_id(0): {1: np.array([[1, 2, 11, 32, 0.5]])}}
    assert score(db, top_bboxes, tmp_path / "out") is None
    assert "evaluation skipped" in capsys.readouterr().out
    assert len(json.loads((tmp_path / "out" / "results.json").read_text())) == 1
    assert not (tmp_path / "out" / "metrics.json").exists()


# ---- CornerNet inference: padding, flip, scales ---------------------------------------------

class FakeDB:
    def __init__(self, **overrides):
        self.configs = check_db_config({"input_size": [511, 511], "output_sizes": [[128, 128]],
                                        "categories": 2, "top_k": 4, "num_dets": 4, **overrides})
        self.mean = np.array([0.4, 0.45, 0.5], dtype=np.float32)
        self.std = np.array([0.25, 0.3, 0.35], dtype=np.float32)


class FakeNet:
    """Returns queued (B, num_dets, 8) detections, one array per call; records the inputs."""

    device = torch.device("cpu")

    def __init__(self, *responses):
        self.responses = list(responses)
        self.inputs = []

    def test(self, images, **kwargs):
        self.inputs.append(images)
        return (torch.as_tensor(np.asarray(self.responses.pop(0), dtype=np.float32)),)


def row(box, score=0.9, cls=0):
    return list(box) + [score, score, score, cls]


REJECTED = row([0, 0, 1, 1], score=-1)


def canvas_to_map(box, border, ratios):
    """Image box at the test scale -> output-map box (the forward of map_to_image)."""
    x1, y1, x2, y2 = box
    return [(x1 + border[1]) * ratios[1], (y1 + border[0]) * ratios[0],
            (x2 + border[1]) * ratios[1], (y2 + border[0]) * ratios[0]]


def test_canvas_sides_are_one_less_than_a_multiple_of_128_with_the_image_centred():
    image = np.full((100, 200, 3), 7, np.uint8)
    canvas, border, size = resize_and_pad(image, 1.0)
    assert canvas.shape == (127, 255, 3)
    assert border.tolist() == [13, 27] and size.tolist() == [100, 200]
    assert (canvas[13:113, 27:227] == 7).all() and canvas.sum() == 7 * image.size
    assert resize_and_pad(image, 3.0)[0].shape == (383, 639, 3)


def test_flip_back_mirrors_and_keeps_x1_left_of_x2():
    dets = np.array([row([10, 5, 20, 15])], np.float32)
    assert flip_back(dets, 64)[0, :4].tolist() == [44, 5, 54, 15]


def test_map_to_image_divides_by_the_scale():
    dets = np.array([row([10, 10, 20, 30])], np.float32)
    mapped = map_to_image(dets, np.array([0.5, 0.25]), np.array([4, 8]), np.array([200, 400]),
                          scale=2.0)
    np.testing.assert_allclose(mapped[0, :4], [(40 - 8) / 2, (20 - 4) / 2, (80 - 8) / 2,
                                               (60 - 4) / 2])


def test_map_to_image_clips_and_rejects_boxes_in_the_padding():
    dets = np.array([row([-5, 2, 30, 40]), row([0, 0, 1, 1])], np.float32)
    mapped = map_to_image(dets, np.array([1.0, 1.0]), np.array([0, 2]), np.array([30, 20]), 1.0)
    assert mapped[0, :4].tolist() == [0, 2, 20, 30] and mapped[0, 4] == pytest.approx(0.9)
    assert mapped[1, 4] == -1


def test_detection_on_the_flipped_image_maps_back_to_the_same_box():
    image = np.random.default_rng(0).integers(0, 256, (100, 200, 3), dtype=np.uint8)
    _, border, _ = resize_and_pad(image, 1.0)
    ratios = [32 / 127, 64 / 255]
    x1, y1, x2, y2 = canvas_to_map(BOX, border, ratios)
    flipped = [64 - x2, y1, 64 - x1, y2]
    net = FakeNet([[REJECTED], [row(flipped, cls=1)]])
    top = cornernet_inference(FakeDB(test_flipped=True), net, image)
    np.testing.assert_allclose(top[2][:, :4], [BOX], atol=1e-4)
    assert len(top[1]) == 0

    images = net.inputs[0]
    assert images.shape == (2, 3, 127, 255)
    torch.testing.assert_close(images[1], images[0].flip(-1))
    db = FakeDB()
    pixel = (image[0, 0] / 255 - db.mean) / db.std
    np.testing.assert_allclose(images[0, :, 13, 27].numpy(), pixel, rtol=1e-5)
    np.testing.assert_allclose(images[0, :, 0, 0].numpy(), -db.mean / db.std, rtol=1e-5)


def test_detections_at_each_scale_map_back_by_one_over_the_scale():
    image = np.zeros((100, 200, 3), np.uint8)
    responses = []
    for scale in (0.5, 2.0):
        canvas, border, _ = resize_and_pad(image, scale)
        ratios = [((canvas.shape[0] + 1) // 4) / canvas.shape[0],
                  ((canvas.shape[1] + 1) // 4) / canvas.shape[1]]
        responses.append([[row(canvas_to_map([v * scale for v in BOX], border, ratios),
                               score=0.9 if scale == 2.0 else 0.8)]])
    top = cornernet_inference(FakeDB(test_flipped=False, test_scales=[0.5, 2.0],
                                     nms_algorithm="nms"), FakeNet(*responses), image)
    np.testing.assert_allclose(top[1][:, :4], [BOX], atol=1e-4)  # the two merged by NMS
    assert top[1][0, 4] == pytest.approx(0.9)


def test_per_class_nms_equals_soft_nms_class_by_class():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 100, (300, 2))
    dets = np.concatenate([xy, xy + rng.uniform(5, 40, (300, 2)), rng.uniform(0, 1, (300, 3)),
                           rng.integers(0, 6, (300, 1))], axis=1).astype(np.float32)
    dets[::7, 4] = -1
    dets[1::9, 4] = 0.5  # ties
    kwargs = {"method": "exp_soft_nms", "nms_threshold": 0.5, "weight_exp": 8}
    top = per_class_nms(dets, 8, max_per_image=10_000, **kwargs)
    valid = dets[dets[:, 4] > -1]
    for cls in range(1, 9):
        _, expected = soft_nms(valid[valid[:, 7] == cls - 1, :7], **kwargs)
        np.testing.assert_array_equal(top[cls], expected[:, :5])


def test_per_class_nms_keeps_the_best_max_per_image_over_all_classes():
    dets = np.array([row([10 * k, 0, 10 * k + 5, 5], score=s, cls=k % 2)
                     for k, s in enumerate([0.9, 0.8, 0.7, 0.6, 0.5])] + [REJECTED], np.float32)
    top = per_class_nms(dets, 2, max_per_image=3, method="exp_soft_nms", nms_threshold=0.5)
    assert top[1][:, 4].tolist() == pytest.approx([0.9, 0.7])
    assert top[2][:, 4].tolist() == pytest.approx([0.8])


# ---- Saccade --------------------------------------------------------------------------------

def test_crop_and_resize_places_the_window_and_returns_its_corner():
    image = torch.arange(2 * 40 * 60, dtype=torch.float32).view(2, 40, 60).repeat(2, 1, 1)[:3]
    out = torch.zeros(3, 20, 20)
    offset = saccade.crop_and_resize(image, (5, 30), (20, 20), out)
    assert offset.tolist() == [-5, 20]
    # The window rows -5..-1 lie outside the image: the top 5 output rows stay empty.
    assert (out[:, :5] == 0).all() and torch.equal(out[:, 5:, :], image[:, 0:15, 20:40])


def test_location_nms_merges_close_locations_of_similar_zoom():
    locations = np.array([[100, 100, 1, 0.9], [110, 200, 1, 0.8], [300, 300, 1, 0.95],
                          [100, 100, 2, 0.5], [150, 150, 1, 0.7]], dtype=np.float64)
    kept = saccade.location_nms(locations, thresh=16)
    # 0.8 lies 10 px from 0.9 along y (the nearer axis counts); 0.5 differs in zoom.
    assert kept[:, 3].tolist() == [0.95, 0.9, 0.7, 0.5]


def test_reference_locations_zoom_objects_to_standard_sizes():
    dets = np.array([row([0, 0, 200, 100]), row([10, 10, 50, 30]), row([0, 0, 8, 12]),
                     row([0, 0, 8, 12], score=0.4)], np.float32)
    locs = saccade.reference_locations(dets)
    np.testing.assert_allclose(locs, [[50, 100, 192 / 200, 1], [20, 30, 64 / 40, 1],
                                      [6, 4, 24 / 12, 1]])


class FakeSaccadeNet(FakeNet):
    def test(self, images, no_att=False, **kwargs):
        self.inputs.append(images)
        dets = torch.as_tensor(np.asarray(self.responses.pop(0), dtype=np.float32))
        if no_att:
            return dets
        batch, _, height, width = images.shape
        atts = [torch.zeros(batch, 1, height // r, width // r) for r in (16, 8, 4)]
        atts[1][:, 0, 4, 6] = 0.9  # a peak at (32, 48) px of every crop, zoom x2 at this level
        return dets, atts


def test_saccade_zooms_on_an_attention_peak_and_maps_its_detection_back():
    db = FakeDB(input_size=[64, 64], output_sizes=[[16, 16]], init_sizes=[64], ref_dets=False,
                att_scales=[[1, 2, 4]], att_thresholds=[0.3], att_max_crops=4)
    image = np.zeros((128, 256, 3), np.uint8)
    # Downsized pass: zoom 64 / 256 = 0.25; the peak is at image (32 / .25 - 128 + 64, 48 / .25).
    net = FakeSaccadeNet([[REJECTED]], [[row([4, 4, 8, 12])]])
    top = saccade.cornernet_saccade_inference(db, net, image)
    assert [tuple(x.shape) for x in net.inputs] == [(1, 3, 64, 64), (1, 3, 64, 64)]
    # Zoomed crop: zoom 0.5 around (y, x) = (64, 192); its top-left is (0, 128) in the image.
    np.testing.assert_allclose(top[1][0, :4], [4 * 4 / 0.5 + 128, 4 * 4 / 0.5 + 0,
                                               8 * 4 / 0.5 + 128, 12 * 4 / 0.5 + 0])


@pytest.mark.parametrize("merge", [False, True])
def test_saccade_final_nms_follows_merge_bbox(merge):
    db = FakeDB(input_size=[64, 64], output_sizes=[[16, 16]], init_sizes=[64], ref_dets=False,
                att_scales=[[1, 2, 4]], att_thresholds=[0.3], att_max_crops=4,
                merge_bbox=merge, weight_exp=8)
    image = np.zeros((128, 256, 3), np.uint8)
    overlapping = [row([4, 4, 8, 12], score=0.9), row([4, 4, 8, 11], score=0.8)]
    net = FakeSaccadeNet([[REJECTED]], [overlapping])
    top = saccade.cornernet_saccade_inference(db, net, image)
    y2 = top[1][0, 3]
    # The kept box is the best one; merging pulls its bottom edge towards the other box's.
    if merge:
        assert 11 * 4 / 0.5 < y2 < 12 * 4 / 0.5
    else:
        assert y2 == pytest.approx(12 * 4 / 0.5)
