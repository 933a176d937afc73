"""VOC: Pascal VOC xml annotations in a VOCdevkit-style folder.

    system.dataset: "VOC", db.voc_root: "path/to/VOC2012", db.names: ["aeroplane", ...]

Layout: `Annotations/<id>.xml`, `JPEGImages/<id>.jpg` (or the xml's `filename`), and
`ImageSets/Main/<split>.txt` listing the ids of each split key (train, val, trainval, test).
Class names come from db.names in that order or, without it, sorted from all the files in
Annotations/ (so every split has the same classes). Box corners are read as pixel edges
([xmin, xmax] spans xmax - xmin pixels), as labelImg, CVAT and mmdetection read them. A `difficult`
object is treated as COCO treats a crowd region: no training target, and detections on it are
neither counted right nor wrong.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import ClassVar
from xml.parsers import expat

from core.config import ConfigError, DatasetSettings
from core.config.db_keys import DbKey

from .converted import Converted, Problems, coco_dict, files_key, image_size
from .detection import DatasetError

_BOX_FIELDS = ("xmin", "ymin", "xmax", "ymax")
_LINE = "__line__"


def split_ids(voc_root: Path, split: str) -> list[str]:
    listing = voc_root / "ImageSets" / "Main" / f"{split}.txt"
    if not listing.is_file():
        found = sorted(p.stem for p in (voc_root / "ImageSets" / "Main").glob("*.txt")
                       if "_" not in p.stem)
        raise ConfigError(f"split '{split}': {listing} not found (splits there: "
                          f"{', '.join(found) or 'none'}); name one in system.train_split, "
                          f"val_split or test_split")
    return [line.split()[0] for line in listing.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _field(node: ET.Element, name: str, where: str) -> str:
    found = node.find(name)
    if found is None or found.text is None or not found.text.strip():
        raise KeyError(f"{where}: missing field <{name}>")
    return found.text.strip()


def _line(element: ET.Element) -> str:
    """The source line of an element, as `_parse_with_lines` noted it."""
    return element.get(_LINE, "?")


def read_xml(xml_file: Path, problems: Problems) -> tuple[str, tuple[int, int], list] | None:
    """(image file name, (width, height), [(name, x1, y1, x2, y2, difficult, line)]) or None."""
    try:
        root = _parse_with_lines(xml_file)
    except expat.ExpatError as err:
        problems.add("unreadable annotation files", f"{xml_file}:{err.lineno}",
                     f"malformed XML: {expat.errors.messages[err.code]}")
        return None
    except OSError as err:
        problems.add("unreadable annotation files", str(xml_file), err.strerror or str(err))
        return None
    try:
        size = root.find("size")
        if size is None:
            raise KeyError(f"{xml_file}:{_line(root)}: missing field <size>")
        where = f"{xml_file}:{_line(size)}"
        width, height = (int(float(_field(size, key, where))) for key in ("width", "height"))
    except (KeyError, ValueError) as err:
        problems.add("malformed annotation files", str(err).strip("'"), "image size unknown")
        return None
    objects = []
    for node in root.findall("object"):
        where = f"{xml_file}:{_line(node)}"
        try:
            name = _field(node, "name", where)
            box = node.find("bndbox")
            if box is None:
                raise KeyError(f"{where}: missing field <bndbox>")
            x1, y1, x2, y2 = (float(_field(box, key, f"{xml_file}:{_line(box)}"))
                              for key in _BOX_FIELDS)
            difficult = node.find("difficult")
            flag = difficult is not None and (difficult.text or "0").strip() not in ("0", "")
        except KeyError as err:
            problems.add("objects with a missing field", str(err).strip("'").split(": ")[0],
                         str(err).strip("'").split(": ", 1)[1])
            continue
        except ValueError as err:
            problems.add("objects with a non-number coordinate", where, str(err))
            continue
        objects.append((name, x1, y1, x2, y2, flag, where))
    filename = root.findtext("filename")
    return (filename.strip() if filename and filename.strip() else None), (width, height), objects


def _parse_with_lines(xml_file: Path) -> ET.Element:
    """The xml tree, each element's start line in its attribute `_LINE` (ElementTree's own
    parser keeps none)."""
    parser = expat.ParserCreate()
    stack: list[ET.Element] = []
    root: list[ET.Element] = []

    def start(tag: str, attrs: dict) -> None:
        attrs = {**attrs, _LINE: str(parser.CurrentLineNumber)}
        element = ET.SubElement(stack[-1], tag, attrs) if stack else ET.Element(tag, attrs)
        element.text = ""
        stack.append(element)
        root[:] = root or [element]

    def end(tag: str) -> None:
        stack.pop()

    def text(data: str) -> None:
        if stack:
            stack[-1].text += data

    parser.StartElementHandler, parser.EndElementHandler = start, end
    parser.CharacterDataHandler = text
    with open(xml_file, "rb") as file:
        parser.ParseFile(file)
    return root[0]


def all_names(voc_root: Path) -> list[str]:
    """The class names of every annotation file under `voc_root`, sorted (so that every split
    gets the same classes in the same order)."""
    found = set()
    for xml_file in sorted((voc_root / "Annotations").glob("*.xml")):
        content = read_xml(xml_file, Problems(strict=False))
        found |= {obj[0] for obj in content[2]} if content else set()
    if not found:
        raise DatasetError(f"{voc_root}/Annotations: no objects to take class names from; "
                           f"list them in db.names")
    return sorted(found)


def read_split(voc_root: Path, split: str, names: list[str] | None,
               problems: Problems) -> tuple[Path, dict]:
    """(image root, COCO instances dict) of one split of a VOC folder."""
    parsed = []
    for image_id in split_ids(voc_root, split):
        xml_file = voc_root / "Annotations" / f"{image_id}.xml"
        if not xml_file.is_file():
            problems.add("images without an annotation file", str(xml_file),
                         f"listed in ImageSets/Main/{split}.txt but not found")
            continue
        content = read_xml(xml_file, problems)
        if content is not None:
            parsed.append((image_id, *content))
    known = names or all_names(voc_root)
    index = {name: k for k, name in enumerate(known)}
    images, boxes = [], []
    for image_id, filename, (width, height), objects in parsed:
        file_name = f"JPEGImages/{filename or image_id + '.jpg'}"
        if not (voc_root / file_name).is_file() and (voc_root / f"JPEGImages/{image_id}.jpg"
                                                     ).is_file():
            file_name = f"JPEGImages/{image_id}.jpg"
        if width <= 0 or height <= 0:
            size = image_size(voc_root / file_name)
            if size is None:
                problems.add("unreadable images", str(voc_root / file_name),
                             "its xml gives no size and the image cannot be read")
                continue
            width, height = size
        rows = []
        for name, x1, y1, x2, y2, difficult, where in objects:
            if name not in index:
                problems.add("objects of a class not in db.names", where,
                             f"class '{name}' is not one of db.names")
                continue
            rows.append((x1, y1, x2, y2, index[name], difficult, where))
        images.append((file_name, width, height))
        boxes.append(rows)
    return voc_root, coco_dict(images, boxes, known)


class VOC(Converted):
    """A Pascal VOC dataset; see the module docstring and DETECTION for the interface."""

    # The VOCdevkit-style folder (a path) and, optionally, the class names in order.
    db_keys: ClassVar[dict[str, DbKey]] = {"voc_root": DbKey(None, (str,), path=True),
                                           "names": DbKey(None, (list,))}

    def _root(self, settings: DatasetSettings) -> Path:
        if self._configs["voc_root"] is None:
            raise ConfigError("system.dataset 'VOC' needs db.voc_root: the folder holding "
                              "Annotations/, JPEGImages/ and ImageSets/Main/")
        root = settings.resolve(self._configs["voc_root"])
        if not (root / "Annotations").is_dir():
            raise FileNotFoundError(f"db.voc_root {root} has no Annotations folder")
        return root

    def _source(self, split: str, settings: DatasetSettings) -> tuple[Path, str, str]:
        root = self._root(settings)
        ids = split_ids(root, split)
        xml_files = ([root / "Annotations" / f"{i}.xml" for i in ids] if self._configs["names"]
                     else sorted((root / "Annotations").glob("*.xml")))
        key = files_key(str(root), split, self._configs["names"],
                        files=[root / "ImageSets" / "Main" / f"{split}.txt", *xml_files])
        where = "db.names" if self._configs["names"] else f"{root}/Annotations"
        return root, key, where

    def _convert(self, split: str, settings: DatasetSettings, problems: Problems) -> dict:
        return read_split(self._root(settings), split, self._configs["names"], problems)[1]
