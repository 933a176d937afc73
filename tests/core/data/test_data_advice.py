"""The check that advises: from a dataset's own image and box sizes, the settings to change
with the crop loss measured today and under them; objects per class and missing label files
told apart from empty ones; images shared between splits warned about (as train.py and test.py
do at their start)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _exports import seeded_yolo
from _train_helpers import REPO

from core.config import load_config
from core.data.advice import advice_lines, settings_advice, suggest
from core.data.check import class_lines, split_report, warn_split_overlap
from core.dbs import datasets


def _tiny(data_yaml: Path, tmp_path: Path, *more: str) -> tuple:
    return load_config("CornerNet_Tiny", overrides=[
        "system.dataset=YOLO", f"db.data_yaml={data_yaml}",
        f"system.cache_dir={tmp_path / 'cache'}", *more])


def test_640_images_with_the_tiny_config_get_a_set_line_that_keeps_the_objects(tmp_path):
    data_yaml = seeded_yolo(tmp_path / "ds", 640, 16, (30, 300))
    system, db_config = _tiny(data_yaml, tmp_path)
    db = datasets["YOLO"](db_config, split="train", sys_config=system)
    advice = settings_advice(db, system.sampling_function, samples=16)
    # crops of 128 * 0.6..1.3 px out of 640 px images: most objects are left out of them
    assert advice["removed_today"] > 0.6
    assert advice["set"] == ("--set db.rand_scales=null db.rand_scale_min=3.0 "
                             "db.rand_scale_max=7.0 db.rand_scale_step=0.5 db.test_scales=[0.2]")
    assert advice["removed_after"] < advice["removed_today"] / 2
    lines = advice_lines(advice)
    assert lines[2] == f"  {advice['set']}"
    # pasted, the line gives those crops (the same loss) and nothing more to change
    system, db_config = _tiny(data_yaml, tmp_path, *advice["set"].split()[1:])
    db = datasets["YOLO"](db_config, split="train", sys_config=system)
    again = settings_advice(db, system.sampling_function, samples=16)
    assert again["changes"] == {}
    assert again["removed_today"] == pytest.approx(advice["removed_after"], abs=1e-12)
    assert advice_lines(again)[1] == ("  the input size, crop scales and test scales fit these "
                                      "sizes")


def test_the_rule_grows_the_input_for_small_objects_and_leaves_fitting_settings_alone():
    configs = {"input_size": [128, 128], "output_sizes": [[32, 32]], "rand_crop": True,
               "rand_scales": np.arange(0.6, 1.4, 0.1), "test_scales": [1]}
    assert suggest(configs, long_side=128, small=20) == {}
    # 12 px * 1000 / 20 px = 600 -> 512 at most; outputs a quarter as in the config
    changes = suggest(configs, long_side=1000, small=20)
    assert changes["input_size"] == [512, 512] and changes["output_sizes"] == [[128, 128]]
    assert changes["rand_scale_min"] == round(0.6 * 1000 / 512, 2)
    assert changes["test_scales"] == [round(512 / 1000, 2)]


def test_missing_label_files_are_told_apart_from_empty_ones(tmp_path):
    data_yaml = seeded_yolo(tmp_path / "ds", 64, 6, (8, 30))
    labels = tmp_path / "ds" / "labels" / "train"
    (labels / "train0.txt").unlink()
    (labels / "train1.txt").unlink()
    (labels / "train2.txt").write_text("")
    system, db_config = _tiny(data_yaml, tmp_path)
    db = datasets["YOLO"](db_config, split="train", sys_config=system)
    report = split_report(db, system.sampling_function, crop_samples=0)[0]
    lines = class_lines(report)
    counted = {name: 0 for name in "abcd"}
    for k in range(3, 6):
        for line in (labels / f"train{k}.txt").read_text().splitlines():
            counted["abcd"[int(line.split()[0])]] += 1
    assert lines[0] == "  objects per class: " + ", ".join(f"{n} {c}" for n, c in counted.items())
    assert lines[1] == ("  images without objects 3: label file missing 2 (e.g. "
                        "images/train/train0.jpg), empty or background 1")
    assert report["objects_per_image"]["min"] == 0
    val = datasets["YOLO"](db_config, split="val", sys_config=system)
    report = split_report(val, system.sampling_function, crop_samples=0)[0]
    assert report["objects_per_image"]["min"] == 1  # every val image has 1-7 boxes
    assert len(class_lines(report)) == 1  # no line about images without objects


def test_images_in_two_splits_are_warned_about(tmp_path):
    data_yaml = seeded_yolo(tmp_path / "ds", 64, 6, (8, 30))
    images = tmp_path / "ds" / "images"
    shutil.copy(images / "train" / "train3.jpg", images / "val" / "copy.jpg")  # same bytes
    system, db_config = _tiny(data_yaml, tmp_path)
    said: list[str] = []
    train = datasets["YOLO"](db_config, split="train", sys_config=system)
    assert warn_split_overlap(system, db_config, train, "train", said.append) == 1
    assert said == [("warning: 1 of the 6 images of split 'train' are also in split 'val' (same "
                    "file or same bytes, e.g. images/train/train3.jpg = images/val/copy.jpg); "
                    "scores on them are inflated: remove them from one split "
                    "(python tools/check_data.py lists them)")]
    val = datasets["YOLO"](db_config, split="val", sys_config=system)
    said.clear()
    assert warn_split_overlap(system, db_config, val, "val", said.append) == 1
    (images / "val" / "copy.jpg").unlink()
    (tmp_path / "ds" / "labels" / "val" / "copy.txt").unlink(missing_ok=True)
    val = datasets["YOLO"](db_config, split="val", sys_config=system)
    assert warn_split_overlap(system, db_config, val, "val", said.append) == 0


@pytest.mark.slow  # a one-iteration training run and a one-image test.py run, in-process
def test_train_py_and_test_py_warn_at_their_start(tmp_path):
    from _inproc import run_script

    data_yaml = seeded_yolo(tmp_path / "ds", 64, 4, (8, 30))
    images = tmp_path / "ds" / "images"
    shutil.copy(images / "train" / "train1.jpg", images / "val" / "copy.jpg")
    config = json.loads((REPO / "configs" / "CornerNet_Tiny.json").read_text())
    config["system"].update(dataset="YOLO", cache_dir=str(tmp_path / "cache"),
                            result_dir=str(tmp_path / "results"), max_iter=1, snapshot=1,
                            batch_size=2, eval_iter=0, val_iter=0)
    config["db"].update(data_yaml=str(data_yaml), input_size=[64, 64], output_sizes=[[16, 16]])
    for key in ("num_train_images", "num_val_images"):
        config["db"].pop(key)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "Tiny64.json").write_text(json.dumps(config))
    trained = run_script(REPO / "train.py", "Tiny64", "--config-dir", tmp_path / "configs",
                         "--workers", "1")
    assert trained.returncode == 0, trained.stderr[-2000:]
    said = ("warning: 1 of the {} images of split '{}' are also in split '{}' (same file or "
            "same bytes, e.g. {}); scores on them are inflated")
    assert said.format(4, "train", "val", "images/train/train1.jpg = images/val/copy.jpg") in (
        trained.stdout + trained.stderr)
    tested = run_script(REPO / "test.py", "Tiny64", "--config-dir", tmp_path / "configs",
                        "--testiter", "1", "--images", "1")
    assert tested.returncode == 0, tested.stderr[-2000:]
    assert said.format(5, "val", "train", "images/val/copy.jpg = images/train/train1.jpg") in (
        tested.stdout + tested.stderr)


def test_one_split_given_for_both_is_warned_about(tmp_path):
    data_yaml = seeded_yolo(tmp_path / "ds", 64, 5, (8, 30))
    system, db_config = _tiny(data_yaml, tmp_path, "system.val_split=train")
    said: list[str] = []
    train = datasets["YOLO"](db_config, split="train", sys_config=system)
    assert warn_split_overlap(system, db_config, train, "train", said.append) == 5
    assert said == [("warning: split 'train' is both the training and the validation split "
                    "(system.train_split, system.val_split): the validation loss and AP are "
                    "scored on the 5 training images and are inflated; give validation images "
                    "of their own")]


@pytest.mark.slow  # a two-iteration training run that evaluates once, in-process
def test_ap_scored_on_the_training_split_says_so_during_training_and_at_the_end(tmp_path):
    from _inproc import run_script

    data_yaml = seeded_yolo(tmp_path / "ds", 64, 4, (8, 30))
    trained = run_script(REPO / "train.py", "CornerNet_Tiny", "--workers", "1", "--set",
                         "system.dataset=YOLO", f"db.data_yaml={data_yaml}",
                         f"system.cache_dir={tmp_path / 'cache'}",
                         f"system.result_dir={tmp_path / 'results'}", "system.val_split=train",
                         "system.max_iter=2", "system.eval_iter=2", "system.val_iter=0",
                         "system.batch_size=2", "system.batch_pictures=false",
                         "db.input_size=[64,64]", "db.output_sizes=[[16,16]]")
    assert trained.returncode == 0, trained.stderr[-2000:]
    out = trained.stdout
    assert "warning: split 'train' is both the training and the validation split" in out
    ap = [line for line in out.splitlines() if line.startswith("iteration 2: AP ")]
    assert len(ap) == 1 and ap[0].endswith(
        " (scored on training images: 4 are in both splits), the best so far: "
        "CornerNet_Tiny_best.pkl"), ap
    done = [line for line in out.splitlines() if line.startswith("done: 2 iterations")]
    assert len(done) == 1 and done[0].endswith(
        " at iteration 2 (scored on training images: 4 are in both splits)"), done
