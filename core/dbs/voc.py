"""VOC: Pascal VOC xml annotations in a VOCdevkit-style folder.

    system.dataset: "VOC", db.voc_root: "path/to/VOC2012", db.names: ["aeroplane", ...]

Layouts, by the split's rule: a devkit (`Annotations/<id>.xml`, `JPEGImages/` holding the xml's
`filename`, `ImageSets/Main/<split>.txt` listing the ids of each split key); xml files beside
their images with `ImageSets/Main/<split>.txt` (labelImg's flat folder); or, without a list
file, every xml of the folder `<root>/<split>/` (Roboflow's VOC export: train/, valid/, test/).
Without either, the split is refused in one line saying which list file to create. An image of
another extension than its xml's `filename` says (a.png for a.jpg) is read and named.
Class names come from db.names in that order or, without it, sorted from all the xml
files of the layout (so every split has the same classes). Box corners are read as pixel edges
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
from core.config.db_keys import BUILTIN, DbKey

from .converted import IMAGE_SUFFIXES, Converted, Problems, coco_dict, files_key, image_size
from .detection import DatasetError

_BOX_FIELDS = ("xmin", "ymin", "xmax", "ymax")
_LINE = "__line__"


def annotation_folder(voc_root: Path) -> Path:
    """Annotations/ in a devkit; the root itself when the xml files lie beside the images."""
    return voc_root / "Annotations" if (voc_root / "Annotations").is_dir() else voc_root


def split_files(voc_root: Path, split: str) -> tuple[list[Path], Path | None]:
    """(the split's xml files, its list file or None) by the layout's rule: the ids of
    ImageSets/Main/<split>.txt in Annotations/ (or in the root, for xml beside the images);
    else every xml of the folder <root>/<split>/ (Roboflow's VOC export, labelImg's folders);
    else a one-line refusal saying which file or folder to make."""
    listing = voc_root / "ImageSets" / "Main" / f"{split}.txt"
    if listing.is_file():
        ids = [line.split()[0] for line in
               listing.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
        return [annotation_folder(voc_root) / f"{i}.xml" for i in ids], listing
    folder = voc_root / split
    if folder.is_dir() and any(folder.glob("*.xml")):
        return sorted(folder.glob("*.xml")), None
    if listing.parent.is_dir():
        found = sorted(p.stem for p in listing.parent.glob("*.txt") if "_" not in p.stem)
        raise ConfigError(f"split '{split}': {listing} not found (splits there: "
                          f"{', '.join(found) or 'none'}); name one in system.train_split, "
                          f"val_split or test_split")
    folders = sorted(p.name for p in voc_root.iterdir() if p.is_dir() and any(p.glob("*.xml")))
    raise ConfigError(f"split '{split}': {voc_root} has no ImageSets/Main/{split}.txt and no "
                      f"folder {split}/ of xml files (folders of xml there: "
                      f"{', '.join(folders) or 'none'}); create ImageSets/Main/{split}.txt "
                      f"listing the split's xml names without .xml, one a line, or name one "
                      f"of those folders in system.train_split, val_split or test_split")


def image_file(voc_root: Path, xml_file: Path, filename: str | None,
               problems: Problems) -> Path | None:
    """The image of an xml: its `filename` (a path in it reduced to the name) in JPEGImages/
    of a devkit, else beside the xml; a file of the same stem and another image extension is
    taken and named; None (counted) when there is none."""
    folder = voc_root / "JPEGImages" if xml_file.parent.name == "Annotations" else xml_file.parent
    name = (filename or "").replace("\\", "/").rsplit("/", 1)[-1] or f"{xml_file.stem}.jpg"
    for stem in dict.fromkeys((Path(name).stem, xml_file.stem)):
        if (folder / f"{stem}{Path(name).suffix}").is_file():
            return folder / f"{stem}{Path(name).suffix}"
        suffixes = IMAGE_SUFFIXES + tuple(suffix.upper() for suffix in IMAGE_SUFFIXES)
        others = [folder / f"{stem}{suffix}" for suffix in suffixes
                  if (folder / f"{stem}{suffix}").is_file()]
        if len(others) > 1:  # images of one stem: whose the boxes are, only the name says
            raise DatasetError(f"{xml_file}: <filename> {name} is not in {folder}, and the "
                               f"images of its stem are {len(others)} ({others[0].name} and "
                               f"{others[1].name}): which one the boxes belong to is unknown; "
                               f"write the image's whole name in <filename>")
        if others:
            problems.note("images read under another extension than their xml's filename",
                          str(xml_file), f"<filename> says {name}, read {others[0].name}")
            return others[0]
    problems.add("images not found", str(xml_file),
                 f"<filename> {name} is not in {folder} (nor {Path(name).stem} with another "
                 f"image extension)")
    return None


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


def all_xml(voc_root: Path) -> list[Path]:
    """Every xml file of the layout: Annotations/, or the root and its folders."""
    folder = annotation_folder(voc_root)
    if folder != voc_root:
        return sorted(folder.glob("*.xml"))
    return sorted(voc_root.glob("*.xml")) + sorted(voc_root.glob("*/*.xml"))


def all_names(voc_root: Path) -> list[str]:
    """The class names of every annotation file under `voc_root`, sorted (so that every split
    gets the same classes in the same order)."""
    found = set()
    for xml_file in all_xml(voc_root):
        content = read_xml(xml_file, Problems(strict=False))
        found |= {obj[0] for obj in content[2]} if content else set()
    if not found:
        raise DatasetError(f"{voc_root}: no xml objects to take class names from; "
                           f"list them in db.names")
    return sorted(found)


def read_split(voc_root: Path, split: str, names: list[str] | None,
               problems: Problems) -> tuple[Path, dict]:
    """(image root, COCO instances dict) of one split of a VOC folder."""
    xml_files, listing = split_files(voc_root, split)
    known = names or all_names(voc_root)
    index = {name: k for k, name in enumerate(known)}
    images, boxes = [], []
    named_by: dict[Path, Path] = {}
    for xml_file in xml_files:
        if not xml_file.is_file():
            problems.add("images without an annotation file", str(xml_file),
                         f"listed in {listing} but not found")
            continue
        content = read_xml(xml_file, problems)
        image = None if content is None else image_file(voc_root, xml_file, content[0], problems)
        if image is None:
            continue
        if named_by.get(image) == xml_file:  # listed twice in the list file: read once
            continue
        if image in named_by:  # keyed by the whole image name: one xml an image
            raise DatasetError(f"{xml_file} and {named_by[image]} both annotate {image}; "
                               f"merge them into one, or correct the <filename> of the other")
        named_by[image] = xml_file
        _, declared, objects = content
        size = image_size(image)
        if size is None and min(declared) <= 0:
            problems.add("unreadable images", str(image),
                         "its xml gives no size and the image cannot be read")
            continue
        if size is not None and min(declared) > 0 and size != declared:
            problems.note("image sizes the xml contradicts", str(xml_file),
                          f"<size> says {declared[0]}x{declared[1]} but {image.name} is "
                          f"{size[0]}x{size[1]}: the image's size is used and the boxes are "
                          f"clipped to it; check that they were drawn on this image")
        width, height = size or declared
        rows = []
        for name, x1, y1, x2, y2, difficult, where in objects:
            if name not in index:
                problems.add("objects of a class not in db.names", where,
                             f"class '{name}' is not one of db.names")
                continue
            rows.append((x1, y1, x2, y2, index[name], difficult, where))
        images.append((image.relative_to(voc_root).as_posix(), width, height))
        boxes.append(rows)
    count_unnamed(voc_root, xml_files, problems)
    return voc_root, coco_dict(images, boxes, known, problems)


def count_unnamed(voc_root: Path, xml_files: list[Path], problems: Problems) -> None:
    """Note the images in the folders of this split's images (of `xml_files`) that no xml file
    of the layout names: labelImg leaves an image it was not given boxes for without one, and
    such an image is in no split, said nowhere else."""
    quiet = Problems(strict=False)
    folders = {voc_root / "JPEGImages" if xml.parent.name == "Annotations" else xml.parent
               for xml in xml_files}
    named = set()
    for xml_file in all_xml(voc_root):
        content = read_xml(xml_file, quiet)
        image = image_file(voc_root, xml_file, content[0], quiet) if content else None
        named.add(image)
    for folder in sorted(folders):
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            if path.suffix.lower() in IMAGE_SUFFIXES and path not in named:
                problems.note("images that no xml file names (in no split, not used)",
                              str(path), "no annotation file names it")


class VOC(Converted):
    """A Pascal VOC dataset; see the module docstring and DETECTION for the interface."""

    # The VOCdevkit-style folder (a path) and, optionally, the class names in order.
    db_keys: ClassVar[dict[str, DbKey]] = BUILTIN["VOC"]

    def _root(self, settings: DatasetSettings) -> Path:
        if self._configs["voc_root"] is None:
            raise ConfigError("system.dataset 'VOC' needs db.voc_root: the folder holding "
                              "Annotations/ and JPEGImages/ (a devkit), or the xml files "
                              "beside the images")
        root = settings.resolve(self._configs["voc_root"])
        if not root.is_dir():
            raise FileNotFoundError(f"db.voc_root {root} is not a folder")
        return root

    def _source(self, split: str, settings: DatasetSettings) -> tuple[Path, str, str]:
        root = self._root(settings)
        xml_files, listing = split_files(root, split)
        if not self._configs["names"]:
            xml_files = all_xml(root)
        key = files_key(str(root), split, self._configs["names"],
                        files=[p for p in (listing,) if p] + xml_files)
        where = "db.names" if self._configs["names"] else str(root)
        return root, key, where

    def _convert(self, split: str, settings: DatasetSettings, problems: Problems) -> dict:
        return read_split(self._root(settings), split, self._configs["names"], problems)[1]
