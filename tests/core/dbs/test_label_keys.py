"""No image loses or borrows labels (issue 44, item 5): readers and converters key labels by the
whole image name, so two images of one stem (`img (1).jpg`, `img (1).png`, as labelImg folders
hold them) get a label file each, or the run is refused naming both."""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from core.config import SystemConfig
from core.dbs import DatasetError, datasets
from core.dbs.converted import Problems
from core.dbs.yolo import read_split as read_yolo
from cornernet.cli import main as cornernet

# Two images of one stem, of other sizes, each with a box of its own.
TWINS = {"img (1).jpg": ((80, 60), [8.0, 6.0, 40.0, 30.0]),
         "img (1).png": ((50, 100), [20.0, 50.0, 10.0, 25.0])}


def _pictures(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, ((width, height), _) in TWINS.items():
        cv2.imwrite(str(folder / name), np.full((height, width, 3), 90, np.uint8))


def _boxes(content: dict) -> dict[str, list]:
    """{image base name: [x, y, w, h] of each box, to 0.01 px}."""
    names = {image["id"]: Path(image["file_name"]).name for image in content["images"]}
    found: dict[str, list] = {name: [] for name in names.values()}
    for ann in content["annotations"]:
        found[names[ann["image_id"]]].append([round(v, 2) for v in ann["bbox"]])
    return found


def test_coco2yolo_gives_two_images_of_one_stem_a_label_file_each(tmp_path, capsys):
    _pictures(tmp_path / "pictures")
    coco = {"images": [{"id": k, "file_name": name, "width": size[0], "height": size[1]}
                       for k, (name, (size, _)) in enumerate(TWINS.items(), start=1)],
            "annotations": [{"id": k, "image_id": k, "category_id": 1, "bbox": box,
                             "area": box[2] * box[3], "iscrowd": 0}
                            for k, (_, (_, box)) in enumerate(TWINS.items(), start=1)],
            "categories": [{"id": 1, "name": "cat"}]}
    (tmp_path / "twins.json").write_text(json.dumps(coco))
    out = tmp_path / "yolo"
    assert cornernet(["convert", "coco2yolo", str(tmp_path / "twins.json"),
                      str(tmp_path / "pictures"), str(out), "--split", "val"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "note: 2 images share their name with another but for the extension (e.g. img (1).jpg "
        "and img (1).png); they are written as img (1)_jpg.jpg and img (1)_png.png, so that "
        "each has a label file of its own")
    assert sorted(p.name for p in (out / "labels" / "val").iterdir()) == [
        "img (1)_jpg.txt", "img (1)_png.txt"]
    _, back = read_yolo(out / "data.yaml", "val", Problems(strict=False))
    assert _boxes(back) == {"img (1)_jpg.jpg": [TWINS["img (1).jpg"][1]],
                            "img (1)_png.png": [TWINS["img (1).png"][1]]}


def test_the_yolo_reader_refuses_two_images_sharing_a_label_file_naming_both(tmp_path):
    _pictures(tmp_path / "yolo" / "images" / "val")
    (tmp_path / "yolo" / "labels" / "val").mkdir(parents=True)
    label = tmp_path / "yolo" / "labels" / "val" / "img (1).txt"
    label.write_text("0 0.5 0.5 0.2 0.2\n")
    data_yaml = tmp_path / "yolo" / "data.yaml"
    data_yaml.write_text("val: images/val\nnames: [cat]\n")
    images = tmp_path / "yolo" / "images" / "val"
    expected = (f"{data_yaml}: split 'val': 1 label file(s) would serve two images, e.g. "
                f"{images / 'img (1).jpg'} and {images / 'img (1).png'} both take {label} (the "
                f"label rule drops the extension); rename all but one of them and give each its "
                f"own label file")
    with pytest.raises(DatasetError, match=re.escape(expected)):
        read_yolo(data_yaml, "val", Problems(strict=False))
    system = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache")})
    with pytest.raises(DatasetError, match=re.escape(expected)):  # training's loader too
        datasets["YOLO"]({"data_yaml": str(data_yaml), "categories": 1}, split="val",
                         sys_config=system, log=lambda line: None)


def _xml(folder: Path, stem: str, filename: str) -> Path:
    path = folder / f"{stem}.xml"
    path.write_text(f"<annotation><filename>{filename}</filename><size><width>80</width>"
                    f"<height>60</height></size><object><name>cat</name><bndbox><xmin>8"
                    f"</xmin><ymin>6</ymin><xmax>48</xmax><ymax>36</ymax></bndbox></object>"
                    f"</annotation>\n")
    return path


def test_voc2coco_refuses_an_xml_whose_image_only_its_stem_names_among_two(tmp_path, capsys):
    root = tmp_path / "labelimg"
    _pictures(root / "val")
    xml = _xml(root / "val", "img (1)", "img (1).jpeg")  # neither twin: which is it?
    assert cornernet(["convert", "voc2coco", str(root), "val", str(tmp_path / "v.json")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        (f"error: {xml}: <filename> img (1).jpeg is not in {root / 'val'}, and the images of "
        f"its stem are 2 (img (1).jpg and img (1).png): which one the boxes belong to is "
        f"unknown; write the image's whole name in <filename>")]
    assert not (tmp_path / "v.json").exists()


def test_voc2coco_refuses_two_xml_files_for_one_image_naming_both(tmp_path, capsys):
    root = tmp_path / "labelimg"
    _pictures(root / "val")
    second = _xml(root / "val", "img (1)", "img (1).png")
    first = _xml(root / "val", "img (1) copy", "img (1).png")  # read first: sorted by name
    assert cornernet(["convert", "voc2coco", str(root), "val", str(tmp_path / "v.json")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        (f"error: {second} and {first} both annotate {root / 'val' / 'img (1).png'}; merge them "
        f"into one, or correct the <filename> of the other")]


def test_coco2yolo_refuses_two_images_that_would_be_one_naming_both(tmp_path, capsys):
    for folder in ("train", "valid"):
        (tmp_path / folder / "images").mkdir(parents=True)
        cv2.imwrite(str(tmp_path / folder / "images" / "a.jpg"), np.zeros((8, 8, 3), np.uint8))
    coco = {"images": [{"id": k, "file_name": f"{folder}/images/a.jpg", "width": 8, "height": 8}
                       for k, folder in enumerate(("train", "valid"), start=1)],
            "annotations": [], "categories": [{"id": 1, "name": "cat"}]}
    (tmp_path / "both.json").write_text(json.dumps(coco))
    assert cornernet(["convert", "coco2yolo", str(tmp_path / "both.json"), str(tmp_path),
                      str(tmp_path / "yolo")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        (f"error: {tmp_path / 'both.json'}: images train/images/a.jpg and valid/images/a.jpg "
        f"would both be written as a.jpg under the split's folder (the folders up to images/ "
        f"are left out of their names); rename one")]
    assert not (tmp_path / "yolo").exists()
