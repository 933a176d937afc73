"""Conversions between YOLO txt, Pascal VOC xml and COCO json, by the datasets' own readers.

`to_coco` writes what a YOLO or VOC reader made of a split (boxes the loader would drop are
already left out and noted, in the loader's words); `coco_to_yolo` writes a folder that this
project's YOLO reader and Ultralytics both read back: `images/<split>/` and `labels/<split>/`
side by side (a folder named `images` inside a file name is left out, so the label rule, the last
`/images/` of the path made `/labels/`, finds the label file), and a data.yaml without a `path:`
key, so that the root is the data.yaml's own folder for both readers and the folder can be
moved (Ultralytics takes a relative `path:` from its own datasets folder, not from the yaml's).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import yaml

from .coco import parse_instances
from .converted import Problems
from .detection import DatasetError


def to_coco(root: Path, content: dict, problems: Problems, out: Path,
            log: Callable[[str], None]) -> dict:
    """Write a reader's COCO dict (its annotations' `source` removed) to `out`; log the
    reader's notes and the counts; return the counts."""
    for annotation in content["annotations"]:
        annotation.pop("source", None)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(content))
    for message in problems.messages():
        log(f"warning: {message}")
    counts = {"images": len(content["images"]), "objects": len(content["annotations"]),
              "classes": len(content["categories"])}
    log(f"wrote {out}: {counts['images']} images, {counts['objects']} objects, "
        f"{counts['classes']} classes; its images are in {root} (set db.image_dirs to it)")
    return counts


def yolo_name(file_name: str) -> Path:
    """Where an image of a COCO file goes under images/<split>/: its path after the last folder
    named `images` (`valid/images/a.jpg` -> `a.jpg`), so that the label rule's last `/images/`
    is the one of images/<split>/; other folders are kept (`JPEGImages/a.jpg`)."""
    parts = [part for part in Path(file_name).parts if part not in ("..", ".", "/")]
    cut = max((k + 1 for k, part in enumerate(parts[:-1]) if part == "images"), default=0)
    return Path(*parts[cut:])


def _check_images(annotations: Path, images: Path, names: list[str]) -> None:
    missing = [name for name in names if not (images / name).is_file()]
    if missing:
        raise DatasetError(f"{len(missing)} of the {len(names)} images of {annotations} are not "
                           f"in {images} (e.g. {images / missing[0]}); give the folder that "
                           f"the json's file_name values are relative to")


def coco_to_yolo(annotations: Path, images: Path, out: Path, split: str, copy: bool,
                 log: Callable[[str], None]) -> dict:
    """A COCO instances json to a YOLO folder under `out` (see the module docstring); refused
    before anything is written when an image is not in `images`. Returns the counts."""
    parsed = parse_instances(annotations.read_bytes(), annotations)
    _check_images(annotations, images, parsed["file_names"])
    targets = [yolo_name(name) for name in parsed["file_names"]]
    if len(set(targets)) != len(targets):
        twice = next(t for t in targets if targets.count(t) > 1)
        raise DatasetError(f"{annotations}: two images go to "
                           f"images/{split}/{twice} (the folders up to images/ are left out "
                           f"of their names); rename one")
    for message in parsed["problems"]:
        log(f"warning: {message}")
    with open(annotations, "rb") as file:
        sizes = {image["id"]: (image["width"], image["height"])
                 for image in json.load(file)["images"]}
    starts = [0, *parsed["box_counts"].cumsum().tolist()]
    for k, (name, image_id) in enumerate(zip(parsed["file_names"], parsed["image_ids"])):
        width, height = sizes[int(image_id)]
        target = out / "images" / split / targets[k]
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            (shutil.copyfile if copy else os.symlink)((images / name).resolve(), target)
        lines = [f"{int(cls) - 1} {(x1 + x2) / 2 / width:.6f} {(y1 + y2) / 2 / height:.6f} "
                 f"{(x2 - x1) / width:.6f} {(y2 - y1) / height:.6f}"
                 for x1, y1, x2, y2, cls in parsed["boxes"][starts[k]:starts[k + 1]].tolist()]
        label = (out / "labels" / split / targets[k]).with_suffix(".txt")
        label.parent.mkdir(parents=True, exist_ok=True)
        label.write_text("".join(line + "\n" for line in lines))
    _write_data_yaml(out / "data.yaml", split, parsed["category_names"])
    counts = {"images": len(parsed["file_names"]), "objects": len(parsed["boxes"]),
              "classes": len(parsed["category_names"]), "crowds": len(parsed["crowds"])}
    log(f"wrote {out / 'data.yaml'}: split '{split}' with {counts['images']} images, "
        f"{counts['objects']} objects, {counts['classes']} classes; {counts['crowds']} crowd "
        f"regions left out (YOLO has none)")
    return counts


def _write_data_yaml(path: Path, split: str, names: list[str]) -> None:
    """data.yaml with the splits written before kept, `split` added, no `path:` key."""
    splits = {}
    if path.is_file():
        before = yaml.safe_load(path.read_bytes()) or {}
        splits = {k: v for k, v in before.items() if k not in ("path", "names", "nc")}
        if before.get("names") not in (None, names):
            raise DatasetError(f"{path} names other classes than this json; write to another "
                               f"folder")
    splits[split] = f"images/{split}"
    header = ("# No path: key: the root is this file's folder, for this project and for "
              "Ultralytics alike.\n")
    path.write_text(header + yaml.safe_dump({**splits, "nc": len(names), "names": names},
                                            allow_unicode=True, sort_keys=False))
