"""Exports as each exporter writes them, small, with their classes and images counted by hand:
Roboflow YOLO and COCO, CVAT COCO 1.0, Label Studio's YOLO export, labelImg's folder of xml
beside the images, and a VOC devkit. Each builder returns the path a user gives to `--data` and
what a reader must find there. Also the plainer datasets of the layout and advice tests: a VOC
folder of hand-counted objects and a seeded YOLO set of grey images."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np


@dataclass(frozen=True)
class Export:
    path: Path  # what --data is given
    dataset: str  # the dataset that reads it
    names: list[str]  # the classes, in the order of their ids
    splits: dict[str, int]  # split key -> images, as the export holds them (one: held out)


# per image: (file stem, [(class index, x1, y1, x2, y2) in pixels]); images are 160x120
_BOXES = [("a", [(0, 10, 10, 70, 60), (1, 80, 20, 150, 110)]),
          ("b", [(1, 20, 30, 90, 100)]),
          ("c", [(0, 40, 10, 120, 90), (0, 5, 70, 45, 115)]),
          ("d", [(1, 60, 40, 140, 100)]),
          ("e", [(0, 30, 20, 100, 80)]),
          ("f", [(1, 10, 10, 60, 60), (0, 90, 50, 150, 110)])]
W, H = 160, 120


def _image(path: Path, boxes: list, k: int = 1) -> None:
    """A picture with the boxes drawn, so that the detector has something to see; `k` times
    the size (the boxes given already scaled)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = np.full((H * k, W * k, 3), 90, np.uint8)
    for cls, x1, y1, x2, y2 in boxes:
        cv2.rectangle(image, (x1, y1), (x2 - 1, y2 - 1), (255, 40, 40) if cls else (40, 40, 255),
                      -1)
    cv2.imwrite(str(path), image)


def _yolo_lines(boxes: list) -> str:
    return "".join(f"{c} {(x1 + x2) / 2 / W:.6f} {(y1 + y2) / 2 / H:.6f} {(x2 - x1) / W:.6f} "
                   f"{(y2 - y1) / H:.6f}\n" for c, x1, y1, x2, y2 in boxes)


def _coco(items: list, names: list[str], first_id: int, supercategory: bool,
          k: int = 1) -> dict:
    """A COCO json as Roboflow (ids from 0, a supercategory entry first) or CVAT (from 1)."""
    categories = ([{"id": 0, "name": "shapes", "supercategory": "none"}] if supercategory
                  else [])
    categories += [{"id": first_id + k, "name": name, "supercategory": "shapes"}
                   for k, name in enumerate(names)]
    images, annotations = [], []
    for n, (file_name, boxes) in enumerate(items, start=0 if supercategory else 1):
        images.append({"id": n, "file_name": file_name, "width": W * k, "height": H * k})
        for c, x1, y1, x2, y2 in boxes:
            annotations.append({"id": len(annotations) + 1, "image_id": n,
                                "category_id": first_id + c, "bbox": [x1, y1, x2 - x1, y2 - y1],
                                "area": (x2 - x1) * (y2 - y1), "iscrowd": 0,
                                "segmentation": []})
    return {"info": {}, "licenses": [], "images": images, "annotations": annotations,
            "categories": categories}


_SPLITS = {"train": _BOXES[:4], "valid": _BOXES[4:5], "test": _BOXES[5:]}


def roboflow_yolo(root: Path) -> Export:
    """data.yaml beside train/ valid/ test/, each with images/ and labels/ (`../train/images`)."""
    for split, items in _SPLITS.items():
        for stem, boxes in items:
            name = f"{stem}_jpg.rf.{stem * 8}"
            _image(root / split / "images" / f"{name}.jpg", boxes)
            (root / split / "labels").mkdir(parents=True, exist_ok=True)
            (root / split / "labels" / f"{name}.txt").write_text(_yolo_lines(boxes))
    (root / "data.yaml").write_text(
        "train: ../train/images\nval: ../valid/images\ntest: ../test/images\n\nnc: 2\n"
        "names: ['circle', 'square']\n\nroboflow:\n  workspace: me\n  project: shapes\n"
        "  version: 1\n")
    return Export(root, "YOLO", ["circle", "square"], {"train": 4, "val": 1, "test": 1})


def roboflow_coco(root: Path, k: int = 1) -> Export:
    """train/ valid/ test/, each with its images and _annotations.coco.json (category 0 is
    Roboflow's supercategory); images and boxes `k` times the size."""
    for split, items in _SPLITS.items():
        named = []
        for stem, boxes in items:
            name = f"{stem}_jpg.rf.{stem * 8}.jpg"
            boxes = [(c, *(v * k for v in box)) for c, *box in boxes]
            _image(root / split / name, boxes, k)
            named.append((name, boxes))
        (root / split / "_annotations.coco.json").write_text(
            json.dumps(_coco(named, ["circle", "square"], 1, supercategory=True, k=k)))
    return Export(root, "COCO", ["shapes", "circle", "square"],
                  {"train": 4, "valid": 1, "test": 1})


def cvat_coco(root: Path) -> Export:
    """CVAT's COCO 1.0: annotations/instances_default.json and images/ (one subset)."""
    named = []
    for stem, boxes in _BOXES:
        _image(root / "images" / f"frame_{stem}.jpg", boxes)
        named.append((f"frame_{stem}.jpg", boxes))
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "instances_default.json").write_text(
        json.dumps(_coco(named, ["circle", "square"], 1, supercategory=False)))
    return Export(root, "COCO", ["circle", "square"], {"default": 6})


def label_studio(root: Path) -> Export:
    """Label Studio's YOLO export: images/, labels/, classes.txt, notes.json (one split)."""
    for stem, boxes in _BOXES:
        _image(root / "images" / f"1f0a{stem}-shot.jpg", boxes)
        (root / "labels").mkdir(parents=True, exist_ok=True)
        (root / "labels" / f"1f0a{stem}-shot.txt").write_text(_yolo_lines(boxes))
    (root / "classes.txt").write_text("circle\nsquare\n")
    (root / "notes.json").write_text(json.dumps({"categories": [
        {"id": 0, "name": "circle"}, {"id": 1, "name": "square"}], "info": {}}))
    return Export(root, "YOLO", ["circle", "square"], {"train": 6})


def labelimg_xml(path: Path, filename: str, objects: list[tuple], size: tuple = (64, 48),
                 windows_path: bool = False) -> None:
    """A Pascal VOC xml as labelImg writes it (folder, filename, path, source, size, objects
    with pose, truncated, difficult)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(
        f"\t<object>\n\t\t<name>{name}</name>\n\t\t<pose>Unspecified</pose>\n"
        f"\t\t<truncated>0</truncated>\n\t\t<difficult>0</difficult>\n\t\t<bndbox>\n"
        f"\t\t\t<xmin>{x1}</xmin>\n\t\t\t<ymin>{y1}</ymin>\n\t\t\t<xmax>{x2}</xmax>\n"
        f"\t\t\t<ymax>{y2}</ymax>\n\t\t</bndbox>\n\t</object>\n"
        for name, x1, y1, x2, y2 in objects)
    where = f"C:\\Users\\me\\labels\\{filename}" if windows_path else f"/home/me/{filename}"
    path.write_text(
        f"<annotation>\n\t<folder>{path.parent.name}</folder>\n\t<filename>{filename}"
        f"</filename>\n\t<path>{where}</path>\n\t<source>\n\t\t<database>Unknown</database>\n"
        f"\t</source>\n\t<size>\n\t\t<width>{size[0]}</width>\n\t\t<height>{size[1]}</height>\n"
        f"\t\t<depth>3</depth>\n\t</size>\n\t<segmented>0</segmented>\n{body}</annotation>\n")


def _xml(path: Path, filename: str, boxes: list, names: list[str]) -> None:
    labelimg_xml(path, filename, [(names[c], *box) for c, *box in boxes], (W, H),
                 windows_path=True)


def labelimg(root: Path) -> Export:
    """labelImg's Pascal VOC: an xml beside each image, no split lists."""
    for stem, boxes in _BOXES:
        _image(root / f"IMG_{stem}.jpg", boxes)
        _xml(root / f"IMG_{stem}.xml", f"IMG_{stem}.jpg", boxes, ["circle", "square"])
    return Export(root, "VOC", ["circle", "square"], {root.name: 6})


def voc_devkit(root: Path) -> Export:
    """VOCdevkit/VOC2007: Annotations/, JPEGImages/, ImageSets/Main/train.txt and val.txt;
    `--data` is given the VOCdevkit folder (the VOC root)."""
    year = root / "VOC2007"
    for stem, boxes in _BOXES:
        _image(year / "JPEGImages" / f"00000{stem}.jpg", boxes)
        _xml(year / "Annotations" / f"00000{stem}.xml", f"00000{stem}.jpg", boxes,
             ["circle", "square"])
    (year / "ImageSets" / "Main").mkdir(parents=True)
    (year / "ImageSets" / "Main" / "train.txt").write_text("00000a\n00000b\n00000c\n00000d\n")
    (year / "ImageSets" / "Main" / "val.txt").write_text("00000e\n00000f\n")
    return Export(root, "VOC", ["circle", "square"], {"train": 4, "val": 2})


EXPORTS = {"roboflow_yolo": roboflow_yolo, "roboflow_coco": roboflow_coco,
           "cvat_coco": cvat_coco, "label_studio": label_studio, "labelimg": labelimg,
           "voc_devkit": voc_devkit}


def grey_image(path: Path, width: int = 64, height: int = 48) -> None:
    """A flat grey picture (a small file) where a reader only needs an image to be there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.full((height, width, 3), 128, np.uint8))


# per image stem: its objects as labelImg names them, (class name, x1, y1, x2, y2)
VOC_OBJECTS = {"a": [("cat", 1, 2, 30, 40), ("dog", 10, 10, 20, 20)],
               "b": [("dog", 5, 5, 60, 44), ("dog", 0, 0, 8, 8), ("bird", 3, 3, 9, 9)],
               "c": [("cat", 2, 2, 50, 40)]}


def hand_counted_devkit(root: Path, image_sets: bool) -> None:
    """A VOC year folder of VOC_OBJECTS: JPEGImages/ and Annotations/, and with `image_sets`
    ImageSets/Main/ (train a and b, val c, and a per-class list to pass over)."""
    for stem, objects in VOC_OBJECTS.items():
        grey_image(root / "JPEGImages" / f"{stem}.jpg")
        labelimg_xml(root / "Annotations" / f"{stem}.xml", f"{stem}.jpg", objects)
    if image_sets:
        (root / "ImageSets" / "Main").mkdir(parents=True)
        (root / "ImageSets" / "Main" / "train.txt").write_text("a\nb\n")
        (root / "ImageSets" / "Main" / "val.txt").write_text("c\n")
        (root / "ImageSets" / "Main" / "cat_train.txt").write_text("a  1\nb -1\n")


def seeded_yolo(root: Path, side: int, images: int, sizes: tuple[float, float]) -> Path:
    """A YOLO dataset of side x side images (flat grey, small files), 1-7 boxes each of
    `sizes` pixels, seeded; val holds 4 images of its own. Returns its data.yaml."""
    rng = np.random.default_rng(0)
    for split, count in (("train", images), ("val", 4)):
        (root / "labels" / split).mkdir(parents=True)
        for k in range(count):
            image = root / "images" / split / f"{split}{k}.jpg"
            image.parent.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(image), np.full((side, side, 3), (60 if split == "train" else 160) + k,
                                                np.uint8))
            lines = []
            for _ in range(rng.integers(1, 8)):
                w, h = rng.uniform(*sizes, 2)
                cx, cy = rng.uniform(w / 2, side - w / 2), rng.uniform(h / 2, side - h / 2)
                lines.append(f"{rng.integers(0, 4)} {cx / side:.6f} {cy / side:.6f} "
                             f"{w / side:.6f} {h / side:.6f}")
            (root / "labels" / split / f"{split}{k}.txt").write_text("\n".join(lines) + "\n")
    (root / "data.yaml").write_text("train: images/train\nval: images/val\n"
                                    "names: [a, b, c, d]\n")
    return root / "data.yaml"
