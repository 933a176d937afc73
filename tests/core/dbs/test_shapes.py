"""The generated Shapes dataset: deterministic, reused, tight boxes, every class, safe to share."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import cv2
import numpy as np
import pytest

from core.config import ConfigError, SystemConfig, load_config
from core.dbs import Shapes, datasets
from core.dbs.shapes import SHAPE_CLASSES, ensure_shapes, render_image

SMALL = {"categories": len(SHAPE_CLASSES), "num_train_images": 20, "num_val_images": 8}


def system(root: Path) -> SystemConfig:
    return SystemConfig(root).update_config({"data_dir": "data", "cache_dir": "cache"})


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A project root whose data/shapes holds a small generated set."""
    root = tmp_path_factory.mktemp("shapes_root")
    Shapes(SMALL, split="train", sys_config=system(root))
    return root


def test_generates_coco_files_readable_through_the_registry(generated: Path):
    train = datasets["Shapes"](SMALL, split="train", sys_config=system(generated))
    val = datasets["Shapes"](SMALL, split="val", sys_config=system(generated))
    assert (len(train), len(val)) == (20, 8)
    assert train.annotation_file == generated / "data/shapes/annotations/instances_train.json"
    assert [train.cls2name(c) for c in range(1, 5)] == list(SHAPE_CLASSES)
    image = train.read_image(0)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert 128 <= min(image.shape[:2]) and max(image.shape[:2]) <= 192


def test_same_seed_gives_identical_files(generated: Path, tmp_path: Path):
    ensure_shapes(tmp_path / "shapes", 20, 8)
    first, second = generated / "data" / "shapes", tmp_path / "shapes"
    for split in ("train", "val"):
        name = f"annotations/instances_{split}.json"
        assert (first / name).read_bytes() == (second / name).read_bytes()
    for name in ("images/train/000000.jpg", "images/train/000019.jpg", "images/val/000007.jpg"):
        np.testing.assert_array_equal(cv2.imread(str(first / name)), cv2.imread(str(second / name)))


def test_second_construction_reuses_the_files(generated: Path):
    files = sorted((generated / "data" / "shapes").rglob("*"))
    mtimes = [f.stat().st_mtime_ns for f in files]
    Shapes(SMALL, split="val", sys_config=system(generated))
    assert sorted((generated / "data" / "shapes").rglob("*")) == files
    assert [f.stat().st_mtime_ns for f in files] == mtimes


def test_boxes_are_the_exact_extent_of_the_drawn_pixels(generated: Path):
    db = Shapes(SMALL, split="train", sys_config=system(generated))
    for ind in range(5):
        image, label, classes = render_image("train", ind)
        dets = db.detections(ind)
        assert dets[:, 4].tolist() == classes
        for k, det in enumerate(dets, start=1):
            ys, xs = np.nonzero(label == k)
            assert det[:4].tolist() == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        # The saved JPEG is that drawing: each object's colour is where its label says.
        saved = db.read_image(ind).astype(np.float32)
        for k in range(1, len(classes) + 1):
            drawn = image[label == k].mean(axis=0)
            np.testing.assert_allclose(saved[label == k].mean(axis=0), drawn, atol=3)


def test_objects_are_varied_and_every_class_is_present(generated: Path):
    db = Shapes(SMALL, split="train", sys_config=system(generated))
    dets = [db.detections(i) for i in range(len(db))]
    assert all(1 <= len(d) <= 6 for d in dets)
    boxes = np.concatenate(dets)
    assert set(boxes[:, 4].astype(int).tolist()) == {1, 2, 3, 4}
    sides = np.maximum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1])
    assert sides.min() >= 8 and sides.max() <= 101 and np.ptp(sides) > 40


def test_changed_parameters_regenerate(tmp_path: Path):
    root = tmp_path / "shapes"
    ensure_shapes(root, 4, 2)
    ensure_shapes(root, 4, 3)
    assert len(list((root / "images" / "val").iterdir())) == 3
    assert json.loads((root / "COMPLETE.json").read_text())["num_val_images"] == 3


def test_missing_file_or_marker_regenerates(tmp_path: Path):
    root = tmp_path / "shapes"
    ensure_shapes(root, 4, 2)
    (root / "images" / "train" / "000002.jpg").unlink()
    ensure_shapes(root, 4, 2)
    assert (root / "images" / "train" / "000002.jpg").is_file()
    # An interrupted generation leaves no marker: it is redone, not used.
    (root / "COMPLETE.json").unlink()
    before = (root / "annotations" / "instances_train.json").stat().st_mtime_ns
    ensure_shapes(root, 4, 2)
    assert (root / "COMPLETE.json").is_file()
    assert (root / "annotations" / "instances_train.json").stat().st_mtime_ns != before


def _construct(root: str) -> int:
    return len(Shapes(SMALL, split="train", sys_config=system(Path(root))))


def test_concurrent_processes_generate_once_and_both_read_it(tmp_path: Path):
    # spawn, not fork: a fork of a process with threads (pytest-xdist's worker, cv2's pool) can
    # copy a lock held by another thread and hang (the ranks and the workers start from spawn or
    # a fork server for the same reason)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert pool.map(_construct, [str(tmp_path)] * 2) == [20, 20]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["shapes", "shapes.lock"]


def test_rejects_image_dirs_and_unknown_splits(tmp_path: Path):
    with pytest.raises(ConfigError, match="Shapes dataset writes its own files"):
        Shapes({**SMALL, "image_dirs": {}, "annotation_files": {}}, split="train",
               sys_config=system(tmp_path))
    with pytest.raises(ConfigError, match="unknown Shapes split 'trainval'.*train, val"):
        Shapes(SMALL, split="trainval", sys_config=system(tmp_path))
    assert not (tmp_path / "data").exists()


def test_split_none_knows_the_classes_without_files(tmp_path: Path):
    db = Shapes(SMALL)
    assert db.class_ids == [1, 2, 3, 4] and db.cls2name(3) == "triangle"


def test_tiny_config_matches_the_generator():
    _, db_config = load_config("CornerNet_Tiny")
    assert db_config["categories"] == len(SHAPE_CLASSES)
    assert (db_config["num_train_images"], db_config["num_val_images"]) == (2000, 200)
