"""The samplers on real coco128 images: the batch contract, the original's augmentation
semantics (colour folded into one affine), skipping of unreadable images, and reproducibility."""

from __future__ import annotations

import shutil

import cv2
import numpy as np
import pytest
import torch

from core.engine.metrics import DataCounts
from core.sample import data_sampling_func
from core.sample.cornernet import cornernet_view
from core.sample.cornernet_saccade import attention_cells
from core.sample.render import normalize_image, render_targets
from core.sample.utils import BRIGHTNESS, CONTRAST, color_affine, draw_color_jitter
from core.utils.images import ImageReadError
from tests._dense_reference import coco128_db, system_config

SAMPLERS = [("CornerNet", "cornernet"), ("CornerNet_Saccade", "cornernet_saccade")]
EMPTY_IMAGES, GRAYSCALE_IMAGE = (250, 508), 86


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("dbs-cache")


def _index_of(db, image_id: int) -> int:
    return next(ind for ind in range(len(db)) if db.image_id(ind) == image_id)


def _sample(db, sampler: str, inds: list[int], data_aug: bool = True, **system):
    """One batch of exactly the images `inds` (walked from position 1, never wrapping, so no
    shuffle)."""
    db.db_inds = np.array([inds[0], *inds, inds[0]])
    return data_sampling_func[sampler](system_config(len(inds), **system), db, 1,
                                       data_aug=data_aug)[0]


def _jitter_step_by_step(crop: np.ndarray, jitter, db) -> np.ndarray:
    """(3, H, W) float32: the original's in-place float32 colour pipeline on a uint8 crop."""
    image = crop.astype(np.float32) / 255.0
    gray = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    gray_mean = gray.mean()
    for op, factor in zip(jitter.order, jitter.factors):
        image *= factor
        if op == CONTRAST:
            image += (1 - factor) * gray_mean
        elif op != BRIGHTNESS:
            image += (1 - factor) * gray[:, :, None]
    image += db.eig_vec @ (db.eig_val * jitter.lighting)
    image -= db.mean
    image /= db.std
    return image.transpose(2, 0, 1)


@pytest.mark.parametrize("config, sampler", SAMPLERS)
def test_batch_holds_the_contract_shapes_and_valid_records(coco128, cache_dir, config, sampler):
    db = coco128_db(coco128, config, cache_dir)
    batch, k_ind = data_sampling_func[sampler](system_config(8), db, 3)
    (in_h, in_w), (out_h, out_w) = db.configs["input_size"], db.configs["output_sizes"][0]
    m = db.configs["max_objects"]
    assert k_ind == 11
    assert batch["image"].shape == (8, in_h, in_w, 3) and batch["image"].dtype == np.uint8
    assert batch["color"].shape == (8, 3, 4) and batch["color"].dtype == np.float32
    assert batch["boxes"].shape == (8, m, 4) and batch["boxes"].dtype == np.float32
    assert batch["classes"].shape == (8, m) and batch["classes"].dtype == np.int64
    assert batch["num_objects"].shape == (8,) and batch["num_objects"].dtype == np.int64
    assert batch["meta"] == {"skipped": [], "dropped_objects": 0}
    for b, count in enumerate(batch["num_objects"]):
        boxes = batch["boxes"][b, :count]
        assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
        assert (boxes >= 0).all() and (boxes[:, 2] < out_w).all() and (boxes[:, 3] < out_h).all()
        assert ((batch["classes"][b, :count] >= 0) & (batch["classes"][b, :count] < 80)).all()
        assert not batch["boxes"][b, count:].any() and not batch["classes"][b, count:].any()
    if sampler == "cornernet_saccade":
        s = len(db.configs["att_sizes"])
        assert batch["ignore_boxes"].shape == (8, m, 4) and batch["num_ignore"].dtype == np.int64
        assert batch["att_cells"].shape == (8, s, m) and batch["att_cells"].dtype == np.int64


def test_wrapping_to_position_zero_shuffles_the_order(coco128, cache_dir):
    db = coco128_db(coco128, "CornerNet_Squeeze", cache_dir)
    before = db.db_inds.copy()
    _, k_ind = data_sampling_func["cornernet"](system_config(4), db, len(db) - 2)
    assert k_ind == 2
    assert sorted(db.db_inds) == sorted(before) and not np.array_equal(db.db_inds, before)


def test_batch_colour_is_the_folded_jitter_of_the_drawn_parameters(coco128, cache_dir):
    """Replaying db.rng gives the same jitter; folded, it equals the step-by-step float32
    colour jitter, lighting and normalisation applied to the crop the original way."""
    db = coco128_db(coco128, "CornerNet", cache_dir, seed=7)
    for position in (5, len(db) // 3, len(db) * 3 // 5):  # 5, 42, 76 of the full coco128
        replay = np.random.default_rng()
        replay.bit_generator.state = db.rng.bit_generator.state
        batch, _ = data_sampling_func["cornernet"](system_config(1), db, position)
        cornernet_view(replay, db.read_image(db.db_inds[position]).shape[:2], db.configs)
        jitter = draw_color_jitter(replay, lighting=True)
        crop = batch["image"][0]
        means = np.array(cv2.mean(crop)[:3])
        np.testing.assert_array_equal(batch["color"][0], color_affine(jitter, means, db))
        folded = normalize_image(torch.from_numpy(batch["image"]), torch.from_numpy(
            batch["color"]))[0].numpy()
        np.testing.assert_allclose(folded, _jitter_step_by_step(crop, jitter, db), atol=1e-5)


def test_every_order_of_the_jitter_folds_exactly(coco128, cache_dir):
    db = coco128_db(coco128, "CornerNet_Saccade", cache_dir)
    batch = _sample(db, "cornernet_saccade", list(range(6)))
    orders = set()
    for seed in range(30):
        jitter = draw_color_jitter(np.random.default_rng(seed), lighting=True)
        orders.add(jitter.order)
        crop = batch["image"][seed % 6]
        color = color_affine(jitter, np.array(cv2.mean(crop)[:3]), db)
        folded = normalize_image(torch.from_numpy(crop[None]), torch.from_numpy(color[None]))
        np.testing.assert_allclose(folded[0].numpy(), _jitter_step_by_step(crop, jitter, db),
                                   atol=1e-5)
    assert len(orders) == 6


@pytest.mark.parametrize("config, sampler", SAMPLERS)
def test_validation_batches_are_the_plain_resized_images(coco128, cache_dir, config, sampler):
    db = coco128_db(coco128, config, cache_dir)
    count = len(db)
    inds = [0, count // 7, count // 3, count * 3 // 4]  # 0, 18, 42, 96 of the full coco128
    state = db.rng.bit_generator.state
    first = _sample(db, sampler, inds, data_aug=False)
    second = _sample(db, sampler, inds, data_aug=False)
    assert db.rng.bit_generator.state == state
    for key in first:
        if key != "meta":
            assert np.array_equal(first[key], second[key])
    (in_h, in_w), (out_h, out_w) = db.configs["input_size"], db.configs["output_sizes"][0]
    identity = np.concatenate([np.diag(1 / (255 * db.std.astype(np.float64))),
                               (-db.mean / db.std)[:, None]], axis=1)
    for b, ind in enumerate(inds):
        image = db.read_image(ind)
        assert np.array_equal(first["image"][b], cv2.resize(image, (in_w, in_h)))
        np.testing.assert_allclose(first["color"][b], identity, rtol=1e-6)
        height, width = image.shape[:2]
        boxes = db.detections(ind)[:, :4].astype(np.float64) * ([in_w / width, in_h / height] * 2)
        boxes[:, 0::2] = boxes[:, 0::2].clip(0, in_w - 1) * out_w / in_w
        boxes[:, 1::2] = boxes[:, 1::2].clip(0, in_h - 1) * out_h / in_h
        got = np.concatenate([first["boxes"][b, :first["num_objects"][b]],
                              first.get("ignore_boxes", np.zeros((4, 0, 4)))[b][
                                  :first.get("num_ignore", [0] * 4)[b]]])
        np.testing.assert_allclose(np.sort(got, axis=0), np.sort(boxes.astype(np.float32),
                                                                axis=0), rtol=1e-6)


@pytest.mark.parametrize("config, sampler", SAMPLERS)
def test_same_seed_same_batch_other_seed_other_augmentation(coco128, cache_dir, config,
                                                            sampler):
    db = coco128_db(coco128, config, cache_dir)
    batches = []
    for seed in (1, 1, 2):
        db.set_rng(np.random.default_rng(seed))
        batches.append(_sample(db, sampler, list(range(8))))
    for key in batches[0]:
        if key != "meta":
            assert np.array_equal(batches[0][key], batches[1][key]), key
    assert not np.array_equal(batches[0]["image"], batches[2]["image"])
    assert not np.array_equal(batches[0]["color"], batches[2]["color"])


@pytest.mark.parametrize("config, sampler", SAMPLERS)
def test_crowd_regions_never_become_targets(coco128, cache_dir, config, sampler):
    db = coco128_db(coco128, config, cache_dir)
    inds = [ind for ind in range(len(db)) if len(db.crowd_boxes(ind))]  # 9 images in coco128
    assert len(inds) >= 3
    batch = _sample(db, sampler, inds, data_aug=False)
    out_h, out_w = db.configs["output_sizes"][0]
    for b, ind in enumerate(inds):
        height, width = db.read_image(ind).shape[:2]
        crowds = db.crowd_boxes(ind) * ([out_w / width, out_h / height] * 2)
        assert len(crowds) > 0
        count = batch["num_objects"][b] + batch.get("num_ignore", np.zeros(len(inds), int))[b]
        assert count == len(db.detections(ind))
        for boxes in (batch["boxes"][b], batch.get("ignore_boxes", batch["boxes"])[b]):
            distance = np.abs(boxes[:, None, :] - crowds[None, :, :]).max(axis=2)
            assert (distance > 0.5).all()


@pytest.mark.parametrize("config, sampler", SAMPLERS)
def test_empty_and_grayscale_images_sample_fine(coco128, cache_dir, config, sampler):
    db = coco128_db(coco128, config, cache_dir)
    inds = [_index_of(db, image_id) for image_id in (*EMPTY_IMAGES, GRAYSCALE_IMAGE)]
    for data_aug in (True, False):
        batch = _sample(db, sampler, inds, data_aug=data_aug)
        assert batch["num_objects"][:2].tolist() == [0, 0]
        gray = batch["image"][2].astype(int)
        assert (gray[..., 0] == gray[..., 1]).all() and (gray[..., 1] == gray[..., 2]).all()
        assert gray.std() > 10
        targets = render_targets({k: torch.from_numpy(v) for k, v in batch.items()
                                  if k != "meta"}, db.configs, 80)
        assert not targets[0][:2].any() and not targets[2][:2].any()
        assert targets[0][2].max() == 1


def test_objects_beyond_max_objects_are_dropped_and_said_once(coco128, cache_dir):
    # The sampler returns what it has to say (meta); the trainer's DataCounts says it, once.
    db = coco128_db(coco128, "CornerNet_Squeeze", cache_dir, max_objects=4)
    crowded = _index_of(db, 196)
    said: list[str] = []
    counts = DataCounts(said.append)
    for _ in range(2):
        batch = _sample(db, "cornernet", [crowded, 0], data_aug=False)
        assert batch["num_objects"][0] == 4
        excess = [max(len(db.detections(ind)) - 4, 0) for ind in (crowded, 0)]
        assert batch["meta"]["dropped_objects"] == sum(excess) > 0
        counts.add(batch["meta"])
    expected = (f"{sum(excess)} objects beyond db.max_objects were left out of a batch; the "
                f"extras are dropped (said once; the metrics count them as dropped_objects)")
    assert [line for line in said if "max_objects" in line] == [expected]
    assert counts.values()["dropped_objects"] == 2 * sum(excess)


@pytest.fixture
def broken_image_dir(coco128, tmp_path):
    """A copy of the coco128 image folder with one image missing and one truncated."""
    folder = tmp_path / "images"
    shutil.copytree(coco128 / "images", folder)
    (folder / "000000000009.jpg").unlink()
    truncated = folder / "000000000025.jpg"
    truncated.write_bytes(truncated.read_bytes()[:5000])
    return folder


def test_unreadable_images_are_skipped_with_their_paths(coco128, cache_dir, broken_image_dir):
    db = coco128_db(coco128, "CornerNet_Squeeze", cache_dir, image_dir=broken_image_dir)
    missing, truncated = (db.image_ids(i) for i in range(2))
    assert (missing, truncated) == ("000000000009.jpg", "000000000025.jpg")
    db.db_inds = np.array([5, 0, 1, 2, 3])
    batch, k_ind = data_sampling_func["cornernet"](system_config(2), db, 1, data_aug=False)
    assert k_ind == 0
    assert batch["meta"]["skipped"] == [str(broken_image_dir / missing),
                                        str(broken_image_dir / truncated)]
    assert batch["num_objects"].tolist() == [len(db.detections(2)), len(db.detections(3))]
    assert np.array_equal(batch["image"][1], cv2.resize(db.read_image(3), (511, 511)))
    db.db_inds = np.array([5, 0, 1, 2, 3])  # the wrap above shuffled the order
    with pytest.raises(ImageReadError) as raised:
        data_sampling_func["cornernet"](system_config(2, strict_images=True), db, 1)
    assert raised.value.path == str(broken_image_dir / missing)


def test_saccade_splits_objects_by_min_scale(coco128, cache_dir):
    inds = list(range(16))
    small = coco128_db(coco128, "CornerNet_Saccade", cache_dir, min_scale=10000)
    batch = _sample(small, "cornernet_saccade", inds, data_aug=False)
    assert not batch["num_objects"].any()
    assert batch["num_ignore"].tolist() == [len(small.detections(i)) for i in inds]
    every = coco128_db(coco128, "CornerNet_Saccade", cache_dir, min_scale=0)
    batch = _sample(every, "cornernet_saccade", inds, data_aug=False)
    assert not batch["num_ignore"].any()
    assert batch["num_objects"].tolist() == [len(every.detections(i)) for i in inds]


def test_saccade_crops_keep_the_reference_object(coco128, cache_dir):
    db = coco128_db(coco128, "CornerNet_Saccade", cache_dir)
    inds = [i for i in range(len(db)) if len(db.detections(i))]
    batch = _sample(db, "cornernet_saccade", inds)
    assert ((batch["num_objects"] + batch["num_ignore"]) > 0).all()
    assert (batch["att_cells"] >= 0).any(axis=(1, 2)).all()


def test_attention_cells_mark_centres_at_the_scale_of_the_object_size(coco128, cache_dir):
    configs = coco128_db(coco128, "CornerNet_Saccade", cache_dir).configs
    boxes = np.array([[70.0, 10, 170, 110],    # longest 100: scale 0, ratio 16, centre (120, 60)
                      [100.0, 100, 150, 120],  # longest 50: scale 1, ratio 8, centre (125, 110)
                      [8.0, 200, 18, 208]])    # longest 10: scale 2, ratio 4, centre (13, 204)
    cells = attention_cells(boxes, configs, slots=4)
    assert cells.tolist() == [[3 * 16 + 7, -1, -1, -1], [13 * 32 + 15, -1, -1, -1],
                              [51 * 64 + 3, -1, -1, -1]]


@pytest.mark.parametrize("config, sampler", SAMPLERS)
def test_the_original_call_form_builds_what_the_values_form_builds(coco128, cache_dir, config,
                                                                   sampler):
    from core.sample import sampling_function

    batches = []
    for build in (lambda db: data_sampling_func[sampler](system_config(3), db, 5),
                  lambda db: sampling_function(sampler).batch(db, 5, 3)):
        db = coco128_db(coco128, config, cache_dir)
        db.set_rng(np.random.default_rng(4))
        batches.append(build(db))
    (original, k_original), (values, k_values) = batches
    assert k_original == k_values == 8
    assert set(original) == set(values)
    for key in original:
        if key != "meta":
            assert np.array_equal(original[key], values[key]), key


def test_an_unknown_sampling_function_lists_the_valid_ones():
    from core.config import ConfigError
    from core.sample import sampler

    with pytest.raises(ConfigError, match="unknown sampling function 'cornrnet'; valid sampling "
                                          "function names: cornernet, cornernet_saccade"):
        sampler("cornrnet")
