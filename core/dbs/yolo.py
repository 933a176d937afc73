"""YOLO: images and txt labels in the layout Ultralytics reads and writes, named by a data.yaml.

    system.dataset: "YOLO", db.data_yaml: "path/to/data.yaml"

data.yaml, read by PyYAML's safe loader: `path` (the dataset root; relative to the
data.yaml's folder, which it defaults to), one key per split (the config's train_split,
val_split, test_split) naming an images folder (searched recursively), a .txt list of image
paths, or a list of these, relative to `path` (a `../x` that is not there is read as `x`, as
Ultralytics reads Roboflow's exports); `names` as a list or an index map {0: name}; `nc`, if
given, must agree; other keys (`roboflow:`, `download:`) are ignored. Each image's labels are
in the parallel labels folder (the last `/images/` of its path replaced by `/labels/`, the
extension by `.txt`): one object a line, `class cx cy w h` normalised to 0..1 (a polygon
`class x1 y1 x2 y2 ...` counts as its enclosing box). An image without a label file has no
objects. Class k is category id k + 1 in the converted COCO ground truth.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import ClassVar

import yaml

from core.config import ConfigError, DatasetSettings
from core.config.db_keys import BUILTIN, DbKey

from .converted import IMAGE_SUFFIXES, Converted, Problems, coco_dict, files_key, image_size
from .detection import DatasetError

_NOT_SPLITS = ("path", "names", "nc", "download", "root", "roboflow", "yaml_file", "note")
_WINDOWS = re.compile(r"^([A-Za-z]:[\\/]|\\\\)")
# More values than a data.yaml of 100,000 classes holds: a YAML alias bomb is refused unread.
MAX_VALUES = 1_000_000


def _load_yaml(path: Path) -> dict:
    """The top-level map of a data.yaml by PyYAML's safe loader (a byte-order mark, CRLF line
    ends, comments and lists wrapped over lines are YAML's own); errors name the file and line."""
    try:
        content = yaml.safe_load(path.read_bytes())
    except OSError as err:
        raise DatasetError(f"cannot read db.data_yaml {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise DatasetError(f"{where}: not valid YAML ({what}); fix that line") from None
    if not isinstance(content, dict):
        raise DatasetError(f"{path}: expected a map of keys (path, train, val, names, ...), "
                           f"got {type(content).__name__}")
    if _expanded_size(content, {}) > MAX_VALUES:
        raise DatasetError(f"{path}: expands to more than {MAX_VALUES} values through YAML "
                           f"aliases (*name); a data.yaml lists its splits and names plainly")
    return {str(key): value for key, value in content.items()}


def _expanded_size(value: object, sizes: dict[int, int]) -> int:
    """How many values `value` holds once every alias is written out; counted once per
    object (`sizes`), so nested aliases cost nothing to count, however much they expand."""
    if not isinstance(value, (dict, list)):
        return 1
    if id(value) not in sizes:
        sizes[id(value)] = 0  # a recursive alias is counted once
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        sizes[id(value)] = 1 + sum(_expanded_size(item, sizes) for item in items)
    return sizes[id(value)]


def _names(content: dict, path: Path) -> list[str]:
    """`names` as a flat list, or an index map 0..C-1 (keys written '0' count as 0), checked
    against `nc` when given."""
    names = content.get("names")
    if isinstance(names, dict):
        keys = [_class_index(k) for k in names]
        if None in keys or sorted(keys) != list(range(len(names))):
            raise DatasetError(f"{path}: names as a map must have the keys 0..{len(names) - 1}, "
                               f"one each, got {', '.join(repr(k) for k in list(names)[:6])}"
                               f"{' ...' if len(names) > 6 else ''}")
        names = [value for _, value in sorted(zip(keys, names.values()))]
    if not isinstance(names, list) or not names:
        raise DatasetError(f"{path}: 'names' must list the class names (a list, or a map "
                           f"0: name, 1: name, ...), got {_what(names)}")
    nested = next((k for k, name in enumerate(names) if isinstance(name, (list, dict))), None)
    if nested is not None:
        raise DatasetError(f"{path}: names: item {nested} is {_what(names[nested])}, not a "
                           f"name; names is a flat list of the class names")
    odd = next((k for k, name in enumerate(names) if name is None or isinstance(name, bool)),
               None)
    if odd is not None:
        raise DatasetError(f"{path}: names: item {odd} reads as YAML's {names[odd]!r} (an "
                           f"unquoted yes, no, on, off, true, false, null or ~); quote it")
    names = [str(name) for name in names]
    nc = content.get("nc")
    if nc is not None and (isinstance(nc, bool) or not isinstance(nc, int)):
        raise DatasetError(f"{path}: nc is {nc!r}, {_what(nc)}, not a number; write nc: "
                           f"{len(names)} unquoted, or leave nc out (names gives the count)")
    if nc is not None and nc != len(names):
        raise DatasetError(f"{path}: nc is {nc} but names lists {len(names)} classes; make "
                           f"them agree")
    return names


def _class_index(key: object) -> int | None:
    """A names map's key as a class index: 3, or '3' as YAML reads a quoted key; else None."""
    if isinstance(key, str) and key.isdigit() and str(int(key)) == key:
        return int(key)
    return key if isinstance(key, int) and not isinstance(key, bool) else None


def _what(value: object) -> str:
    """`value`'s kind for a message, never its whole text (an alias may make it huge)."""
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'map'} of {len(value)}"
    return f"a {type(value).__name__}" if value is not None else "nothing"


def windows_path(value: object) -> bool:
    """Whether `value` is a Windows drive or UNC path (C:/..., C:\\..., \\\\server\\...) on a
    machine that is not Windows."""
    return isinstance(value, str) and bool(_WINDOWS.match(value)) and os.name != "nt"


def read_data_yaml(path: Path) -> dict:
    """The data.yaml at `path` with `root` (Path) and `names` (list of str) resolved: `path:`
    taken from the yaml's folder when relative; the yaml's folder without it."""
    content = _load_yaml(path)
    names = _names(content, path)
    root = content.get("path")
    if windows_path(root):
        # written on Windows (Label Studio, a user's yaml): the splits may sit beside the yaml
        beside = {**content, "root": _absolute(path.parent), "names": names}
        if not _splits_there(beside, path):
            raise DatasetError(f"{path}: path: {root!r} is a Windows drive path, not a folder "
                               f"on this machine; write the dataset's folder there (relative "
                               f"to {path.parent}), or delete the path: line to use that folder")
        return {**beside, "note": f"path: {root!r} is a Windows drive path, not a folder on "
                                  f"this machine; the splits were read beside the yaml, from "
                                  f"{path.parent}"}
    root = _absolute(path.parent if root in (None, "") else path.parent / str(root))
    return {**content, "root": root, "names": names}


def _splits_there(data: dict, path: Path) -> bool:
    """Whether every split of `data` is found from its root."""
    splits = [key for key in data if key not in _NOT_SPLITS]
    try:
        for split in splits:
            entries = data[split]
            for entry in entries if isinstance(entries, list) else [entries]:
                split_path(data, split, entry, path)
    except DatasetError:
        return False
    return bool(splits)


def _absolute(path: Path) -> Path:
    """`path` made absolute with '..' and '.' removed but links kept, so that a linked image
    keeps its place beside its labels (resolve() would follow the link away from them)."""
    return Path(os.path.normpath(path.absolute()))


def label_path(image: Path) -> Path:
    """Ultralytics' rule: the last `/images/` of the path becomes `/labels/`, suffix `.txt`."""
    parts = list(image.parts)
    for k in range(len(parts) - 2, -1, -1):
        if parts[k] == "images":
            parts[k] = "labels"
            break
    return Path(*parts).with_suffix(".txt")


def split_images(data: dict, split: str, data_yaml: Path) -> list[Path]:
    """The image paths of `split` in order: a folder's sorted, a list file's as listed."""
    if split not in data:
        splits = [key for key in data if key not in _NOT_SPLITS]
        raise ConfigError(f"split '{split}' is not a key of {data_yaml} (its splits: "
                          f"{', '.join(splits) or 'none'}); name one in system.train_split, "
                          f"val_split or test_split")
    entries = data[split]
    if entries is None or entries == []:
        raise DatasetError(f"{data_yaml}: {split}: names no images; name an images folder or "
                           f"a .txt list of images there")
    images: list[Path] = []
    for entry in entries if isinstance(entries, list) else [entries]:
        where = split_path(data, split, entry, data_yaml)
        if where.is_dir():
            images += sorted(p for p in where.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
            continue
        for line in where.read_text(encoding="utf-8-sig", errors="replace").splitlines():
            if line.strip():
                images.append(_absolute(where.parent / line.strip()))
    return images


def split_path(data: dict, split: str, entry: object, data_yaml: Path) -> Path:
    """The folder or list file that one entry of a split names, taken from the root (`path:`);
    when `../x` is not there, `x` from the root, as Ultralytics falls back (Roboflow's exports
    say `train: ../train/images` beside a data.yaml in the dataset's own folder)."""
    if windows_path(entry):
        raise DatasetError(f"{data_yaml}: {split}: {entry!r} is a Windows drive path, not a "
                           f"folder on this machine; write it relative to the root "
                           f"{data['root']} (path:, else the yaml's folder)")
    text = str(entry).replace("\\", "/")
    where = _absolute(data["root"] / text)
    if not where.exists() and text.startswith("../"):
        fallback = _absolute(data["root"] / text[3:])
        where = fallback if fallback.exists() else where
    if where.is_dir() or (where.is_file() and where.suffix.lower() == ".txt"):
        return where
    said = f"path: {data['path']}" if data.get("path") not in (None, "") else "no path: key"
    raise DatasetError(f"{data_yaml}: {split}: {entry!r} is {where}, neither an images folder "
                       f"nor a .txt list of images (the root is {data['root']}, from {said}); "
                       f"write the folder there relative to the root")


def parse_label_line(line: str, where: str, num_classes: int, problems: Problems,
                     width: int, height: int) -> tuple | None:
    """One `class cx cy w h` line as (x1, y1, x2, y2, class, 0, where) in pixels, or None."""
    fields = line.split()
    if len(fields) < 5 or (len(fields) > 5 and (len(fields) < 7 or len(fields) % 2 == 0)):
        problems.add("malformed label lines", where,
                     f"expected 5 numbers 'class cx cy w h' (or a class and polygon x y pairs), "
                     f"got {len(fields)}: {line.strip()!r}")
        return None
    try:
        numbers = [float(field) for field in fields]
    except ValueError:
        problems.add("malformed label lines", where, f"not numbers: {line.strip()!r}")
        return None
    cls = numbers[0]
    if cls != int(cls) or not 0 <= cls < num_classes:
        problems.add("class ids beyond the names", where,
                     f"class id {fields[0]} is not one of 0..{num_classes - 1} (the names)")
        return None
    outside = [v for v in numbers[1:] if not 0.0 <= v <= 1.0]
    if outside:
        problems.add("coordinates outside 0..1", where,
                     f"coordinate {outside[0]:g} is outside 0..1 (normalised cx cy w h "
                     f"expected): {line.strip()!r}")
        return None
    if len(numbers) == 5:
        cx, cy, w, h = numbers[1:]
        return ((cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width,
                (cy + h / 2) * height, int(cls), 0, where)
    xs, ys = numbers[1::2], numbers[2::2]
    return (min(xs) * width, min(ys) * height, max(xs) * width, max(ys) * height, int(cls), 0,
            where)


def _check_label_files(images: list[Path], split: str, data_yaml: Path,
                       problems: Problems) -> None:
    """Each label file serves one image: two images of one stem (`a.jpg`, `a.png`) would both
    take `a.txt`, so the split is refused naming both. A split where most images have no label
    file (a lost or misplaced labels/ folder) is warned before anything else is read."""
    by_label: dict[Path, list[Path]] = {}
    for image in dict.fromkeys(images):
        by_label.setdefault(label_path(image), []).append(image)
    shared = [(label, group) for label, group in by_label.items()
              if len(group) > 1 and label.is_file()]
    if shared:
        label, group = shared[0]
        raise DatasetError(f"{data_yaml}: split '{split}': {len(shared)} label file(s) would "
                           f"serve two images, e.g. {group[0]} and {group[1]} both take "
                           f"{label} (the label rule drops the extension); rename all but one "
                           f"of them and give each its own label file")
    found = sum(label.is_file() for label in by_label)
    if images and found * 2 < len(by_label):
        expected = next(label for label in by_label if not label.is_file())
        said = ("no label file for any" if not found else
                f"label files for only {found}")
        problems.warn(f"{data_yaml}: split '{split}': {said} of its {len(by_label)} images "
                      f"(e.g. {expected} is missing): an image without one counts as a "
                      f"background image, with no objects; labels belong in the labels/ "
                      f"folder beside images/ (.../images/a.jpg -> .../labels/a.txt)")


def read_split(data_yaml: Path, split: str, problems: Problems) -> tuple[Path, dict]:
    """(image root, COCO instances dict) of one split of a YOLO dataset."""
    data = read_data_yaml(data_yaml)
    if "note" in data:
        problems.note("a Windows path: read beside the yaml", str(data_yaml), data["note"])
    root, names = data["root"], data["names"]
    images, boxes = [], []
    listed = split_images(data, split, data_yaml)
    _check_label_files(listed, split, data_yaml, problems)
    for image in listed:
        size = image_size(image)
        if size is None:
            problems.add("unreadable images", str(image), "cannot read its size (missing, "
                         "truncated or not an image)")
            continue
        labels = label_path(image)
        rows = []
        if labels.is_file():
            try:
                text = labels.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                problems.add("unreadable label files", str(labels), str(err))
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                if line.strip():
                    row = parse_label_line(line, f"{labels}:{number}", len(names), problems,
                                           *size)
                    if row is not None:
                        rows.append(row)
        name = image.relative_to(root) if image.is_relative_to(root) else image
        images.append((str(name), *size))
        boxes.append(rows)
    return root, coco_dict(images, boxes, names, problems)


class YOLO(Converted):
    """A YOLO-format dataset; see the module docstring and DETECTION for the interface."""

    # The path of the data.yaml naming the splits and the class names.
    db_keys: ClassVar[dict[str, DbKey]] = BUILTIN["YOLO"]

    def _data_yaml(self, settings: DatasetSettings) -> Path:
        if self._configs["data_yaml"] is None:
            raise ConfigError("system.dataset 'YOLO' needs db.data_yaml: the path of the "
                              "dataset's data.yaml")
        path = settings.resolve(self._configs["data_yaml"])
        if not path.is_file():
            raise FileNotFoundError(f"db.data_yaml not found: {path}")
        return path

    def _source(self, split: str, settings: DatasetSettings) -> tuple[Path, str, str]:
        data_yaml = self._data_yaml(settings)
        data = read_data_yaml(data_yaml)
        images = split_images(data, split, data_yaml)
        key = files_key(str(data_yaml), data_yaml.read_text(encoding="utf-8"), split,
                        files=[p for image in images for p in (image, label_path(image))])
        return data["root"], key, str(data_yaml)

    def _convert(self, split: str, settings: DatasetSettings, problems: Problems) -> dict:
        return read_split(self._data_yaml(settings), split, problems)[1]

    def label_file(self, ind: int) -> Path:
        """The label file the image `ind` is read with (it may be absent: no objects)."""
        return label_path(Path(self.image_path(ind)))
