"""The same images and boxes as a COCO json, a YOLO folder and a VOC folder, written from a
coco128 annotation file by code of the tests' own (not the project's converter); and detections
near a dataset's ground truth to score them with."""

from __future__ import annotations

import json
import os
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np


def _load(coco_json: Path, crowds: bool) -> dict:
    """The annotation file with box areas (YOLO and VOC know boxes only) and, unless `crowds`,
    no crowd regions (YOLO has none)."""
    content = json.loads(coco_json.read_text())
    content["annotations"] = [
        {**ann, "area": ann["bbox"][2] * ann["bbox"][3]}
        for ann in content["annotations"] if crowds or not ann.get("iscrowd", 0)]
    return content


def write_coco(coco_json: Path, out: Path, crowds: bool) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_load(coco_json, crowds)))
    return out


def _link(images: Path, name: str, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    os.symlink(images / name, folder / name)


def write_yolo(coco_jsons: dict[str, Path], images: Path, out: Path) -> Path:
    """out/images/<split>/, out/labels/<split>/ and out/data.yaml; full float precision so that
    the boxes come back as the same float32 numbers."""
    names = None
    lines = [f"path: {out}  # the root", ""]
    for split, coco_json in coco_jsons.items():
        content = _load(coco_json, crowds=False)
        categories = sorted(content["categories"], key=lambda c: c["id"])
        names = [c["name"] for c in categories]
        index = {c["id"]: k for k, c in enumerate(categories)}
        rows: dict[int, list[str]] = {image["id"]: [] for image in content["images"]}
        sizes = {image["id"]: (image["width"], image["height"]) for image in content["images"]}
        for ann in content["annotations"]:
            x, y, w, h = ann["bbox"]
            width, height = sizes[ann["image_id"]]
            rows[ann["image_id"]].append(
                f"{index[ann['category_id']]} {(x + w / 2) / width!r} {(y + h / 2) / height!r} "
                f"{w / width!r} {h / height!r}")
        for image in content["images"]:
            _link(images, image["file_name"], out / "images" / split)
            if rows[image["id"]]:  # an image without objects gets no label file
                label = out / "labels" / split / Path(image["file_name"]).with_suffix(".txt")
                label.parent.mkdir(parents=True, exist_ok=True)
                label.write_text("\n".join(rows[image["id"]]) + "\n")
        lines.append(f"{split}: images/{split}")
    lines += ["", "names:"] + [f"  {k}: {name}" for k, name in enumerate(names)]
    (out / "data.yaml").write_text("\n".join(lines) + "\n")
    return out / "data.yaml"


def write_voc(coco_jsons: dict[str, Path], images: Path, out: Path) -> list[str]:
    """out/Annotations, out/JPEGImages, out/ImageSets/Main/<split>.txt; crowd regions are
    `difficult` objects. Returns the class names in category-id order (for db.names)."""
    names = []
    for split, coco_json in coco_jsons.items():
        content = _load(coco_json, crowds=True)
        categories = sorted(content["categories"], key=lambda c: c["id"])
        names = [c["name"] for c in categories]
        by_id = {c["id"]: c["name"] for c in categories}
        objects: dict[int, list[str]] = {image["id"]: [] for image in content["images"]}
        for ann in content["annotations"]:
            x, y, w, h = ann["bbox"]
            objects[ann["image_id"]].append(
                f"  <object>\n    <name>{escape(by_id[ann['category_id']])}</name>\n"
                f"    <difficult>{int(ann.get('iscrowd', 0))}</difficult>\n    <bndbox>\n"
                f"      <xmin>{x!r}</xmin><ymin>{y!r}</ymin>\n"
                f"      <xmax>{x + w!r}</xmax><ymax>{y + h!r}</ymax>\n    </bndbox>\n"
                f"  </object>")
        ids = []
        for image in content["images"]:
            stem = Path(image["file_name"]).stem
            ids.append(stem)
            _link(images, image["file_name"], out / "JPEGImages")
            (out / "Annotations").mkdir(parents=True, exist_ok=True)
            (out / "Annotations" / f"{stem}.xml").write_text(
                f"<annotation>\n  <filename>{image['file_name']}</filename>\n"
                f"  <size><width>{image['width']}</width><height>{image['height']}</height>"
                f"<depth>3</depth></size>\n" + "\n".join(objects[image["id"]]) +
                "\n</annotation>\n")
        (out / "ImageSets" / "Main").mkdir(parents=True, exist_ok=True)
        (out / "ImageSets" / "Main" / f"{split}.txt").write_text("\n".join(ids) + "\n")
    return names


def noisy_truth(db, rng: np.random.Generator) -> dict:
    """Detections that are the ground truth moved by a few pixels, with random scores, some
    objects missed and some boxes given the wrong class: an AP between 0 and 1 in every class."""
    detections = {}
    for ind in range(len(db)):
        boxes = db.detections(ind).astype(np.float64)
        per_class: dict[int, list] = {}
        for x1, y1, x2, y2, cls in boxes:
            if rng.random() < 0.2:
                continue
            if rng.random() < 0.1:
                cls = rng.integers(1, db.num_classes + 1)
            box = np.array([x1, y1, x2, y2]) + rng.normal(0, 0.08 * (x2 - x1 + y2 - y1) / 2, 4)
            per_class.setdefault(int(cls), []).append([*box, rng.random()])
        detections[db.image_id(ind)] = {c: np.array(v) for c, v in per_class.items()}
    return detections
