"""An export recognised from what is there: `--data PATH` -> which dataset reads it, with which
db settings, split keys and class names.

PATH is a data.yaml, a COCO json, or a folder holding one of the layouts the exporters write:

- a data.yaml (Ultralytics, Roboflow YOLO, Label Studio; `data.yml` or one `*.yaml` beside the
  data) -> YOLO;
- Roboflow COCO: `train/`, `valid/`, `test/`, each with `_annotations.coco.json` -> COCO;
- CVAT COCO 1.0: `annotations/instances_<subset>.json` with `images/` (or `images/<subset>/`)
  -> COCO;
- YOLO without a data.yaml (Label Studio's YOLO export): `images/`, `labels/` and `classes.txt`
  -> YOLO through a data.yaml written into the run folder;
- a VOC devkit (`Annotations/`, `JPEGImages/`, `ImageSets/Main/*.txt`), or a VOC root holding
  one (`VOCdevkit/VOC2007`), or Roboflow VOC (`train/`, `valid/` of xml beside images) -> VOC;
- labelImg: xml files beside their images, no lists -> VOC (the folder is the split);
- one COCO json in the folder, its images beside it or in `images/` -> COCO.

A layout with one split says so (`val` is None): the caller holds out a validation share of it
(core/dbs/holdout.py). Paths in the settings are absolute, so the run's config reads the data
from any folder.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from .converted import IMAGE_SUFFIXES
from .detection import DatasetError
from .voc import all_names
from .yolo import read_data_yaml

_VAL_NAMES = ("val", "valid", "validation")
_ROBOFLOW_COCO = "_annotations.coco.json"


@dataclass(frozen=True)
class Recognised:
    """What `recognise` found: `layout` in words, the `dataset` that reads it with `db` (its
    db keys), the class `names`, and the split keys (`val` None: only one split is there)."""

    layout: str
    dataset: str
    db: dict
    names: list[str]
    train: str
    val: str | None
    test: str | None
    source: Path
    notes: tuple[str, ...] = ()  # what was read otherwise than written (a Windows path)

    def line(self) -> str:
        """The one line a run says of its data."""
        splits = ", ".join(f"{role} '{key}'" for role, key in
                           (("train", self.train), ("val", self.val), ("test", self.test))
                           if key is not None)
        return (f"data: {self.source} is {self.layout}, read as {self.dataset}: "
                f"{len(self.names)} classes ({', '.join(self.names[:8])}"
                f"{', ...' if len(self.names) > 8 else ''}); splits {splits}")


def recognise(path: Path, work: Path) -> Recognised:
    """The layout at `path`; `work` is the folder where a file the layout lacks (a data.yaml
    for YOLO folders without one) is written. DatasetError when nothing is recognised."""
    path = Path(path).expanduser().absolute()
    if path.is_file():
        if path.suffix.lower() in (".yaml", ".yml"):
            return _yaml(path, "a YOLO data.yaml")
        if path.suffix.lower() == ".json":
            return _coco_file(path, "a COCO json")
        raise DatasetError(f"--data {path}: expected a data.yaml, a COCO .json or a folder")
    if not path.is_dir():
        raise DatasetError(f"--data {path}: no such file or folder")
    yamls = [p for p in (path / "data.yaml", path / "data.yml") if p.is_file()]
    yamls = yamls or sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
    if len(yamls) == 1 or (yamls and yamls[0].stem == "data"):
        return _yaml(yamls[0], "a YOLO export (data.yaml)")
    for reader in (_roboflow_coco, _cvat_coco, _yolo_folders, _voc, _labelimg, _coco_in_folder):
        found = reader(path, work)
        if found is not None:
            return found
    raise DatasetError(
        f"--data {path}: no export recognised there; expected a data.yaml, train/ valid/ test/ "
        f"with {_ROBOFLOW_COCO} (Roboflow COCO), annotations/instances_*.json with images/ "
        f"(CVAT), images/ and labels/ with classes.txt (YOLO), Annotations/ with JPEGImages/ "
        f"(VOC devkit), or xml files beside their images (labelImg)")


def _yaml(path: Path, layout: str) -> Recognised:
    data = read_data_yaml(path)
    val = next((key for key in _VAL_NAMES if data.get(key) not in (None, "", [])), None)
    if val is not None and data[val] == data.get("train"):
        val = None  # one split named twice is one split
    test = "test" if data.get("test") not in (None, "", [], data.get("train")) else None
    notes = (f"{path}: {data['note']}",) if "note" in data else ()
    return Recognised(layout, "YOLO", {"data_yaml": str(path)}, data["names"], "train", val,
                      test, path, notes)


def _categories(annotation_file: Path) -> list[str]:
    try:
        content = json.loads(annotation_file.read_bytes())
        categories = sorted(content["categories"], key=lambda c: c["id"])
        return [str(c["name"]) for c in categories]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DatasetError(f"{annotation_file}: not a COCO json with categories ({err})") from None


def _coco(layout: str, source: Path, splits: dict[str, tuple[Path, Path]]) -> Recognised:
    """COCO settings of {split: (image folder, annotation file)}: the training split is `train`
    (or the only one), validation the first of val/valid/validation."""
    keys = list(splits)
    train = "train" if "train" in splits else keys[0]
    val = next((key for key in _VAL_NAMES if key in splits and key != train), None)
    test = "test" if "test" in splits and "test" != train else None
    names = _categories(splits[train][1])
    db = {"image_dirs": {k: str(images) for k, (images, _) in splits.items()},
          "annotation_files": {k: str(file) for k, (_, file) in splits.items()}}
    return Recognised(layout, "COCO", db, names, train, val, test, source)


def _roboflow_coco(path: Path, work: Path) -> Recognised | None:
    splits = {p.name: (p, p / _ROBOFLOW_COCO) for p in sorted(path.iterdir())
              if (p / _ROBOFLOW_COCO).is_file()}
    if (path / _ROBOFLOW_COCO).is_file():  # one split folder given itself
        splits = {"train": (path, path / _ROBOFLOW_COCO)}
    return _coco("a Roboflow COCO export", path, splits) if splits else None


def _cvat_coco(path: Path, work: Path) -> Recognised | None:
    files = sorted((path / "annotations").glob("instances_*.json"))
    if not files or not (path / "images").is_dir():
        return None
    splits = {}
    for file in files:
        subset = file.stem.removeprefix("instances_")
        places = [path / "images" / subset, path / "images"]
        splits[subset] = (_image_folder(file, places) or places[-1], file)
    return _coco("a CVAT COCO export", path, splits)


def _image_folder(annotation_file: Path, places: list[Path]) -> Path | None:
    """The first of `places` holding the first image the COCO file names."""
    try:
        first = json.loads(annotation_file.read_bytes())["images"][0]["file_name"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return next((p for p in places if (p / first).is_file()), None)


def _yolo_folders(path: Path, work: Path) -> Recognised | None:
    """images/ + labels/ without a data.yaml: a data.yaml is written into `work`, the classes
    from classes.txt (Label Studio, darknet) or obj.names."""
    if not ((path / "images").is_dir() and (path / "labels").is_dir()):
        return None
    lists = [p for p in (path / "classes.txt", path / "obj.names") if p.is_file()]
    if not lists:
        raise DatasetError(f"--data {path}: images/ and labels/ (YOLO) but no data.yaml or "
                           f"classes.txt naming the classes; write classes.txt there, one class "
                           f"name a line in the order of the class ids")
    names = [line.strip() for line in lists[0].read_text(encoding="utf-8-sig").splitlines()
             if line.strip()]
    subsets = [p.name for p in sorted((path / "images").iterdir()) if p.is_dir()]
    splits = {key: f"images/{key}" for key in subsets} or {"train": "images"}
    if "train" not in splits:
        raise DatasetError(f"--data {path}: images/ holds {', '.join(subsets)} but no train/")
    work.mkdir(parents=True, exist_ok=True)
    data_yaml = work / "data.yaml"
    data_yaml.write_text(json.dumps({"path": str(path), **splits, "names": names}, indent=1))
    found = _yaml(data_yaml, f"a YOLO folder with {lists[0].name} (no data.yaml)")
    return dataclasses.replace(found, source=path)


def _voc(path: Path, work: Path) -> Recognised | None:
    """A devkit, a folder holding one devkit (VOCdevkit/VOC2007), or split folders of xml."""
    roots = [path] + [p for p in sorted(path.iterdir()) if (p / "Annotations").is_dir()]
    root = next((p for p in roots if (p / "Annotations").is_dir()), None)
    if root is None:
        folders = [p.name for p in sorted(path.iterdir()) if p.is_dir() and any(p.glob("*.xml"))]
        if "train" not in folders:
            return None
        val = next((key for key in _VAL_NAMES if key in folders), None)
        return Recognised("a VOC export of split folders (Roboflow VOC)", "VOC",
                          {"voc_root": str(path)}, all_names(path), "train", val,
                          "test" if "test" in folders else None, path)
    train, val, test = _lists(root)
    return Recognised("a VOC devkit", "VOC", {"voc_root": str(root)}, all_names(root), train,
                      val, test, root)


def _lists(root: Path) -> tuple[str, str | None, str | None]:
    """(train, val, test) of the split lists in ImageSets/Main: train and val, trainval and
    test, or one list alone (val None)."""
    lists = {p.stem for p in (root / "ImageSets" / "Main").glob("*.txt") if "_" not in p.stem}
    if {"train", "val"} <= lists:
        return "train", "val", "test" if "test" in lists else None
    if {"trainval", "test"} <= lists:
        return "trainval", "test", None
    if len(lists) == 1:
        return lists.pop(), None, None
    raise DatasetError(f"--data {root}: VOC split lists {sorted(lists) or 'none'} in "
                       f"ImageSets/Main; expected train.txt and val.txt, trainval.txt and "
                       f"test.txt, or one list to split")


def _labelimg(path: Path, work: Path) -> Recognised | None:
    """xml files beside their images: the folder is the split of its parent (VOC's rule for a
    folder of xml without lists)."""
    if not any(path.glob("*.xml")):
        return None
    if (path / "ImageSets" / "Main").is_dir():  # labelImg with lists: a devkit's rules
        train, val, test = _lists(path)
        return Recognised("labelImg folders with split lists", "VOC", {"voc_root": str(path)},
                          all_names(path), train, val, test, path)
    names = all_names(path)
    return Recognised("labelImg folders (xml beside the images, no lists)", "VOC",
                      {"voc_root": str(path.parent), "names": names}, names, path.name, None,
                      None, path)


def _coco_file(path: Path, layout: str) -> Recognised:
    places = [path.parent, path.parent / "images", path.parent.parent / "images",
              path.parent.parent]
    found = _image_folder(path, places)
    if found is None:
        raise DatasetError(f"--data {path}: the first image this COCO json names is not in "
                           f"{', '.join(map(str, places))}; put the images beside it or in "
                           f"images/")
    return _coco(layout, path, {"train": (found, path)})


def _coco_in_folder(path: Path, work: Path) -> Recognised | None:
    files = [p for p in sorted(path.glob("*.json")) if p.name != "notes.json"]
    has_images = any(p.suffix.lower() in IMAGE_SUFFIXES for p in path.iterdir()) or \
        (path / "images").is_dir()
    if len(files) != 1 or not has_images:
        return None
    return _coco_file(files[0], "a folder with a COCO json")
