"""tools/check_data.py on coco128: counts that equal a hand count from the json, injected
problems found, and a batch picture whose heatmap peaks sit at the corners of its boxes."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest
from _coco_counts import TRAIN, VAL, facts
from _train_helpers import losses, write_config

from core.config import load_config
from core.data.check import training_batch
from core.dbs import datasets
from core.sample import sampler
from core.utils.vis import PANEL_GAP, draw_batch
from cornernet.commands import check as check_data
from cornernet.commands import train


@pytest.fixture(scope="module")
def checked(coco128, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("check")
    folder = write_config(tmp, coco128)
    report = check_data.run(check_data.parse_args(["Tiny128", "--config-dir", str(folder),
                                                   "--crop-samples", "16"]))
    return tmp, report


def _hand_count(path):
    content = json.loads(path.read_text())
    names = {c["id"]: c["name"] for c in content["categories"]}
    objects = Counter(names[a["category_id"]] for a in content["annotations"]
                      if not a.get("iscrowd", 0))
    labelled = {a["image_id"] for a in content["annotations"] if not a.get("iscrowd", 0)}
    return content, names, objects, len(content["images"]) - len(labelled)


@pytest.mark.parametrize("split", ["train", "val"])
@pytest.mark.slow  # 2 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_counts_equal_a_hand_count_from_the_json(checked, coco128, split):
    _, report = checked
    content, names, objects, without = _hand_count(
        coco128 / "annotations" / f"instances_coco128_{split}.json")
    found = report["splits"][split]
    assert found["images"] == len(content["images"])
    assert found["objects_per_class"] == {name: objects.get(name, 0) for name in names.values()}
    assert found["classes_missing"] == [n for n in names.values() if not objects.get(n)]
    assert found["images_without_labels"]["count"] == without == {"train": 2, "val": 0}[split]
    assert found["crowd_regions"] == sum(a.get("iscrowd", 0) for a in content["annotations"])
    assert sum(found["box_sizes"].values()) == sum(found["aspect_ratios"].values()) == sum(
        objects.values())
    assert found["unreadable_images"]["count"] == 0 and found["duplicate_images"]["groups"] == 0


def test_report_json_and_pictures_are_written(checked):
    tmp, report = checked
    out = tmp / "results" / "Tiny128" / "check"
    assert json.loads((out / "report.json").read_text()) == json.loads(json.dumps(report))
    picture = cv2.imread(str(out / "train_batch0.jpg"))
    assert picture.shape[0] > 4 * 128 and picture.shape[1] > 3 * 128
    if importlib.util.find_spec("matplotlib"):
        assert cv2.imread(str(out / "labels.png")) is not None
    crops = report["splits"]["train"]["training_crops"]
    assert crops["sampled_images"] == 16 and crops["sampled_objects"] > 0
    assert 0 < crops["removed"] + crops["mostly_cut"] + crops["partly_cut"] <= 1


def test_an_injected_duplicate_and_a_validation_only_class_are_reported(coco128, tmp_path):
    images = tmp_path / "images"
    shutil.copytree(coco128 / "images", images)
    shutil.copyfile(images / "000000000009.jpg", images / "copy_of_9.jpg")
    annotations = {}
    for split in ("train", "val"):
        content = json.loads((coco128 / "annotations" /
                              f"instances_coco128_{split}.json").read_text())
        annotations[split] = content
    train, val = annotations["train"], annotations["val"]
    train["images"].append({"id": 10 ** 6, "file_name": "copy_of_9.jpg", "width": 640,
                            "height": 480})
    present = {a["category_id"] for a in train["annotations"] + val["annotations"]}
    absent = next(c for c in train["categories"] if c["id"] not in present)
    val["annotations"].append({"id": 10 ** 7, "image_id": val["images"][0]["id"],
                               "category_id": absent["id"], "bbox": [10, 10, 50, 40],
                               "area": 2000, "iscrowd": 0})
    val["images"].append({"id": 10 ** 6 + 1, "file_name": "000000000025.jpg", "width": 640,
                          "height": 426})  # a training image in the validation split too
    files = {}
    for split, content in annotations.items():
        files[split] = str(tmp_path / f"{split}.json")
        (tmp_path / f"{split}.json").write_text(json.dumps(content))
    folder = write_config(tmp_path, coco128, images=images, annotations=files)
    report = check_data.run(check_data.parse_args(["Tiny128", "--config-dir", str(folder),
                                                   "--crop-samples", "0"]))
    duplicates = report["splits"]["train"]["duplicate_images"]
    assert (duplicates["groups"], duplicates["examples"]) == (
        1, [["000000000009.jpg", "copy_of_9.jpg"]])
    # the copy has no annotations: the same bytes, labelled differently, named with both files
    nine = [a for a in train["annotations"] if a["image_id"] == 9]
    names = {c["id"]: c["name"] for c in train["categories"]}
    [group] = duplicates["conflicting_labels"]
    assert group["copy_of_9.jpg"] == "no objects"
    assert group["000000000009.jpg"].startswith(f"{len(nine)} object(s): ")
    assert sorted(names[a["category_id"]] for a in nine) == sorted(
        part.split(" [")[0] for part in group["000000000009.jpg"].split(": ", 1)[1].split("], ")
    )
    said = check_data.summary("train", report["splits"]["train"]).splitlines()
    at = said.index("  duplicate images with conflicting labels: 1 group(s) (the same bytes, "
                    "labelled differently: keep one file, or make the labels agree)")
    assert said[at + 1] == (f"    000000000009.jpg ({group['000000000009.jpg']}) = "
                            f"copy_of_9.jpg (no objects)")
    only_val = report["across_splits"]["classes_in_one_split_only"]["val not in train"]
    assert absent["name"] in only_val
    names = {c["id"]: c["name"] for c in val["categories"]}
    own = facts(coco128, VAL).category_ids - facts(coco128, TRAIN).category_ids
    assert own and {names[i] for i in own} <= set(only_val)  # tv, toilet, ... of coco128
    assert report["across_splits"]["images_in_two_splits"] == {
        "count": 1, "examples": [{"train": ["000000000025.jpg"], "val": ["000000000025.jpg"]}]}


def test_batch_heatmap_peaks_sit_at_the_corners_of_the_drawn_boxes(coco128, tmp_path):
    folder = write_config(tmp_path, coco128)
    system_config, db_config = load_config("Tiny128", folder)
    db = datasets["COCO"](db_config, split="train", sys_config=system_config)
    batch, targets = training_batch(sampler(system_config.sampling_function), db, 4)
    assert batch["num_objects"].sum() > 0
    in_h, in_w = db.configs["input_size"]
    stride = in_w // db.configs["output_sizes"][0][1]
    picture = draw_batch(batch, targets, db.configs,
                                    [db.cls2name(c) for c in range(1, 81)])
    peak = cv2.applyColorMap(np.array([[255]], np.uint8), cv2.COLORMAP_INFERNO)[0, 0]
    for b in range(4):
        count = int(batch["num_objects"][b])
        for heat, corner, column in ((targets[0], slice(0, 2), 1), (targets[1], slice(2, 4), 2)):
            corners = {(int(cls), int(y), int(x)) for (x, y), cls in zip(
                np.trunc(batch["boxes"][b, :count, corner]), batch["classes"][b, :count])}
            peaks = {tuple(int(v) for v in p) for p in np.argwhere(heat[b].numpy() == 1.0)}
            assert peaks == corners
            # in the picture: the cell of each corner is drawn in the colour of 1.0 (the offset
            # arrow covers a few of its pixels)
            top, left = b * (in_h + PANEL_GAP), column * (in_w + PANEL_GAP)
            for _, y, x in corners:
                cell = picture[top + y * stride:top + (y + 1) * stride,
                               left + x * stride:left + (x + 1) * stride]
                assert (cell == peak).all(axis=-1).mean() >= 0.5


@pytest.mark.slow  # two two-iteration training runs in-process: about 20 s
def test_train_py_draws_the_batch_picture_without_changing_the_run(coco128, tmp_path, capsys):
    printed = {}
    for on in (True, False):
        folder = write_config(tmp_path / str(on), coco128, max_iter=2, val_iter=0,
                              batch_pictures=on)
        assert train.main(["Tiny128", "--config-dir", str(folder), "--workers", "1",
                           "--device", "cpu"]) == 0
        printed[on] = losses(capsys.readouterr().out)
        picture = tmp_path / str(on) / "cache" / "nnet" / "Tiny128" / "train_batch0.jpg"
        assert picture.is_file() == on
    assert printed[True] == printed[False] and sorted(printed[True]) == [1, 2]
    drawn = cv2.imread(str(tmp_path / "True" / "cache" / "nnet" / "Tiny128" / "train_batch0.jpg"))
    assert drawn.shape == (4 * 128 + 3 * PANEL_GAP, 3 * 128 + 2 * PANEL_GAP, 3)


def test_the_command_line_s_defaults_are_the_options_declared_ones():
    parsed = check_data.parse_args(["Tiny128"])
    assert parsed == check_data.CheckOptions(cfg_file="Tiny128")
    assert (parsed.splits, parsed.out, parsed.batch_images, parsed.crop_samples, parsed.data,
            parsed.name, parsed.no_fit, parsed.overrides) == (None, None, 4, 64, None, None,
                                                              False, ())
    assert check_data.parse_args(["Tiny128", "--splits", "train", "--data", "d.yaml",
                                  "--no-fit", "--set", "max_iter=2"]) == check_data.CheckOptions(
        cfg_file="Tiny128", splits=("train",), data=Path("d.yaml"), no_fit=True,
        overrides={"max_iter": 2})


@pytest.mark.parametrize("argv", [["--name", "run"], ["--no-fit"]])
def test_name_or_no_fit_without_data_is_a_usage_error(argv, capsys):
    assert check_data.main(["Tiny128", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: cornernet check")
    assert "error: --name and --no-fit go with --data PATH" in err
