"""Class names travel with the detector: a snapshot records them (and their category ids), and
a detector made from it in another folder, with the training data out of reach, names its
boxes with them; test.py's tables take them first; an older snapshot falls back as before."""

from __future__ import annotations

import json
import shutil

import cv2
import numpy as np
import pytest
import torch
from _tiny_coco import person_snapshot

from core.config import load_config
from core.dbs import datasets
from core.deploy.runtimes import open_network
from core.nnet.checkpoint import class_record, read_snapshot, recorded_classes
from cornernet import Detector

NAMES = ["triangle", "square"]
IDS = [3, 7]  # not 1..C: the ids must travel as they are


def write_dataset(root):
    """Two 96x96 pictures and their COCO annotations under `root`/data."""
    images = root / "data" / "images"
    images.mkdir(parents=True)
    entries, annotations = [], []
    for k in range(2):
        picture = np.full((96, 96, 3), 40 * (k + 1), np.uint8)
        cv2.rectangle(picture, (20, 20), (60, 70), (255, 255, 255), -1)
        cv2.imwrite(str(images / f"{k}.jpg"), picture)
        entries.append({"id": k + 1, "file_name": f"{k}.jpg", "width": 96, "height": 96})
        annotations.append({"id": k + 1, "image_id": k + 1, "category_id": IDS[k],
                            "bbox": [20, 20, 40, 50], "area": 2000, "iscrowd": 0})
    categories = [{"id": i, "name": n} for i, n in zip(IDS, NAMES)]
    annotation_file = root / "data" / "val.json"
    annotation_file.write_text(json.dumps({"images": entries, "annotations": annotations,
                                           "categories": categories}))
    return images, annotation_file


@pytest.fixture
def trained(tmp_path):
    """A CornerNet_Tiny config over the two pictures and its snapshot 0 (made in `tmp_path`/run,
    its heads favouring class 1 so that boxes come out); returns the run folder."""
    root = tmp_path / "run"
    images, annotation_file = write_dataset(root)
    config = {"system": {"dataset": "COCO", "model": "CornerNet_Tiny", "val_split": "val",
                         "train_split": "val", "max_iter": 1,
                         "cache_dir": str(root / "cache"), "result_dir": str(root / "results")},
              "db": {"categories": 2, "input_size": [64, 64], "output_sizes": [[16, 16]],
                     "test_scales": [1], "test_flipped": False, "top_k": 10, "num_dets": 20,
                     "ae_threshold": 100, "image_dirs": {"val": str(images)},
                     "annotation_files": {"val": str(annotation_file)}}}
    (root / "configs").mkdir()
    (root / "configs" / "Names.json").write_text(json.dumps(config))
    person_snapshot(root / "configs", "Names", split="val")  # the split records the names
    return root


def carried(root, tmp_path, monkeypatch):
    """The snapshot copied to a folder of its own, the data removed, that folder current."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    snapshot = shutil.copy(root / "cache" / "nnet" / "Names" / "Names_0.pkl", elsewhere)
    picture = cv2.imread(str(root / "data" / "images" / "0.jpg"))
    shutil.rmtree(root)  # as on another machine
    monkeypatch.chdir(elsewhere)
    return elsewhere / "Names_0.pkl" if snapshot else None, picture


def test_a_snapshot_records_the_names_and_ids_of_its_classes(trained):
    snapshot = read_snapshot(trained / "cache" / "nnet" / "Names" / "Names_0.pkl")
    assert snapshot["classes"] == {"names": NAMES, "ids": IDS}
    assert recorded_classes(snapshot["classes"], 2) == (NAMES, IDS)


def test_a_record_of_another_class_count_or_kind_is_not_used():
    assert recorded_classes({"names": NAMES, "ids": IDS}, 3) is None
    assert recorded_classes({"names": [1, 2], "ids": IDS}, 2) is None
    assert recorded_classes(None, 2) is None


def test_the_detector_names_its_boxes_from_the_snapshot_in_another_folder(trained, tmp_path,
                                                                          monkeypatch):
    snapshot, picture = carried(trained, tmp_path, monkeypatch)
    detector = Detector.from_snapshot(snapshot, device="cpu", thresh=0.0)
    assert detector.names == NAMES and detector.category_ids == IDS
    result = next(detector.predict(picture))
    assert len(result) > 0
    assert set(result.names) <= set(NAMES) and "triangle" in result.names
    for cls, name, cat in zip(result.classes, result.names, result.category_ids):
        assert name == NAMES[cls - 1] and cat == IDS[cls - 1]


def test_an_older_snapshot_without_names_falls_back_to_the_dataset(trained, tmp_path,
                                                                  monkeypatch):
    path = trained / "cache" / "nnet" / "Names" / "Names_0.pkl"
    snapshot = read_snapshot(path)
    del snapshot["classes"]
    torch.save(snapshot, path)
    assert Detector.from_snapshot(path, device="cpu").names == NAMES  # the data is there
    moved, _ = carried(trained, tmp_path, monkeypatch)
    assert Detector.from_snapshot(moved, device="cpu").names == ["class 1", "class 2"]


def test_test_py_tables_take_the_recorded_names_for_the_same_ids(trained):
    system_config, db_config = load_config("Names", trained / "configs")
    # The dataset on this machine calls the same categories otherwise.
    annotation_file = trained / "data" / "val.json"
    data = json.loads(annotation_file.read_text())
    data["categories"] = [{"id": i, "name": f"local {i}"} for i in IDS]
    annotation_file.write_text(json.dumps(data))
    db = datasets["COCO"](db_config, split="val", sys_config=system_config)
    assert db.cls2name(1) == "local 3"
    open_network("torch", system_config, db, 0, "cpu", threads=1)
    assert [db.cls2name(c) for c in (1, 2)] == NAMES


def test_class_record_of_a_dataset_without_classes_is_none(trained):
    system_config, db_config = load_config("Names", trained / "configs")
    db = datasets["COCO"](db_config, split=None, sys_config=system_config)
    assert db.class_ids == [] and class_record(db) is None


@pytest.mark.slow  # tools/export.py in this process: about 20 s of CPU
def test_an_exported_file_names_its_boxes_in_another_folder(trained, tmp_path, monkeypatch):
    from _inproc import run_script

    done = run_script("tools/export.py", "Names", "--testiter", 0, "--config-dir",
                      trained / "configs", "--image", trained / "data" / "images" / "0.jpg")
    assert done.returncode == 0, done.stderr
    exported = shutil.copy(trained / "cache" / "nnet" / "Names" / "Names_0.onnx", tmp_path)
    _, picture = carried(trained, tmp_path, monkeypatch)
    detector = Detector.from_onnx(exported, thresh=0.0)
    assert detector.names == NAMES and detector.category_ids == IDS
    result = next(detector.predict(picture))
    assert len(result) > 0 and "triangle" in result.names
    assert list(result.category_ids) == [IDS[c - 1] for c in result.classes]
    pytest.importorskip("openvino", reason="OpenVINO is not installed")
    in_openvino = Detector.from_onnx(exported, runtime="openvino", thresh=0.0)
    assert in_openvino.names == NAMES and in_openvino.category_ids == IDS
