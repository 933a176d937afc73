"""Datasets held in another format (YOLO txt, Pascal VOC xml), read through the COCO code path.

A reader turns a split's label files into a COCO instances dict, the ground truth as COCO would
hold it: pixel boxes [x, y, w, h] with area w * h, `iscrowd` 1 for the regions to ignore (VOC's
`difficult`). That dict is written once under `<cache_dir>/dbs/`, keyed by the label files'
paths, sizes and mtimes, and then loaded exactly as a COCO file is: the same box rules (clipped
to the image, dropped when empty, counted and named), the same parse cache, the same evaluator
and per-class AP. The converted json is `annotation_file`, so analysis tools find it too.

A bad label file or line (too few numbers, a class beyond the names, a coordinate outside 0..1, a
missing xml field) is named with its file and line. It is left out and counted, one warning per
kind with the first example, or, under `system.strict_images`, refused with that line.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import cv2

from core.config import DatasetSettings
from core.utils.files import StorageError, write_file_atomic

from .coco import COCO
from .coco_parse import CLIPPED, dropped_why
from .detection import DatasetError

IMAGE_SUFFIXES = (".bmp", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")

# A clip by less is not said: it is the rounding of a 6-decimal YOLO line (0.01 pixel on an
# image of 10000), as coco2yolo writes them.
_SAID_PX = 0.01

# Part of the cache key: bump it when a reader's output changes.
_CONVERT_VERSION = 4  # 4: boxes clipped and said here; a split without label files said; VOC
                      # notes the images no xml names


class Problems:
    """Bad label lines and files, by kind: counted with the first example, or refused at once
    when `strict` (the error then names the file and line and says how to go on)."""

    def __init__(self, strict: bool, log: Callable[[str], None] | None = None) -> None:
        self.strict = strict
        self.log = log
        self.kinds: dict[str, list] = {}  # kind -> [count, first example]
        self.notes: dict[str, list] = {}
        self.warnings: list[str] = []

    def add(self, kind: str, where: str, detail: str) -> None:
        example = f"{where}: {detail}"
        if self.strict:
            raise DatasetError(f"{example} ({kind}); fix the file, or set system.strict_images "
                               f"to false to leave such entries out with a warning")
        entry = self.kinds.setdefault(kind, [0, example])
        entry[0] += 1

    def note(self, kind: str, where: str, detail: str) -> None:
        """Something read in another way than the file says (kept, never refused)."""
        entry = self.notes.setdefault(kind, [0, f"{where}: {detail}"])
        entry[0] += 1

    def warn(self, message: str) -> None:
        """Something about the whole split a person should know before training on it (no
        label files): said to `log` at once when there is one (a conversion's start), else kept
        with the messages (the loader says them, and its cache keeps them)."""
        if self.log is not None:
            self.log(f"warning: {message}")
        else:
            self.warnings.append(f"warning: {message}")

    def left_out(self) -> list[str]:
        """The messages of what was left out (what `strict` refuses)."""
        return [f"{kind}: {count} left out, e.g. {example}"
                for kind, (count, example) in self.kinds.items()]

    def messages(self) -> list[str]:
        """Every message: the warnings, what was left out, what was read in another way."""
        return (self.warnings + self.left_out() +
                [f"{kind}: {count}, e.g. {example}"
                 for kind, (count, example) in self.notes.items()])


def image_size(path: Path) -> tuple[int, int] | None:
    """(width, height) of a JPEG or PNG from its header, else by decoding; None if unreadable."""
    try:
        with open(path, "rb") as file:
            head = file.read(1 << 16)
            if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
                width, height = struct.unpack(">II", head[16:24])
                return int(width), int(height)
            if head[:2] == b"\xff\xd8":
                size = _jpeg_size(file, head)
                if size:
                    return size
    except OSError:
        return None
    image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    return None if image is None else (int(image.shape[1]), int(image.shape[0]))


def _jpeg_size(file: BinaryIO, head: bytes) -> tuple[int, int] | None:
    """Walk the JPEG segments to the first start-of-frame marker."""
    data, pos = head, 2
    while True:
        while len(data) < pos + 9:
            more = file.read(1 << 16)
            if not more:
                return None
            data += more
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        length = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[pos + 5:pos + 9])
            return (int(width), int(height)) if width and height else None
        pos += 2 + length


def files_key(*parts: object, files: list[Path] = ()) -> str:
    """A hash of `parts` and of every file's path, size and mtime (absent files count too)."""
    digest = hashlib.sha1(f"{_CONVERT_VERSION}|{json.dumps(parts, default=str)}".encode())
    for path in files:
        try:
            stat = path.stat()
            digest.update(f"|{path}|{stat.st_size}|{stat.st_mtime_ns}".encode())
        except OSError:
            digest.update(f"|{path}|-".encode())
    return digest.hexdigest()[:20]


def coco_dict(images: list[tuple[str, int, int]], boxes: list[list[tuple]],
              names: list[str], problems: Problems | None = None) -> dict:
    """A COCO instances dict: images [(file name, width, height)], per image boxes
    [(x1, y1, x2, y2, class index 0..C-1, crowd, source line)], category ids 1..C named
    `names`; each annotation's `source` names its label line in messages. The loader's rules
    are applied here, in its words, each change noted in `problems`: a box that reaches outside
    its image is clipped to it, one of zero size or wholly outside it is left out, so that a
    converted file holds exactly the boxes the loader keeps."""
    annotations = []
    for image_id, per_image in enumerate(boxes, start=1):
        width, height = images[image_id - 1][1:]
        for x1, y1, x2, y2, cls, crowd, source in per_image:
            written = f"[{x1:g}, {y1:g}, {x2:g}, {y2:g}] in the {width}x{height} image"
            why = dropped_why([x1, y1, x2, y2], width, height)
            if why:
                if problems is not None:
                    problems.note(f"boxes {why}", source, written)
                continue
            clipped = (max(x1, 0.0), max(y1, 0.0), min(x2, width), min(y2, height))
            moved = max(abs(a - b) for a, b in zip(clipped, (x1, y1, x2, y2)))
            if moved > _SAID_PX and problems is not None:
                problems.note(f"boxes {CLIPPED}", source, written)
            x1, y1, x2, y2 = clipped
            w, h = x2 - x1, y2 - y1
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": int(cls) + 1, "bbox": [x1, y1, w, h],
                                "area": w * h, "iscrowd": int(crowd), "source": source})
    return {"images": [{"id": k, "file_name": name, "width": width, "height": height}
                       for k, (name, width, height) in enumerate(images, start=1)],
            "categories": [{"id": k, "name": name} for k, name in enumerate(names, start=1)],
            "annotations": annotations}


class Converted(COCO):
    """Base of YOLO and VOC: subclasses give `_source(split, settings)` -> (image folder,
    cache key, where) and `_convert(split, settings, problems)` -> COCO instances dict."""

    def _load_split(self, split: str, settings: DatasetSettings | None) -> None:
        if settings is None:
            raise ValueError(f"{type(self).__name__}(split='{split}') needs settings (or "
                             f"sys_config)")
        image_dir, key, where = self._source(split, settings)
        cache_dir = settings.cache_dir / "dbs"
        stem = f"{type(self).__name__.lower()}-{split}-{key}"
        json_file, problems_file = cache_dir / f"{stem}.json", cache_dir / f"{stem}.problems"
        problems = Problems(settings.strict_images)
        try:
            said = json.loads(problems_file.read_text()) if json_file.is_file() else None
        except (OSError, ValueError):
            said = None
        if not (isinstance(said, dict) and isinstance(said.get("messages"), list) and
                isinstance(said.get("left_out"), list)):
            content = self._convert(split, settings, problems)
            said = {"messages": problems.messages(), "left_out": problems.left_out()}
            self._check_categories(len(content["categories"]), where)
            try:
                write_file_atomic(json_file, lambda file: file.write(
                    json.dumps(content).encode()))
                write_file_atomic(problems_file, lambda file: file.write(
                    json.dumps(said).encode()))
            except StorageError as err:
                raise DatasetError(f"cannot write the converted labels of {where} to the "
                                   f"dataset cache ({err}); set system.cache_dir to a writable "
                                   f"folder") from None
        elif said["left_out"] and problems.strict:  # converted by a run that was not strict
            raise DatasetError(f"{said['left_out'][0]}; fix the file, or set "
                               f"system.strict_images to false to leave such entries out with "
                               f"a warning")
        messages = said["messages"]
        for message in messages:
            self.log(message)
        self._load_problems = [message if message.startswith("warning: ") else  # named
                               f"{where}: {message}" for message in messages]
        self._load(image_dir, json_file, cache_dir, training=split == settings.train_split)

    def _check_categories(self, count: int, where: str) -> None:
        if count != self._configs["categories"]:
            raise DatasetError(f"db.categories is {self._configs['categories']} but {where} "
                               f"names {count} classes; set db.categories to {count}")

    def _source(self, split: str, settings: DatasetSettings) -> tuple[Path, str, str]:
        raise NotImplementedError

    def _convert(self, split: str, settings: DatasetSettings, problems: Problems) -> dict:
        raise NotImplementedError
