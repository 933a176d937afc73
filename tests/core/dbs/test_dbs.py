"""The COCO dataset on the real coco128 images: classes, boxes, crowds, cache, errors, images."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from _coco_counts import TRAIN, VAL, facts

from core.config import ConfigError, SystemConfig
from core.dbs import COCO, DETECTION, VOC, YOLO, DatasetError, Shapes, datasets
from core.dbs import coco as coco_module
from core.utils.images import ImageReadError

ALL_JSON = "instances_coco128.json"



@pytest.fixture
def said() -> list[str]:
    """The lines a dataset warns with (its `log`)."""
    return []

def db_config(images: Path, annotations: Path, **extra) -> dict:
    """A db section reading `annotations` (a json file) under the split key "all"."""
    return {"categories": 80, "image_dirs": {"all": str(images)},
            "annotation_files": {"all": str(annotations)}, **extra}


@pytest.fixture
def sys_config(tmp_path: Path) -> SystemConfig:
    return SystemConfig().update_config({"cache_dir": str(tmp_path / "cache")})


@pytest.fixture
def raw(coco128: Path) -> dict:
    return json.loads((coco128 / "annotations" / ALL_JSON).read_text())


@pytest.fixture
def db(coco128: Path, sys_config: SystemConfig) -> COCO:
    return COCO(db_config(coco128 / "images", coco128 / "annotations" / ALL_JSON), split="all",
                sys_config=sys_config)


def copy_json(coco128: Path, tmp_path: Path, edit=None) -> Path:
    """A copy of the coco128 json in tmp_path, changed by `edit(content)` first."""
    content = json.loads((coco128 / "annotations" / ALL_JSON).read_text())
    if edit is not None:
        edit(content)
    path = tmp_path / "instances_edited.json"
    path.write_text(json.dumps(content))
    return path


def ind_of(db: DETECTION, image_id: int) -> int:
    return [db.image_id(i) for i in range(len(db))].index(image_id)


def test_registry_names_every_dataset():
    assert datasets == {"COCO": COCO, "Shapes": Shapes, "VOC": VOC, "YOLO": YOLO}


def test_loads_every_image_and_80_categories(db: COCO, raw: dict, coco128: Path):
    held = facts(coco128)  # 128 images, 939 boxes, 10 crowds in the full set
    assert len(db) == held.images and db.num_classes == 80
    assert db.class_ids == sorted(c["id"] for c in raw["categories"])
    assert db.db_inds.dtype == np.int64 and db.db_inds.tolist() == list(range(held.images))
    assert sum(len(db.detections(i)) for i in range(len(db))) == held.annotations - held.crowds
    assert db.has_annotations and db.annotation_file.name == ALL_JSON


def test_class_mapping_round_trips_all_80_ids(db: COCO, raw: dict):
    names = {c["id"]: c["name"] for c in raw["categories"]}
    for cls in range(1, 81):
        assert db.coco2cls(db.cls2coco(cls)) == cls
        assert db.cls2name(cls) == names[db.cls2coco(cls)]
    assert [db.coco2cls(cat_id) for cat_id in sorted(names)] == list(range(1, 81))
    assert db.cls2coco(1) == 1 and db.cls2coco(80) == 90 and db.coco2cls(13) == 12
    with pytest.raises(KeyError, match="category id 12"):
        db.coco2cls(12)


def test_detections_are_the_non_crowd_boxes_and_crowds_are_kept_apart(db: COCO, raw: dict):
    by_image: dict[int, dict[int, list]] = {}
    for ann in raw["annotations"]:
        x, y, w, h = ann["bbox"]
        box = [x, y, x + w, y + h]
        if not ann["iscrowd"]:
            box.append(db.coco2cls(ann["category_id"]))
        by_image.setdefault(ann["image_id"], {0: [], 1: []})[ann["iscrowd"]].append(box)
    for ind in range(len(db)):
        expected = by_image.get(db.image_id(ind), {0: [], 1: []})
        dets, crowds = db.detections(ind), db.crowd_boxes(ind)
        assert dets.dtype == np.float32 and dets.shape == (len(expected[0]), 5)
        assert crowds.dtype == np.float32 and crowds.shape == (len(expected[1]), 4)
        np.testing.assert_allclose(dets, np.array(expected[0], np.float32).reshape(-1, 5))
        np.testing.assert_allclose(crowds, np.array(expected[1], np.float32).reshape(-1, 4))
    assert sum(len(db.crowd_boxes(i)) for i in range(len(db))) == \
        sum(a["iscrowd"] for a in raw["annotations"]) > 0


def test_images_without_annotations_give_empty_detections(db: COCO):
    for image_id in (250, 508):
        dets = db.detections(ind_of(db, image_id))
        assert dets.shape == (0, 5) and dets.dtype == np.float32


def test_detections_returns_a_copy(db: COCO):
    db.detections(0)[:] = -1
    assert (db.detections(0) >= 0).all()


def test_grayscale_jpeg_reads_as_three_channel_bgr(db: COCO):
    ind = [db.image_ids(i) for i in range(len(db))].index("000000000086.jpg")
    image = db.read_image(ind)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert (image[..., 0] == image[..., 1]).all() and (image[..., 1] == image[..., 2]).all()
    assert db.image_path(ind).endswith("images/000000000086.jpg")


def test_split_files_select_the_subset(coco128: Path, sys_config: SystemConfig):
    ann = coco128 / "annotations"
    config = {"categories": 80,
              "image_dirs": {"train": str(coco128 / "images"), "val": str(coco128 / "images")},
              "annotation_files": {"train": str(ann / "instances_coco128_train.json"),
                                   "val": str(ann / "instances_coco128_val.json")}}
    train = datasets["COCO"](config, split="train", sys_config=sys_config)
    val = datasets["COCO"](config, split="val", sys_config=sys_config)
    held = facts(coco128, TRAIN), facts(coco128, VAL)  # 96 and 32 in the full set
    assert (len(train), len(val)) == (held[0].images, held[1].images)
    assert [train.image_id(i) for i in range(len(train))] == list(held[0].image_ids)
    assert max(held[0].image_ids) < min(held[1].image_ids)
    with pytest.raises(ConfigError, match="unknown split 'test'.*train, val"):
        COCO(config, split="test", sys_config=sys_config)


def test_boxes_outside_are_clipped_and_empty_ones_dropped_each_said_once(
        coco128: Path, tmp_path: Path, sys_config: SystemConfig, said):
    def edit(content):
        images = {image["id"]: image for image in content["images"]}
        for ann, bbox in zip(content["annotations"][:4], ([-5, -5, 20, 20], [600, 10, 80, 30],
                                                          [10, 10, 0, 5], [10, 10, 4, -1])):
            width = images[ann["image_id"]]["width"]
            ann["bbox"] = [width - 40 if bbox[0] == 600 else bbox[0]] + bbox[1:]
            ann["iscrowd"] = 0
    path = copy_json(coco128, tmp_path, edit)
    config = db_config(coco128 / "images", path)
    for _ in range(2):  # parsed, then from the cache: each load says it once
        said.clear()
        db = COCO(config, split="all", sys_config=sys_config, log=said.append)
        clipped = [m for m in said if "clipped to the image" in m]
        dropped = [m for m in said if "dropped (zero" in m]
        assert len(clipped) == 1 and len(dropped) == 1
        assert "2 box(es)" in clipped[0] and "2 box(es)" in dropped[0]
        assert str(path) in dropped[0] and "annotation id" in dropped[0]
    held = facts(coco128)
    assert sum(len(db.detections(i)) for i in range(len(db))) == \
        held.annotations - held.crowds - 2
    all_dets = np.concatenate([db.detections(i) for i in range(len(db))])
    assert all_dets[:, :2].min() >= 0


def test_image_sizes_the_images_do_not_have_are_said_with_what_to_fix(
        coco128: Path, tmp_path: Path, sys_config: SystemConfig, said):
    def halve(content):  # annotations written for copies at half the size
        for image in content["images"]:
            image["width"], image["height"] = image["width"] // 2, image["height"] // 2
    path = copy_json(coco128, tmp_path, halve)
    for _ in range(2):  # parsed, then from the cache
        said.clear()
        COCO(db_config(coco128 / "images", path), split="all", sys_config=sys_config,
             log=said.append)
        sizes = [m for m in said if "but the file declares" in m]
        assert len(sizes) == 3, said
        assert all(str(path) in message and "fix the image sizes" in message
                   for message in sizes)
    first = sizes[0].split("image ")[1].split(" ")[0]
    real = cv2.imread(str(coco128 / "images" / first)).shape
    assert f"is {real[1]}x{real[0]} but the file declares {real[1] // 2}x{real[0] // 2}" in \
        sizes[0]


def test_cache_is_reused_and_written_under_cache_dir(db: COCO, coco128: Path,
                                                     sys_config: SystemConfig, monkeypatch):
    assert list((sys_config.cache_dir / "dbs").glob("instances_coco128-*.npz"))

    def fail(*args):
        raise AssertionError("parsed again despite an up-to-date cache")
    monkeypatch.setattr(coco_module, "parse_instances", fail)
    again = COCO(db.configs, split="all", sys_config=sys_config)
    assert len(again) == facts(coco128).images
    np.testing.assert_array_equal(again.detections(5), db.detections(5))


def test_changed_json_is_not_served_from_the_stale_cache(coco128: Path, tmp_path: Path,
                                                         sys_config: SystemConfig):
    path = copy_json(coco128, tmp_path)
    config = db_config(coco128 / "images", path)
    before = COCO(config, split="all", sys_config=sys_config)
    ind = ind_of(before, 9)
    assert len(before.detections(ind)) > 0
    content = json.loads(path.read_text())
    content["annotations"] = [a for a in content["annotations"] if a["image_id"] != 9]
    path.write_text(json.dumps(content))
    after = COCO(config, split="all", sys_config=sys_config)
    assert after.detections(ind).shape == (0, 5)


def test_missing_json_names_the_file(coco128: Path, tmp_path: Path, sys_config: SystemConfig):
    missing = tmp_path / "nowhere.json"
    with pytest.raises(FileNotFoundError, match="annotation file not found: .*nowhere.json"):
        COCO(db_config(coco128 / "images", missing), split="all", sys_config=sys_config)


def test_missing_image_folder_names_it(coco128: Path, tmp_path: Path, sys_config: SystemConfig):
    with pytest.raises(FileNotFoundError, match="image folder not found: .*no_images"):
        COCO(db_config(tmp_path / "no_images", coco128 / "annotations" / ALL_JSON), split="all",
             sys_config=sys_config)


def test_malformed_json_names_file_line_and_column(coco128: Path, tmp_path: Path,
                                                   sys_config: SystemConfig):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "images": [],\n  "categories": [,]\n}\n')
    with pytest.raises(DatasetError, match=r"bad.json: malformed JSON at line 3 column 18"):
        COCO(db_config(coco128 / "images", path), split="all", sys_config=sys_config)


def test_missing_key_names_the_annotation(coco128: Path, tmp_path: Path,
                                          sys_config: SystemConfig):
    def edit(content):
        del content["annotations"][3]["bbox"]
    path = copy_json(coco128, tmp_path, edit)
    ann_id = json.loads(path.read_text())["annotations"][3]["id"]
    with pytest.raises(DatasetError, match=f"annotation id {ann_id}: missing 'bbox'"):
        COCO(db_config(coco128 / "images", path), split="all", sys_config=sys_config)


def test_unknown_category_id_names_the_annotation(coco128: Path, tmp_path: Path,
                                                  sys_config: SystemConfig):
    def edit(content):
        content["annotations"][0]["category_id"] = 12
    path = copy_json(coco128, tmp_path, edit)
    with pytest.raises(DatasetError, match="annotation id .*: unknown category id 12"):
        COCO(db_config(coco128 / "images", path), split="all", sys_config=sys_config)


def test_categories_mismatch_names_both_numbers_and_the_file(coco128: Path,
                                                             sys_config: SystemConfig):
    config = db_config(coco128 / "images", coco128 / "annotations" / ALL_JSON, categories=4)
    with pytest.raises(DatasetError, match=f"db.categories is 4 but .*{ALL_JSON} has 80"):
        COCO(config, split="all", sys_config=sys_config)


def test_json_without_annotations_is_a_test_set(coco128: Path, tmp_path: Path,
                                                sys_config: SystemConfig):
    path = copy_json(coco128, tmp_path, lambda content: content.pop("annotations"))
    db = COCO(db_config(coco128 / "images", path), split="all", sys_config=sys_config)
    assert not db.has_annotations and len(db) == facts(coco128).images
    assert all(db.detections(i).shape == (0, 5) for i in range(len(db)))


def test_truncated_jpeg_raises_naming_the_path(db: COCO, tmp_path: Path):
    source = Path(db.image_path(0))
    data = source.read_bytes()
    (tmp_path / source.name).write_bytes(data[: len(data) // 2])
    db._image_dir = tmp_path  # read the same entry from the damaged copy
    with pytest.raises(ImageReadError, match="truncated JPEG") as err:
        db.read_image(0)
    assert err.value.path == str(tmp_path / source.name) and isinstance(err.value, OSError)


def test_missing_image_file_raises_naming_the_path(db: COCO, tmp_path: Path):
    db._image_dir = tmp_path
    with pytest.raises(ImageReadError, match=f"{tmp_path}.*file not found"):
        db.read_image(1)


def test_image_read_error_survives_pickling():
    err = pickle.loads(pickle.dumps(ImageReadError("/x/y.jpg", "file not found")))
    assert (err.path, err.reason, str(err)) == ("/x/y.jpg", "file not found",
                                                "cannot read image /x/y.jpg: file not found")


def test_shuffle_uses_the_dataset_generator(db: COCO, coco128: Path, sys_config: SystemConfig):
    other = COCO(db.configs, split="all", sys_config=sys_config)
    db.shuffle_inds()
    other.shuffle_inds()
    count = facts(coco128).images
    assert db.db_inds.tolist() == other.db_inds.tolist() != list(range(count))
    assert sorted(db.db_inds.tolist()) == list(range(count))
    db.set_rng(np.random.default_rng(7))
    expected = db.db_inds[np.random.default_rng(7).permutation(count)]
    db.shuffle_inds()
    np.testing.assert_array_equal(db.db_inds, expected)


def test_db_inds_can_be_replaced_within_range(db: COCO):
    db.db_inds = [3, 1]
    assert db.db_inds.dtype == np.int64 and db.db_inds.tolist() == [3, 1]
    with pytest.raises(IndexError, match=f"0..{len(db) - 1}"):
        db.db_inds = [len(db)]


def test_split_none_touches_no_files(tmp_path: Path):
    config = db_config(tmp_path / "absent", tmp_path / "absent.json", categories=3)
    db = COCO(config, split=None)
    assert db.configs["categories"] == 3 and db.configs["top_k"] == 20 and len(db) == 0
    assert db.mean.dtype == np.float32 and db.mean.shape == (3,) and db.eig_vec.shape == (3, 3)
    np.testing.assert_allclose(db.mean, [0.40789654, 0.44719302, 0.47026115])
    assert db.annotation_file is None
    with pytest.raises(ConfigError, match="unknown key db.categries"):
        COCO({"categries": 3})


def test_default_layout_needs_a_known_split(sys_config: SystemConfig):
    with pytest.raises(ConfigError, match="minival, testdev, trainval"):
        COCO({}, split="val2017", sys_config=sys_config)


def test_default_layout_finds_data_dir_coco(coco128: Path, tmp_path: Path):
    coco_dir = tmp_path / "data" / "coco"
    (coco_dir / "images").mkdir(parents=True)
    (coco_dir / "annotations").mkdir()
    (coco_dir / "images" / "minival2014").symlink_to(coco128 / "images")
    shutil.copy(coco128 / "annotations" / "instances_coco128_val.json",
                coco_dir / "annotations" / "instances_minival2014.json")
    config = SystemConfig(tmp_path).update_config({"cache_dir": "cache"})
    db = COCO({}, split="minival", sys_config=config)
    assert len(db) == facts(coco128, VAL).images and (tmp_path / "cache" / "dbs").is_dir()


# ---- a cache that heals itself ----------------------------------------------------------------
def cache_file(sys_config: SystemConfig) -> Path:
    (found,) = (sys_config.cache_dir / "dbs").glob("instances_coco128-*.npz")
    return found


def damage_and_reload(coco128: Path, sys_config: SystemConfig, said, damage) -> COCO:
    """Load once (writing the cache), `damage(cache file)`, load again; the second load's
    warnings are left in `said`."""
    config = db_config(coco128 / "images", coco128 / "annotations" / ALL_JSON)
    first = COCO(config, split="all", sys_config=sys_config)
    damage(cache_file(sys_config))
    said.clear()
    again = COCO(config, split="all", sys_config=sys_config, log=said.append)
    assert len(again) == len(first) == facts(coco128).images
    np.testing.assert_array_equal(again.detections(5), first.detections(5))
    return again


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def other_version(path: Path) -> None:
    with open(path, "wb") as file:
        np.savez(file, image_ids=np.arange(3), meta=np.array("{}"))


def wrong_dtype(path: Path) -> None:
    with np.load(path) as arrays:
        content = {key: arrays[key] for key in arrays.files}
    content["boxes"] = content["boxes"].astype(np.float64)
    with open(path, "wb") as file:
        np.savez(file, **content)


@pytest.mark.parametrize("damage", [
    truncate,
    lambda path: path.write_bytes(pickle.dumps({"images": []})),
    lambda path: path.write_text("not a zip file"),
    other_version,
    wrong_dtype,
], ids=["truncated", "pickle", "text", "other_keys", "other_dtype"])
def test_unreadable_cache_is_named_once_ignored_and_rebuilt(coco128: Path,
                                                           sys_config: SystemConfig, said,
                                                           damage):
    damage_and_reload(coco128, sys_config, said, damage)
    path = cache_file(sys_config)
    warnings = list(said)
    assert len(warnings) == 1 and f"ignoring unreadable dataset cache {path}" in warnings[0]
    said.clear()
    COCO(db_config(coco128 / "images", coco128 / "annotations" / ALL_JSON), split="all",
         sys_config=sys_config, log=said.append)  # the rebuilt cache reads without a word
    assert not said


def test_cache_files_get_the_permissions_of_other_outputs(coco128: Path, tmp_path: Path):
    sys_config = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache")})
    previous = os.umask(0o022)
    try:
        COCO(db_config(coco128 / "images", coco128 / "annotations" / ALL_JSON), split="all",
             sys_config=sys_config)
    finally:
        os.umask(previous)
    assert cache_file(sys_config).stat().st_mode & 0o777 == 0o644


def test_a_dead_writers_cache_temp_file_is_removed_on_rebuild(coco128: Path,
                                                              sys_config: SystemConfig):
    folder = sys_config.cache_dir / "dbs"
    folder.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    stale = folder / f".instances_coco128-0123.npz.{proc.pid}-1.tmp"
    stale.write_bytes(b"half")
    COCO(db_config(coco128 / "images", coco128 / "annotations" / ALL_JSON), split="all",
         sys_config=sys_config)
    assert not stale.exists()
    assert [p.suffix for p in folder.iterdir()] == [".npz"]


def test_an_unwritable_cache_is_named_and_the_run_goes_on(coco128: Path, tmp_path: Path,
                                                          said):
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    sys_config = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache")})
    db = COCO(db_config(coco128 / "images", coco128 / "annotations" / ALL_JSON),
              split="all", sys_config=sys_config, log=said.append)
    assert len(db) == facts(coco128).images
    (warning,) = said
    assert warning.startswith(f"cannot write the dataset cache (cannot write "
                              f"{tmp_path / 'cache' / 'dbs'}")


# ---- refused at load --------------------------------------------------------------------------
def load_edited(coco128: Path, tmp_path: Path, edit, split: str = "all",
                train_split: str = "training") -> COCO:
    path = copy_json(coco128, tmp_path, edit)
    sys_config = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache"),
                                               "train_split": train_split})
    return COCO(db_config(coco128 / "images", path), split=split, sys_config=sys_config)


def test_training_split_without_annotations_is_refused_naming_the_file(coco128: Path,
                                                                       tmp_path: Path):
    with pytest.raises(DatasetError) as caught:
        load_edited(coco128, tmp_path, lambda content: content.pop("annotations"),
                    train_split="all")
    assert str(caught.value) == (f"{tmp_path / 'instances_edited.json'}: no 'annotations' list, "
                                 f"so the training split 'all' has no objects to learn; use an "
                                 f"instances file with annotations for system.train_split")


def test_empty_training_split_is_refused(coco128: Path, tmp_path: Path):
    def empty(content):
        content["images"], content["annotations"] = [], []
    with pytest.raises(DatasetError, match="no images, so the training split 'all' is empty"):
        load_edited(coco128, tmp_path, empty, train_split="all")


@pytest.mark.parametrize("key, value, expected", [
    ("width", float("nan"), "width must be a positive number, got nan"),
    ("height", "480", "height must be a positive number, got '480'"),
    ("width", 0, "width must be a positive number, got 0"),
    ("file_name", 12, "file_name must be a non-empty string, got 12"),
])
def test_bad_image_entry_is_named_by_its_id(coco128: Path, tmp_path: Path, key, value,
                                            expected):
    def edit(content):
        content["images"][2][key] = value
    image_id = json.loads((coco128 / "annotations" / ALL_JSON).read_text())["images"][2]["id"]
    with pytest.raises(DatasetError, match=f"image id {image_id}: {expected}"):
        load_edited(coco128, tmp_path, edit)


def test_image_id_of_another_type_is_named_by_its_position(coco128: Path, tmp_path: Path):
    def edit(content):
        content["images"][4]["id"] = "5"
    with pytest.raises(DatasetError, match="image entry #4: id must be an integer, got '5'"):
        load_edited(coco128, tmp_path, edit)


@pytest.mark.parametrize("key, value, expected", [
    ("bbox", [10, 10, float("inf"), 5], r"bbox .* four finite numbers, got \[10, 10, inf, 5\]"),
    ("bbox", [10, 10, True, 5], r"bbox must be \[x, y, w, h\]"),
    ("category_id", "1", "category_id must be an integer, got '1'"),
    ("image_id", 3.5, "image_id must be an integer, got 3.5"),
    ("iscrowd", "yes", "iscrowd must be 0 or 1, got 'yes'"),
])
def test_bad_annotation_entry_is_named_by_its_id(coco128: Path, tmp_path: Path, key, value,
                                                 expected):
    def edit(content):
        content["annotations"][6][key] = value
    ann_id = json.loads((coco128 / "annotations" / ALL_JSON).read_text())["annotations"][6]["id"]
    with pytest.raises(DatasetError, match=f"annotation id {ann_id}: {expected}"):
        load_edited(coco128, tmp_path, edit)


def test_deeply_nested_annotation_json_is_one_line(coco128: Path, tmp_path: Path,
                                                   sys_config: SystemConfig):
    path = tmp_path / "deep.json"
    depth = 100_000
    path.write_text('{"images": [], "categories": [], "info": ' + "[" * depth + "]" * depth
                    + "}")
    with pytest.raises(DatasetError) as caught:
        COCO(db_config(coco128 / "images", path), split="all", sys_config=sys_config)
    assert str(caught.value) == (f"{path}: JSON nested too deep to read; a COCO instances file "
                                 f"nests objects a few levels deep")
