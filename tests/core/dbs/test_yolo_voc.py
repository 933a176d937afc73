"""YOLO and VOC datasets give what the same images and boxes give as COCO json: the same boxes,
the same training losses and the same metrics; bad label lines are named by file and line."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil

import numpy as np
import pytest
from _coco_counts import TRAIN, VAL, facts
from _tiny_coco import person_snapshot
from _train_helpers import losses, write_config
from _yolo_voc import noisy_truth, write_coco, write_voc, write_yolo

from core.config import ConfigError, SystemConfig
from core.dbs import DatasetError, datasets
from core.dbs.yolo import read_data_yaml
from core.inference.coco_eval import score
from core.inference.error_analysis import breakdown, read_run


def _script(name: str):
    """The command module of a script of the checkout (train, test, tools/convert)."""
    return importlib.import_module(f"cornernet.commands.{name.removeprefix('tools/')}")


@pytest.fixture(scope="module")
def three(coco128, tmp_path_factory):
    """coco128's train and val splits as COCO json (box areas; with and without crowds), as a
    YOLO folder and as a VOC folder; the VOC class names."""
    out = tmp_path_factory.mktemp("three")
    annotations = coco128 / "annotations"
    splits = {split: annotations / f"instances_coco128_{split}.json" for split in ("train", "val")}
    coco = {(split, crowds): write_coco(path, out / f"coco_{split}_{crowds}.json", crowds)
            for split, path in splits.items() for crowds in (False, True)}
    data_yaml = write_yolo(splits, coco128 / "images", out / "yolo")
    names = write_voc(splits, coco128 / "images", out / "voc")
    return {"out": out, "coco": coco, "data_yaml": data_yaml, "voc": out / "voc", "names": names,
            "images": coco128 / "images"}


def _db(kind: str, three: dict, split: str, tmp_path, **system) -> object:
    system_config = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache"),
                                                  **system})
    if kind == "YOLO":
        db = {"data_yaml": str(three["data_yaml"])}
    elif kind == "VOC":
        db = {"voc_root": str(three["voc"]), "names": three["names"]}
    else:
        crowds = kind == "COCO+crowds"
        db = {"image_dirs": {split: str(three["images"])},
              "annotation_files": {split: str(three["coco"][split, crowds])}}
    return datasets[kind.split("+")[0]](db, split=split, sys_config=system_config)


@pytest.mark.parametrize("split", ["train", "val"])
def test_yolo_and_voc_hold_the_boxes_of_the_coco_json(three, tmp_path, split, coco128):
    yolo, coco = _db("YOLO", three, split, tmp_path), _db("COCO", three, split, tmp_path)
    voc, crowded = _db("VOC", three, split, tmp_path), _db("COCO+crowds", three, split, tmp_path)
    held = facts(coco128, {"train": TRAIN, "val": VAL}[split])  # 96 and 32 in coco128
    assert len(yolo) == len(voc) == len(coco) == held.images
    for ind in range(len(coco)):
        assert yolo.image_ids(ind).endswith(coco.image_ids(ind))
        assert np.array_equal(yolo.detections(ind), coco.detections(ind))
        assert np.array_equal(voc.detections(ind), crowded.detections(ind))
        # VOC's difficult objects are COCO's crowd regions: no targets, ignored in evaluation
        assert np.array_equal(voc.crowd_boxes(ind), crowded.crowd_boxes(ind))
    assert sum(len(voc.crowd_boxes(i)) for i in range(len(voc))) == held.crowds > 0
    assert [yolo.cls2name(c) for c in range(1, 81)] == [coco.cls2name(c) for c in range(1, 81)]
    assert [voc.cls2name(c) for c in range(1, 81)] == [coco.cls2name(c) for c in range(1, 81)]


def test_a_second_load_comes_from_the_dataset_cache(three, tmp_path):
    first = _db("YOLO", three, "val", tmp_path)
    cached = sorted(p.name for p in (tmp_path / "cache" / "dbs").iterdir())
    again = _db("YOLO", three, "val", tmp_path)
    assert sorted(p.name for p in (tmp_path / "cache" / "dbs").iterdir()) == cached
    assert again.annotation_file == first.annotation_file
    assert any(name.endswith(".npz") for name in cached)  # COCO's parse cache


def _configs(three: dict, tmp_path, coco128) -> dict:
    """Tiny configs training on the train split and evaluating on val, one per format."""
    folders = {}
    for kind in ("COCO", "YOLO", "VOC", "COCO+crowds"):
        crowds = kind == "COCO+crowds"
        db = {"max_objects": 64, "image_dirs": None, "annotation_files": None}
        if kind == "YOLO":
            db["data_yaml"] = str(three["data_yaml"])
        elif kind == "VOC":
            db.update(voc_root=str(three["voc"]), names=three["names"])
        else:
            db.update(image_dirs={s: str(three["images"]) for s in ("train", "val")},
                      annotation_files={s: str(three["coco"][s, crowds])
                                        for s in ("train", "val")})
        name = kind.replace("+", "_")
        tmp = tmp_path / name
        folder = write_config(tmp, coco128, name=name, db=db, dataset=kind.split("+")[0],
                              max_iter=2, val_iter=0, snapshot=2, batch_size=2)
        config = json.loads((folder / f"{name}.json").read_text())
        config["db"] = {k: v for k, v in config["db"].items() if v is not None}
        config["db"].update({"test_scales": [0.25], "top_k": 20, "num_dets": 100,
                             "ae_threshold": 100})
        (folder / f"{name}.json").write_text(json.dumps(config))
        folders[kind] = (folder, name)
    return folders


@pytest.mark.slow  # four two-iteration training runs in-process: 25 s on two loaded cores
def test_training_sees_the_batches_of_the_coco_json(three, tmp_path, coco128, capsys):
    train = _script("train")
    printed = {}
    for kind, (folder, name) in _configs(three, tmp_path, coco128).items():
        assert train.main([name, "--config-dir", str(folder), "--workers", "1",
                           "--device", "cpu"]) == 0
        printed[kind] = losses(capsys.readouterr().out)
    assert sorted(printed["COCO"]) == [1, 2]
    assert printed["YOLO"] == printed["COCO"]  # the same batches, to the last printed digit
    assert printed["VOC"] == printed["COCO+crowds"]


@pytest.mark.slow  # 10 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_the_evaluator_and_analysis_give_the_numbers_of_the_coco_json(three, tmp_path, capsys):
    """The same detections per image, scored against each dataset's ground truth."""
    metrics, per_class, overall = {}, {}, {}
    for kind in ("COCO", "YOLO", "VOC", "COCO+crowds"):
        db = _db(kind, three, "val", tmp_path, val_split="val")
        out = tmp_path / "results" / kind
        # report=False: the pictures (test_report.py's) are drawn after metrics.json
        # and change nothing compared here; they took 2.5 s per dataset
        metrics[kind] = score(db, noisy_truth(db, np.random.default_rng(0)), out,
                              image_ids=[db.image_id(i) for i in range(len(db))],
                              report=False)
        per_class[kind] = [{k: v for k, v in row.items() if k != "id"}  # ids are renumbered
                           for row in json.loads((out / "metrics.json").read_text())["per_class"]]
        truth, found, categories = read_run(db.annotation_file, out / "results.json",
                                            [db.image_id(i) for i in range(len(db))])
        overall[kind] = breakdown(truth, found, categories)["overall"]
    capsys.readouterr()
    assert 0.3 < metrics["COCO"]["AP"] < 0.9
    assert metrics["YOLO"] == metrics["COCO"]
    assert metrics["VOC"] == metrics["COCO+crowds"]
    assert metrics["COCO"] != metrics["COCO+crowds"]  # crowd regions are seen as such
    assert per_class["YOLO"] == per_class["COCO"]
    assert per_class["VOC"] == per_class["COCO+crowds"]
    assert overall["YOLO"] == overall["COCO"] and overall["VOC"] == overall["COCO+crowds"]


@pytest.mark.slow  # four test.py runs in-process: about a minute on two loaded cores
def test_test_py_on_yolo_and_voc_finds_and_scores_what_it_does_on_coco(three, tmp_path, coco128,
                                                                      capsys):
    test = _script("test")
    metrics, found = {}, {}
    for kind, (folder, name) in _configs(three, tmp_path, coco128).items():
        person_snapshot(folder, name)
        metrics[kind] = test.run(test.parse_args([name, "--config-dir", str(folder), "--testiter",
                                                   "0", "--device", "cpu", "--images", "3"]))
        results = json.loads((folder.parent / "results" / name / "0" / "val" / "results.json"
                              ).read_text())
        found[kind] = [(r["bbox"], r["score"]) for r in results]
    capsys.readouterr()
    assert len(found["COCO"]) > 10  # real detections
    assert found["YOLO"] == found["COCO"] and found["VOC"] == found["COCO"]
    assert metrics["YOLO"] == metrics["COCO"]
    assert metrics["VOC"] == metrics["COCO+crowds"]


def _yolo_copy(three, tmp_path):
    root = tmp_path / "yolo"
    shutil.copytree(three["data_yaml"].parent, root, symlinks=True)
    (root / "data.yaml").write_text(three["data_yaml"].read_text().replace(
        str(three["data_yaml"].parent), str(root)))
    return root


@pytest.mark.parametrize("line, says", [
    ("0 0.5 0.5 0.2", "expected 5 numbers 'class cx cy w h'"),
    ("80 0.5 0.5 0.2 0.2", "class id 80 is not one of 0..79"),
    ("0 0.5 1.5 0.2 0.2", "coordinate 1.5 is outside 0..1"),
])
def test_a_bad_yolo_line_is_named_with_its_file_and_line(three, tmp_path, line, says):
    root = _yolo_copy(three, tmp_path)
    label = root / "labels" / "val" / "000000000529.txt"
    rows = label.read_text().splitlines()
    label.write_text("\n".join([*rows[:2], line, *rows[2:]]) + "\n")
    data_yaml = root / "data.yaml"
    system = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache")})
    said: list[str] = []
    db = datasets["YOLO"]({"data_yaml": str(data_yaml)}, split="val", sys_config=system,
                          log=said.append)
    text = "\n".join(said)
    assert f"{label}:3: " in text and says in text
    assert "1 left out" in text
    assert len(db.detections(0)) == len(rows)  # the others are kept
    strict = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache2"),
                                           "strict_images": True})
    with pytest.raises(DatasetError, match=re.escape(f"{label}:3: ") + ".*" + re.escape(says)):
        datasets["YOLO"]({"data_yaml": str(data_yaml)}, split="val", sys_config=strict)


def test_a_missing_xml_field_is_named_with_its_file_and_line(three, tmp_path):
    root = tmp_path / "voc"
    shutil.copytree(three["voc"], root, symlinks=True)
    xml = root / "Annotations" / "000000000529.xml"
    text = xml.read_text()
    xml.write_text(text.replace("<ymax>", "<ymaxx>", 1).replace("</ymax>", "</ymaxx>", 1))
    bndbox = next(n for n, line in enumerate(xml.read_text().splitlines(), 1) if "<bndbox>" in line)
    system = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache"),
                                           "strict_images": True})
    with pytest.raises(DatasetError, match=re.escape(f"{xml}:{bndbox}: missing field <ymax>")):
        datasets["VOC"]({"voc_root": str(root), "names": three["names"]}, split="val",
                        sys_config=system)


def test_coco_to_yolo_to_coco_keeps_every_box_and_name(coco128, tmp_path, capsys):
    convert = _script("tools/convert")
    original = coco128 / "annotations" / "instances_coco128_val.json"
    convert.run(convert.parse_args(["coco2yolo", str(original), str(coco128 / "images"),
                                    str(tmp_path / "yolo"), "--split", "val"]))
    convert.run(convert.parse_args(["yolo2coco", str(tmp_path / "yolo" / "data.yaml"), "val",
                                    str(tmp_path / "back.json")]))
    held = facts(coco128, VAL)  # 229 less 4 crowd regions in coco128
    assert f"{held.annotations - held.crowds} objects" in capsys.readouterr().out

    def by_image(content):
        names = {c["id"]: c["name"] for c in content["categories"]}
        files = {i["id"]: i["file_name"].split("/")[-1] for i in content["images"]}
        out = {}
        for ann in content["annotations"]:
            if not ann.get("iscrowd", 0):
                out.setdefault(files[ann["image_id"]], []).append(
                    (names[ann["category_id"]], ann["bbox"]))
        return {f: sorted(rows, key=lambda r: (r[0], r[1])) for f, rows in out.items()}

    before = json.loads(original.read_text())
    after = json.loads((tmp_path / "back.json").read_text())
    assert [c["name"] for c in after["categories"]] == [
        c["name"] for c in sorted(before["categories"], key=lambda c: c["id"])]
    old, new = by_image(before), by_image(after)
    assert old.keys() == new.keys()
    for name in old:
        assert [r[0] for r in old[name]] == [r[0] for r in new[name]]
        # within a pixel: under 0.01 px in fact (6 decimals of the normalised numbers), besides
        # the clip to the image that the COCO loader makes too
        boxes_old = np.array([r[1] for r in old[name]])
        boxes_new = np.array([r[1] for r in new[name]])
        assert np.abs(boxes_old - boxes_new).max() < 1.0


ULTRALYTICS_COCO128 = """\
# Ultralytics YOLO, AGPL-3.0 license
# COCO128 dataset https://www.kaggle.com/datasets/ultralytics/coco128 (first 128 images)

# Train/val/test sets as 1) dir: path/to/imgs, 2) file: path/to/imgs.txt
path: ../datasets/coco128 # dataset root dir
train: images/train2017 # train images (relative to 'path') 128 images
val: images/train2017 # val images (relative to 'path') 128 images
test: # test images (optional)

# Classes
names:
  0: person
  1: bicycle
  2: traffic light

# Download script/URL (optional)
download: |
  from ultralytics.utils.downloads import download
  download(['https://ultralytics.com/assets/coco128.zip'], dir=Path(yaml['path']).parent)
"""


def test_data_yaml_reads_what_ultralytics_writes(tmp_path):
    (tmp_path / "data.yaml").write_text(ULTRALYTICS_COCO128)
    content = read_data_yaml(tmp_path / "data.yaml")
    assert content["path"] == "../datasets/coco128"
    assert content["root"] == tmp_path.parent / "datasets" / "coco128"
    assert content["train"] == "images/train2017" and content["test"] is None
    assert content["names"] == ["person", "bicycle", "traffic light"]
    assert "download(" in content["download"]


def test_data_yaml_errors_name_the_line(tmp_path):
    (tmp_path / "data.yaml").write_text("path: x\nnames: [a, b\nval: y\n")
    with pytest.raises(DatasetError, match=r"data.yaml:3: not valid YAML"):
        read_data_yaml(tmp_path / "data.yaml")


@pytest.mark.parametrize("dataset, key", [("COCO", "data_yaml"), ("YOLO", "names"),
                                          ("VOC", "annotation_files")])
def test_a_key_of_another_dataset_is_refused_not_ignored(dataset, key):
    with pytest.raises(ConfigError, match=f"db.{key} is not read by system.dataset '{dataset}'"):
        datasets[dataset]({key: ["a"] if key == "names" else
                           ({"val": "x"} if key == "annotation_files" else "x")})


def test_a_list_file_split_and_a_polygon_line(three, tmp_path):
    root = _yolo_copy(three, tmp_path)
    (root / "list.txt").write_text("./images/val/000000000536.jpg\nimages/val/000000000529.jpg\n")
    (root / "data.yaml").write_text(f"path: {root}\nval: list.txt\nnames: {three['names']!r}\n")
    label = root / "labels" / "val" / "000000000536.txt"
    label.write_text("3 0.1 0.2 0.5 0.25 0.3 0.75\n")  # a triangle of class 3
    system = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache")})
    db = datasets["YOLO"]({"data_yaml": str(root / "data.yaml")}, split="val", sys_config=system)
    assert [db.image_ids(i) for i in range(len(db))] == ["images/val/000000000536.jpg",
                                                         "images/val/000000000529.jpg"]
    width, height = 448, 336  # 000000000536.jpg
    np.testing.assert_allclose(db.detections(0), [[0.1 * width, 0.2 * height, 0.5 * width,
                                                   0.75 * height, 4]], rtol=1e-6)


@pytest.mark.slow  # 5 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_db_names_must_be_distinct_names():
    with pytest.raises(ConfigError, match="db.names must list distinct class names"):
        datasets["VOC"]({"names": ["cat", "cat"]})
