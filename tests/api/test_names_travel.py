"""Class names travel with the detector: a snapshot records them (and their category ids), and
a detector made from it in another folder, with the training data out of reach, names its
boxes with them; test.py's tables take them first; an older snapshot falls back as before."""

from __future__ import annotations

import json
import shutil

import cv2
import pytest
import torch
from _tiny_coco import IDS, NAMES

from core.config import load_config
from core.dbs import datasets
from core.deploy.runtimes import open_network
from core.nnet.checkpoint import class_record, read_snapshot, recorded_classes
from cornernet import Detector


def carried(root, tmp_path, monkeypatch):
    """The snapshot copied to a folder of its own, the data removed, that folder current."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    snapshot = shutil.copy(root / "cache" / "nnet" / "Names" / "Names_0.pkl", elsewhere)
    picture = cv2.imread(str(root / "data" / "images" / "0.jpg"))
    shutil.rmtree(root)  # as on another machine
    monkeypatch.chdir(elsewhere)
    return elsewhere / "Names_0.pkl" if snapshot else None, picture


def test_a_snapshot_records_the_names_and_ids_of_its_classes(named_run):
    snapshot = read_snapshot(named_run / "cache" / "nnet" / "Names" / "Names_0.pkl")
    assert snapshot["classes"] == {"names": NAMES, "ids": IDS}
    assert recorded_classes(snapshot["classes"], 2) == (NAMES, IDS)


def test_a_record_of_another_class_count_or_kind_is_not_used():
    assert recorded_classes({"names": NAMES, "ids": IDS}, 3) is None
    assert recorded_classes({"names": [1, 2], "ids": IDS}, 2) is None
    assert recorded_classes(None, 2) is None


def test_the_detector_names_its_boxes_from_the_snapshot_in_another_folder(named_run, tmp_path,
                                                                          monkeypatch):
    snapshot, picture = carried(named_run, tmp_path, monkeypatch)
    detector = Detector.from_snapshot(snapshot, device="cpu", thresh=0.0)
    assert detector.names == NAMES and detector.category_ids == IDS
    result = next(detector.predict(picture))
    assert len(result) > 0
    assert set(result.names) <= set(NAMES) and "triangle" in result.names
    for cls, name, cat in zip(result.classes, result.names, result.category_ids):
        assert name == NAMES[cls - 1] and cat == IDS[cls - 1]


def test_an_older_snapshot_without_names_falls_back_to_the_dataset(named_run, tmp_path,
                                                                  monkeypatch):
    path = named_run / "cache" / "nnet" / "Names" / "Names_0.pkl"
    snapshot = read_snapshot(path)
    del snapshot["classes"]
    torch.save(snapshot, path)
    assert Detector.from_snapshot(path, device="cpu").names == NAMES  # the data is there
    moved, _ = carried(named_run, tmp_path, monkeypatch)
    assert Detector.from_snapshot(moved, device="cpu").names == ["class 1", "class 2"]


def test_test_py_tables_take_the_recorded_names_for_the_same_ids(named_run):
    system_config, db_config = load_config("Names", named_run / "configs")
    # The dataset on this machine calls the same categories otherwise.
    annotation_file = named_run / "data" / "val.json"
    data = json.loads(annotation_file.read_text())
    data["categories"] = [{"id": i, "name": f"local {i}"} for i in IDS]
    annotation_file.write_text(json.dumps(data))
    db = datasets["COCO"](db_config, split="val", sys_config=system_config)
    assert db.cls2name(1) == "local 3"
    open_network("torch", system_config, db, 0, "cpu", threads=1)
    assert [db.cls2name(c) for c in (1, 2)] == NAMES


def test_class_record_of_a_dataset_without_classes_is_none(named_run):
    system_config, db_config = load_config("Names", named_run / "configs")
    db = datasets["COCO"](db_config, split=None, sys_config=system_config)
    assert db.class_ids == [] and class_record(db) is None


@pytest.mark.slow  # tools/export.py in this process: about 20 s of CPU
def test_an_exported_file_names_its_boxes_in_another_folder(named_run, tmp_path, monkeypatch):
    from _inproc import run_script

    # --max-map 32: the pictures are 96 pixels a side, so a graph exact up to 128 (5 steps of
    # corner-pool scan instead of 9 to trace: the scan is most of the export's time)
    done = run_script("tools/export.py", "Names", "--testiter", 0, "--config-dir",
                      named_run / "configs", "--image", named_run / "data" / "images" / "0.jpg",
                      "--max-map", 32)
    assert done.returncode == 0, done.stderr
    exported = shutil.copy(named_run / "cache" / "nnet" / "Names" / "Names_0.onnx", tmp_path)
    _, picture = carried(named_run, tmp_path, monkeypatch)
    detector = Detector.from_onnx(exported, thresh=0.0)
    assert detector.names == NAMES and detector.category_ids == IDS
    result = next(detector.predict(picture))
    assert len(result) > 0 and "triangle" in result.names
    assert list(result.category_ids) == [IDS[c - 1] for c in result.classes]
    pytest.importorskip("openvino", reason="OpenVINO is not installed")
    in_openvino = Detector.from_onnx(exported, runtime="openvino", thresh=0.0)
    assert in_openvino.names == NAMES and in_openvino.category_ids == IDS
