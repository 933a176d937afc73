"""Convert detection labels between YOLO txt, Pascal VOC xml and COCO json.

    cornernet convert yolo2coco <data.yaml> <split> <out.json>
    cornernet convert voc2coco <voc_root> <split> <out.json> [--names a b ...]
    cornernet convert coco2yolo <instances.json> <image folder> <out folder> [--split S]

The readers and writers are core/dbs/ (yolo.py, voc.py, convert.py): the same rules, the same
messages for bad lines; a box the loader would drop is dropped here too, counted in its words.
COCO json gets category ids 1..C in the order of the names, boxes in pixels, VOC's `difficult` as
iscrowd 1; the image folder to set as db.image_dirs is printed. YOLO gets <out>/images/<split>/
(links, or copies with --copy; refused when an image is missing), <out>/labels/<split>/ with
`class cx cy w h` to 6 decimals, and <out>/data.yaml with the names in id order and no `path:`
(the root is its own folder). YOLO has no crowd regions: they are left out and counted.

An output is written whole or not at all (a temporary name beside it, renamed into place; a
stop removes it and says so). An output that exists (a json, or the split in a YOLO folder) is
refused unless --exist-ok, and then replaced whole; an output that is an input is refused.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from core.config.options import DebugOptions
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError
from core.utils.options import option

from ..options import parse_one_of

# The readers and writers (core.dbs, and cv2 with it) are imported by `run`, so that --help
# imports neither (cornernet/commands/__init__.py).

PROG = "cornernet convert"


EXIST_OK = ("replace an earlier conversion's output (the json, or the split in the YOLO "
            "folder) whole")


@dataclasses.dataclass(frozen=True, kw_only=True)
class YoloToCoco(DebugOptions):
    """`cornernet convert yolo2coco`: a YOLO split to a COCO instances json."""

    command: ClassVar[str] = "yolo2coco"
    data_yaml: Path = option(parse=Path, help="the YOLO dataset's data.yaml")
    split: str = option(help="the split's key in data.yaml (train, val, ...)")
    out: Path = option(parse=Path, help="the COCO json to write")
    exist_ok: bool = option(False, "--exist-ok", help=EXIST_OK)


@dataclasses.dataclass(frozen=True, kw_only=True)
class VocToCoco(DebugOptions):
    """`cornernet convert voc2coco`: a VOC split to a COCO instances json."""

    command: ClassVar[str] = "voc2coco"
    voc_root: Path = option(parse=Path, help="the VOC folder (Annotations/, ImageSets/, ...)")
    split: str = option(help="the split (ImageSets/Main/<split>.txt, or a folder <split>/)")
    out: Path = option(parse=Path, help="the COCO json to write")
    names: tuple[str, ...] | None = option(
        None, "--names", nargs="+", help="class names in order (default: sorted from "
                                         "Annotations/)")
    exist_ok: bool = option(False, "--exist-ok", help=EXIST_OK)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CocoToYolo(DebugOptions):
    """`cornernet convert coco2yolo`: a COCO instances json to a YOLO folder."""

    command: ClassVar[str] = "coco2yolo"
    annotations: Path = option(parse=Path, help="the COCO instances json")
    images: Path = option(parse=Path, help="the folder the json's file names are in")
    out: Path = option(parse=Path, help="the YOLO folder to write")
    split: str = option("train", "--split", help="the split's name in data.yaml")
    copy: bool = option(False, "--copy", help="copy the images instead of linking")
    exist_ok: bool = option(False, "--exist-ok", help=EXIST_OK)


ConvertOptions = YoloToCoco | VocToCoco | CocoToYolo
# The subcommands: {word: (options, help)}.
CONVERSIONS = {cls.command: (cls, help) for cls, help in (
    (YoloToCoco, "a YOLO split to a COCO instances json"),
    (VocToCoco, "a VOC split to a COCO instances json"),
    (CocoToYolo, "a COCO instances json to a YOLO folder"))}


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> ConvertOptions:
    return parse_one_of(CONVERSIONS, argv, prog or PROG,
                        "Convert YOLO / VOC / COCO detection labels")


def check_out(options: ConvertOptions) -> None:
    """The output is of the kind the conversion writes (a json file, a YOLO folder): a
    UsageError in one line before anything is read."""
    if options.command != "coco2yolo" and options.out.is_dir():
        raise UsageError(f"{options.out} is a folder; {options.command} writes one COCO json "
                         f"file: name it, e.g. {options.out / f'instances_{options.split}.json'}")
    if options.command == "coco2yolo" and options.out.exists() and not options.out.is_dir():
        raise UsageError(f"{options.out} is a file; coco2yolo writes a YOLO folder (data.yaml, "
                         "images/, labels/): name a folder")


def _inputs(options: YoloToCoco | VocToCoco) -> list[Path]:
    """The files a json conversion reads, which its output must not be: the data.yaml, the
    split's images and label files; or the VOC split's list file and xml files."""
    from core.dbs.voc import split_files
    from core.dbs.yolo import label_path, read_data_yaml, split_images

    if isinstance(options, YoloToCoco):
        images = split_images(read_data_yaml(options.data_yaml), options.split,
                              options.data_yaml)
        return [options.data_yaml, *images, *map(label_path, images)]
    xml_files, listing = split_files(options.voc_root, options.split)
    return [*xml_files, *([listing] if listing else [])]


@keeps_process
def run(options: ConvertOptions, log: Callable[[str], None] = print) -> Path:
    """Convert as the options say; returns what was written (the json, or the YOLO folder)."""
    from core.dbs.convert import check_absent, check_not_input, coco_to_yolo, to_coco
    from core.dbs.converted import Problems
    from core.dbs.detection import DatasetError
    from core.dbs.voc import read_split as read_voc
    from core.dbs.yolo import read_split as read_yolo

    check_out(options)
    problems = Problems(strict=False, log=log)  # a whole split's warning: said at the start
    try:
        if not isinstance(options, CocoToYolo):
            check_not_input([options.out], _inputs(options))
            check_absent([options.out], options.exist_ok,
                         "exists (an earlier conversion's json?)")
        if isinstance(options, YoloToCoco):
            to_coco(*read_yolo(options.data_yaml, options.split, problems), problems,
                    options.out, log)
        elif isinstance(options, VocToCoco):
            names = list(options.names) if options.names is not None else None
            to_coco(*read_voc(options.voc_root, options.split, names, problems), problems,
                    options.out, log)
        else:
            coco_to_yolo(options.annotations, options.images, options.out, options.split,
                         options.copy, log, exist_ok=options.exist_ok)
    except (DatasetError, FileNotFoundError) as err:
        raise UsageError(str(err)) from None
    return options.out


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), on_stop=lambda _: (
        "an output takes its name only when whole: nothing half-written is left"), argv=argv)


if __name__ == "__main__":
    sys.exit(main())
