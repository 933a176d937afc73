"""Conversions keep every box or say why: COCO -> YOLO -> COCO and VOC -> COCO -> YOLO -> COCO
give back every class name and every box within a pixel, with the counts printed at each step;
a box the loader would drop is dropped by the converter, counted in the loader's words; a wrong
image folder is refused before anything is written; the YOLO folder reads back when moved."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from _coco_counts import VAL, facts
from _yolo_voc import write_voc

from core.dbs import DatasetError
from core.dbs.coco_parse import ZERO_SIZE, parse_instances
from core.dbs.convert import coco_to_yolo, to_coco
from core.dbs.converted import Problems
from core.dbs.voc import read_split as read_voc
from core.dbs.yolo import read_split as read_yolo


def _yolo_to_coco(data_yaml: Path, split: str, out: Path, said: list[str]) -> dict:
    problems = Problems(strict=False)
    to_coco(*read_yolo(data_yaml, split, problems), problems, out, said.append)
    return json.loads(out.read_text())


def _boxes(content: dict, crowds: bool = False) -> dict[str, list]:
    """{image base name: sorted [(class name, x, y, w, h)]} of the non-crowd boxes."""
    names = {c["id"]: c["name"] for c in content["categories"]}
    files = {i["id"]: Path(i["file_name"]).name for i in content["images"]}
    out: dict[str, list] = {name: [] for name in files.values()}
    for ann in content["annotations"]:
        if crowds or not ann.get("iscrowd", 0):
            out[files[ann["image_id"]]].append((names[ann["category_id"]], *ann["bbox"]))
    return {name: sorted(rows) for name, rows in out.items()}


def _same(before: dict, after: dict) -> None:
    assert before.keys() == after.keys()
    for name, rows in before.items():
        assert [r[0] for r in rows] == [r[0] for r in after[name]], name
        if rows:
            gap = np.abs(np.array([r[1:] for r in rows]) -
                         np.array([r[1:] for r in after[name]]))
            assert gap.max() < 1.0, name  # within a pixel (6 decimals: under 0.01 px here)


def test_coco_to_yolo_to_coco_from_a_nested_export(coco128, tmp_path):
    """The json's file names are `valid/images/<name>`, as yolo2coco writes them for a Roboflow
    export: coco2yolo must not nest them (images/val/valid/images/ lost every label)."""
    original = json.loads((coco128 / "annotations" / "instances_coco128_val.json").read_text())
    source = tmp_path / "source"
    (source / "valid" / "images").mkdir(parents=True)
    for image in original["images"]:
        os.symlink(coco128 / "images" / image["file_name"],
                   source / "valid" / "images" / image["file_name"])
        image["file_name"] = f"valid/images/{image['file_name']}"
    (tmp_path / "val.json").write_text(json.dumps(original))
    said: list[str] = []
    counts = coco_to_yolo(tmp_path / "val.json", source, tmp_path / "yolo", "val", False,
                          said.append)
    held = facts(coco128, VAL)  # coco128: 32 images, 229 objects of which 4 crowd regions
    objects = held.annotations - held.crowds
    assert counts == {"images": held.images, "objects": objects, "classes": 80,
                      "crowds": held.crowds}
    assert (tmp_path / "yolo" / "labels" / "val" / "000000000529.txt").is_file()
    assert "path" not in yaml.safe_load((tmp_path / "yolo" / "data.yaml").read_text())
    shutil.move(tmp_path / "yolo", tmp_path / "moved")  # no path: so it reads where it lands
    back = _yolo_to_coco(tmp_path / "moved" / "data.yaml", "val", tmp_path / "back.json", said)
    assert said[-1].startswith(f"wrote {tmp_path / 'back.json'}: {held.images} images, "
                               f"{objects} objects, 80 classes")
    assert [c["name"] for c in back["categories"]] == [
        c["name"] for c in sorted(original["categories"], key=lambda c: c["id"])]
    parsed = parse_instances((tmp_path / "val.json").read_bytes(), tmp_path / "val.json")
    assert len(parsed["boxes"]) == len(back["annotations"]) == objects
    clipped = {**original, "annotations": []}  # the loader's clip, as the YOLO file holds it
    for k, (x1, y1, x2, y2, cls) in enumerate(parsed["boxes"].tolist()):
        row = int(np.searchsorted(parsed["box_counts"].cumsum(), k, side="right"))
        clipped["annotations"].append({"image_id": int(parsed["image_ids"][row]),
                                       "category_id": parsed["category_ids"][int(cls) - 1],
                                       "bbox": [x1, y1, x2 - x1, y2 - y1]})
    _same(_boxes(clipped), _boxes(back))


def test_voc_to_coco_to_yolo_to_coco(coco128, tmp_path):
    coco_json = coco128 / "annotations" / "instances_coco128_val.json"
    names = write_voc({"val": coco_json}, coco128 / "images", tmp_path / "voc")
    xml = tmp_path / "voc" / "Annotations" / "000000000529.xml"
    xml.write_text(xml.read_text().replace(  # a zero-width box, as labelImg can leave one
        "</annotation>", "<object><name>person</name><difficult>0</difficult><bndbox><xmin>5"
        "</xmin><ymin>5</ymin><xmax>5</xmax><ymax>30</ymax></bndbox></object></annotation>"))
    said: list[str] = []
    problems = Problems(strict=False)
    to_coco(*read_voc(tmp_path / "voc", "val", names, problems), problems,
            tmp_path / "voc.json", said.append)
    assert len(said) == 2 and said[0].startswith(f"warning: boxes {ZERO_SIZE}: 1, e.g. {xml}:")
    held = facts(coco128, VAL)  # coco128: 32 images, 229 objects of which 4 crowd regions
    objects = held.annotations - held.crowds
    assert said[1] == (f"wrote {tmp_path / 'voc.json'}: {held.images} images, "
                       f"{held.annotations} objects, 80 classes; its images are in "
                       f"{tmp_path / 'voc'} (set db.image_dirs to it)")
    voc_json = json.loads((tmp_path / "voc.json").read_text())
    again = parse_instances((tmp_path / "voc.json").read_bytes(), tmp_path / "voc.json")
    assert not [m for m in again["problems"] if "dropped" in m]  # nothing left to drop
    counts = coco_to_yolo(tmp_path / "voc.json", tmp_path / "voc", tmp_path / "yolo", "val",
                          False, said.append)
    assert counts == {"images": held.images, "objects": objects, "classes": 80,
                      "crowds": held.crowds}
    back = _yolo_to_coco(tmp_path / "yolo" / "data.yaml", "val", tmp_path / "back.json", said)
    assert said[-1].startswith(f"wrote {tmp_path / 'back.json'}: {held.images} images, "
                               f"{objects} objects, 80 classes")
    assert [c["name"] for c in back["categories"]] == names
    _same(_boxes(voc_json), _boxes(back))
    original = json.loads(coco_json.read_text())
    by_name = _boxes(original)
    assert sum(map(len, by_name.values())) == objects


def test_a_wrong_image_folder_is_refused_before_anything_is_written(coco128, tmp_path):
    coco_json = coco128 / "annotations" / "instances_coco128_val.json"
    with pytest.raises(DatasetError) as err:
        coco_to_yolo(coco_json, coco128, tmp_path / "yolo", "val", False, print)
    first = json.loads(coco_json.read_text())["images"][0]["file_name"]
    count = facts(coco128, VAL).images
    assert str(err.value) == (
        f"{count} of the {count} images of {coco_json} are not in {coco128} (e.g. "
        f"{coco128 / first}); give the folder that the json's file_name values "
        f"are relative to")
    assert not (tmp_path / "yolo").exists()


def test_a_second_split_keeps_the_first_in_data_yaml(coco128, tmp_path):
    for split in ("train", "val"):
        coco_to_yolo(coco128 / "annotations" / f"instances_coco128_{split}.json",
                     coco128 / "images", tmp_path / "yolo", split, False, lambda line: None)
    said: list[str] = []
    for split in ("train", "val"):
        _yolo_to_coco(tmp_path / "yolo" / "data.yaml", split, tmp_path / f"{split}.json", said)
    total = len(json.loads((coco128 / "annotations" / "instances_coco128.json").read_text())
                ["images"])
    assert sum(int(line.split(": ")[1].split()[0]) for line in said) == total
