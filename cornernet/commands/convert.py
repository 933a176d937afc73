"""Convert detection labels between YOLO txt, Pascal VOC xml and COCO json.

    cornernet convert yolo2coco <data.yaml> <split> <out.json>
    cornernet convert voc2coco <voc_root> <split> <out.json> [--names a b ...]
    cornernet convert coco2yolo <instances.json> <image folder> <out folder> [--split S]

The readers are the datasets' own (core/dbs/yolo.py, voc.py): the same rules, the same messages
for bad lines. COCO json gets category ids 1..C in the order of the names, boxes in pixels, VOC's
`difficult` as iscrowd 1; the image folder to set as db.image_dirs is printed. YOLO gets
<out>/images/<split>/ (links to the images, or copies with --copy), <out>/labels/<split>/ with
`class cx cy w h` to 6 decimals (under 0.01 pixel for images up to 10000 pixels), and
<out>/data.yaml with the category names in id order. YOLO has no crowd regions: they are left
out and counted; boxes are clipped to the image as the COCO loader clips them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from core.dbs.coco import parse_instances
from core.dbs.converted import Problems
from core.dbs.detection import DatasetError
from core.dbs.voc import read_split as read_voc
from core.dbs.yolo import read_split as read_yolo
from core.engine.cli import exit_status, keeps_process
from core.errors import UsageError

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
    return parser.parse_args(argv)


def to_coco(root: Path, content: dict, problems: Problems, out: Path) -> None:
    for annotation in content["annotations"]:
        annotation.pop("source")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(content))
    for message in problems.messages():
        print(f"warning: {message}")
    print(f"wrote {out}: {len(content['images'])} images, {len(content['annotations'])} "
          f"objects, {len(content['categories'])} classes; its images are in {root} "
          f"(set db.image_dirs to it)")


def to_yolo(annotations: Path, images: Path, out: Path, split: str, copy: bool) -> None:
    parsed = parse_instances(annotations.read_bytes(), annotations)
    for message in parsed["problems"]:
        print(f"warning: {message}")
    with open(annotations, "rb") as file:
        sizes = {image["id"]: (image["width"], image["height"])
                 for image in json.load(file)["images"]}
    counts = parsed["box_counts"]
    starts = [0, *counts.cumsum().tolist()]
    for k, (name, image_id) in enumerate(zip(parsed["file_names"], parsed["image_ids"])):
        width, height = sizes[int(image_id)]
        target = out / "images" / split / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            (shutil.copyfile if copy else os.symlink)((images / name).resolve(), target)
        lines = [f"{int(cls) - 1} {(x1 + x2) / 2 / width:.6f} {(y1 + y2) / 2 / height:.6f} "
                 f"{(x2 - x1) / width:.6f} {(y2 - y1) / height:.6f}"
                 for x1, y1, x2, y2, cls in parsed["boxes"][starts[k]:starts[k + 1]].tolist()]
        label = out / "labels" / split / Path(name).with_suffix(".txt")
        label.parent.mkdir(parents=True, exist_ok=True)
        label.write_text("".join(line + "\n" for line in lines))
    names = "".join(f"  {k}: {json.dumps(name, ensure_ascii=False)}\n"
                    for k, name in enumerate(parsed["category_names"]))
    data_yaml = out / "data.yaml"
    entries = {}
    if data_yaml.is_file():  # another split written before keeps its line
        entries = {line.split(":")[0]: line for line in data_yaml.read_text().splitlines()
                   if line and not line.startswith((" ", "path:", "names:"))}
    entries[split] = f"{split}: images/{split}"
    data_yaml.write_text(f"path: {json.dumps(str(out.resolve()))}\n" +
                         "".join(line + "\n" for line in entries.values()) + "names:\n" + names)
    print(f"wrote {data_yaml}: split '{split}' with {len(parsed['file_names'])} images, "
          f"{len(parsed['boxes'])} objects, {len(parsed['category_names'])} classes; "
          f"{len(parsed['crowds'])} crowd regions left out (YOLO has none)")


def check_out(args: argparse.Namespace) -> None:
    """The output is of the kind the conversion writes (a json file, a YOLO folder): a
    UsageError in one line before anything is read."""
    if args.command != "coco2yolo" and args.out.is_dir():
        raise UsageError(f"{args.out} is a folder; {args.command} writes one COCO json file: "
                         f"name it, e.g. {args.out / f'instances_{args.split}.json'}")
    if args.command == "coco2yolo" and args.out.exists() and not args.out.is_dir():
        raise UsageError(f"{args.out} is a file; coco2yolo writes a YOLO folder (data.yaml, "
                         "images/, labels/): name a folder")


@keeps_process
def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> Path:
    """Convert as the options say; returns what was written (the json, or the YOLO folder)."""
    check_out(args)
    problems = Problems(strict=False)
    try:
        if args.command == "yolo2coco":
            to_coco(*read_yolo(args.data_yaml, args.split, problems), problems, args.out)
        elif args.command == "voc2coco":
            to_coco(*read_voc(args.voc_root, args.split, args.names, problems), problems,
                    args.out)
        else:
            to_yolo(args.annotations, args.images, args.out, args.split, args.copy)
    except (DatasetError, FileNotFoundError) as err:
        raise UsageError(str(err)) from None
    return args.out


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/cli.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)))


if __name__ == "__main__":
    sys.exit(main())
