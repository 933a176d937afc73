"""Datasets take the values they read (`DatasetSettings`), and the original's `sys_config=` form
builds the same dataset."""

from __future__ import annotations

import dataclasses
import functools
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from _coco_counts import facts
from _train_helpers import write_config

from core.config import DatasetSettings, SystemConfig
from core.dbs import COCO, datasets
from core.engine.options import TrainOptions
from core.engine.preflight import preflight

ALL_JSON = "instances_coco128.json"


def _db_config(coco128: Path) -> dict:
    return {"categories": 80, "image_dirs": {"all": str(coco128 / "images")},
            "annotation_files": {"all": str(coco128 / "annotations" / ALL_JSON)}}


def test_the_settings_are_the_configs_values(tmp_path: Path):
    config = SystemConfig(tmp_path).replace(data_dir="d", cache_dir=str(tmp_path / "c"),
                                            train_split="all", strict_images=True, seed=7)
    settings = config.dataset_settings()
    assert settings == DatasetSettings(data_dir=tmp_path / "d", cache_dir=tmp_path / "c",
                                       train_split="all", strict_images=True, seed=7,
                                       root=tmp_path)
    # The db section's paths resolve as the config resolves its own.
    for path in ["a/b.json", "../x", str(tmp_path / "abs"), "~/y"]:
        assert settings.resolve(path) == config.resolve(path)
    assert settings.resolve("a/b.json") == tmp_path / "a" / "b.json"
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 8  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(settings)) == settings


def test_settings_and_the_sys_config_form_build_the_same_dataset(coco128: Path, tmp_path: Path):
    config = SystemConfig().replace(cache_dir=str(tmp_path / "cache"), seed=11)
    by_values = datasets["COCO"](_db_config(coco128), split="all",
                                 settings=config.dataset_settings())
    original = datasets["COCO"](_db_config(coco128), split="all", sys_config=config)
    count = facts(coco128).images
    assert len(by_values.db_inds) == len(original.db_inds) == count
    for ind in (0, 5, count - 1):
        assert by_values.image_path(ind) == original.image_path(ind)
        np.testing.assert_array_equal(by_values.detections(ind), original.detections(ind))
    # Seeded from the settings' seed and the split, as from the config's.
    assert by_values.rng.integers(1 << 30, size=4).tolist() == \
        original.rng.integers(1 << 30, size=4).tolist()
    other_seed = COCO(_db_config(coco128), split="all",
                      settings=dataclasses.replace(config.dataset_settings(), seed=12))
    assert other_seed.rng.integers(1 << 30) != \
        COCO(_db_config(coco128), split="all", sys_config=config).rng.integers(1 << 30)
    assert list((tmp_path / "cache" / "dbs").iterdir())  # the settings' cache_dir is used


def test_a_prefetch_workers_dataset_maker_carries_values_not_the_config(coco128: Path,
                                                                       tmp_path: Path):
    config = SystemConfig().replace(cache_dir=str(tmp_path / "cache"))
    make_db = functools.partial(COCO, _db_config(coco128), split="all",
                                settings=config.dataset_settings())
    sent = pickle.dumps(make_db)
    assert b"SystemConfig" not in sent
    assert len(pickle.loads(sent)().db_inds) == facts(coco128).images


def test_settings_or_sys_config_not_both_and_a_split_needs_one(coco128: Path):
    config = SystemConfig()
    with pytest.raises(TypeError, match="settings or a sys_config, not both"):
        COCO(_db_config(coco128), split=None, settings=config.dataset_settings(),
             sys_config=config)
    with pytest.raises(ValueError, match=r"COCO\(split='all'\) needs settings"):
        COCO(_db_config(coco128), split="all")
    assert COCO(_db_config(coco128)).rng.integers(1 << 30) == \
        COCO(_db_config(coco128), settings=config.dataset_settings()).rng.integers(1 << 30)


def test_the_preflight_data_check_says_what_the_dataset_finds_to_its_log(coco128: Path,
                                                                        tmp_path: Path):
    # A box reaching past its image: the loader clips it and says so, to the log it is given.
    content = json.loads((coco128 / "annotations" / "instances_coco128_train.json").read_text())
    images = {image["id"]: image for image in content["images"]}
    first = content["annotations"][0]
    first["bbox"] = [images[first["image_id"]]["width"] - 10, 5, 40, 20]
    first["iscrowd"] = 0
    edited = tmp_path / "instances_edited.json"
    edited.write_text(json.dumps(content))
    folder = write_config(tmp_path, coco128, annotations={
        "train": str(edited), "val": str(coco128 / "annotations" / "instances_coco128_val.json")})
    said: list[str] = []
    preflight(TrainOptions(cfg_file="Tiny128", config_dir=folder, workers=1, device="cpu"), 1,
              said.append)
    assert [line for line in said if "clipped to the image" in line and str(edited) in line]
