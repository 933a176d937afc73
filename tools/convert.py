#!/usr/bin/env python
"""Convert detection labels between YOLO txt, Pascal VOC xml and COCO json.

    python tools/convert.py yolo2coco <data.yaml> <split> <out.json>
    python tools/convert.py voc2coco <voc_root> <split> <out.json> [--names a b ...]
    python tools/convert.py coco2yolo <instances.json> <image folder> <out folder> [--split S]

The readers and writers are core/dbs/ (yolo.py, voc.py, convert.py): the same rules, the same
messages for bad lines; a box the loader would drop is dropped here too, counted in its words.
COCO json gets category ids 1..C in the order of the names, boxes in pixels, VOC's `difficult` as
iscrowd 1; the image folder to set as db.image_dirs is printed. YOLO gets <out>/images/<split>/
(links, or copies with --copy; refused when an image is missing), <out>/labels/<split>/ with
`class cx cy w h` to 6 decimals, and <out>/data.yaml with the names in id order and no `path:`
(the root is its own folder). YOLO has no crowd regions: they are left out and counted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from core.dbs.convert import coco_to_yolo, to_coco
from core.dbs.converted import Problems
from core.dbs.detection import DatasetError
from core.dbs.voc import read_split as read_voc
from core.dbs.yolo import read_split as read_yolo
from core.engine.cli import run_cli
from core.errors import UsageError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Convert YOLO / VOC / COCO detection labels")
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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    problems = Problems(strict=False)
    try:
        if args.command == "yolo2coco":
            to_coco(*read_yolo(args.data_yaml, args.split, problems), problems, args.out,
                    print)
        elif args.command == "voc2coco":
            to_coco(*read_voc(args.voc_root, args.split, args.names, problems), problems,
                    args.out, print)
        else:
            coco_to_yolo(args.annotations, args.images, args.out, args.split, args.copy, print)
    except (DatasetError, FileNotFoundError) as err:
        raise UsageError(str(err)) from None


if __name__ == "__main__":
    run_cli(main)
