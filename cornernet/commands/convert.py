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

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError

# The readers and writers (core.dbs, and cv2 with it) are imported by `run`, so that --help
# imports neither (cornernet/commands/__init__.py).

PROG = "cornernet convert"


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog or PROG,
                                     description="Convert YOLO / VOC / COCO detection labels")
    commands = parser.add_subparsers(dest="command", required=True)
    yolo = commands.add_parser("yolo2coco", help="a YOLO split to a COCO instances json")
    yolo.add_argument("data_yaml", type=Path)
    yolo.add_argument("split")
    yolo.add_argument("out", type=Path)
    voc = commands.add_parser("voc2coco", help="a VOC split to a COCO instances json")
    voc.add_argument("voc_root", type=Path)
    voc.add_argument("split")
    voc.add_argument("out", type=Path)
    voc.add_argument("--names", nargs="+", default=None,
                     help="class names in order (default: sorted from Annotations/)")
    coco = commands.add_parser("coco2yolo", help="a COCO instances json to a YOLO folder")
    coco.add_argument("annotations", type=Path)
    coco.add_argument("images", type=Path, help="the folder the json's file names are in")
    coco.add_argument("out", type=Path)
    coco.add_argument("--split", default="train", help="the split's name in data.yaml")
    coco.add_argument("--copy", action="store_true", help="copy the images instead of linking")
    for command in (yolo, voc, coco):
        command.add_argument("--exist-ok", action="store_true",
                             help="replace an earlier conversion's output (the json, or the "
                                  "split in the YOLO folder) whole")
    return parser.parse_args(argv)


def check_out(args: argparse.Namespace) -> None:
    """The output is of the kind the conversion writes (a json file, a YOLO folder): a
    UsageError in one line before anything is read."""
    if args.command != "coco2yolo" and args.out.is_dir():
        raise UsageError(f"{args.out} is a folder; {args.command} writes one COCO json file: "
                         f"name it, e.g. {args.out / f'instances_{args.split}.json'}")
    if args.command == "coco2yolo" and args.out.exists() and not args.out.is_dir():
        raise UsageError(f"{args.out} is a file; coco2yolo writes a YOLO folder (data.yaml, "
                         "images/, labels/): name a folder")


def _inputs(args: argparse.Namespace) -> list[Path]:
    """The files a json conversion reads, which its output must not be: the data.yaml, the
    split's images and label files; or the VOC split's list file and xml files."""
    from core.dbs.voc import split_files
    from core.dbs.yolo import label_path, read_data_yaml, split_images

    if args.command == "yolo2coco":
        images = split_images(read_data_yaml(args.data_yaml), args.split, args.data_yaml)
        return [args.data_yaml, *images, *map(label_path, images)]
    xml_files, listing = split_files(args.voc_root, args.split)
    return [*xml_files, *([listing] if listing else [])]


@keeps_process
def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> Path:
    """Convert as the options say; returns what was written (the json, or the YOLO folder)."""
    from core.dbs.convert import check_absent, check_not_input, coco_to_yolo, to_coco
    from core.dbs.converted import Problems
    from core.dbs.detection import DatasetError
    from core.dbs.voc import read_split as read_voc
    from core.dbs.yolo import read_split as read_yolo

    check_out(args)
    problems = Problems(strict=False, log=log)  # a whole split's warning: said at the start
    try:
        if args.command != "coco2yolo":
            check_not_input([args.out], _inputs(args))
            check_absent([args.out], args.exist_ok, "exists (an earlier conversion's json?)")
        if args.command == "yolo2coco":
            to_coco(*read_yolo(args.data_yaml, args.split, problems), problems, args.out, log)
        elif args.command == "voc2coco":
            to_coco(*read_voc(args.voc_root, args.split, args.names, problems), problems,
                    args.out, log)
        else:
            coco_to_yolo(args.annotations, args.images, args.out, args.split, args.copy, log,
                         exist_ok=args.exist_ok)
    except (DatasetError, FileNotFoundError) as err:
        raise UsageError(str(err)) from None
    return args.out


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), on_stop=lambda _: (
        "an output takes its name only when whole: nothing half-written is left"), argv=argv)


if __name__ == "__main__":
    sys.exit(main())
