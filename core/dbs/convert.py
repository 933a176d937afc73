"""Conversions between YOLO txt, Pascal VOC xml and COCO json, by the datasets' own readers.

`to_coco` writes what a YOLO or VOC reader made of a split (the loader's box rules already
applied and noted, in the loader's words); `coco_to_yolo` writes a folder that this project's
YOLO reader and Ultralytics both read back: `images/<split>/` and `labels/<split>/` side by side
(a folder named `images` inside a file name is left out, so the label rule, the last `/images/`
of the path made `/labels/`, finds the label file), and a data.yaml without a `path:` key, so
that the root is the data.yaml's own folder for both readers and the folder can be moved
(Ultralytics takes a relative `path:` from its own datasets folder, not from the yaml's).

Outputs are written as snapshots are: a json through a temporary file renamed over it; a YOLO
split whole in a temporary folder beside it (`<out>/.<split>.<pid>-<start>.tmp`), swapped in
with the stop signals held back, so that a split never holds a picture of one run beside a
label of another. An interrupted conversion removes its temporary folder and says so; one
killed outright leaves it, and the next conversion into that folder removes it (finishing or
undoing a swap it was killed in: `_recover`). An output
that exists is replaced only with `exist_ok`, and never one that is an input.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from core.utils.files import (
    dead_writers_temp_paths,
    remove_stale_temp_files,
    temp_path,
    write_error,
    write_file_atomic,
)

from .coco_parse import parse_instances
from .converted import Problems
from .detection import DatasetError

Log = Callable[[str], None]
ELSEWHERE = "convert to a folder on another disk"
_SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def check_split_name(split: str) -> None:
    """A YOLO split is a name, never a path: it names images/<split>/ under the output."""
    if not _SPLIT_NAME.fullmatch(split):
        raise DatasetError(f"--split {split!r} is not a name: use letters, digits, '_', '-' "
                           f"and '.' (train, val, test-2); it names images/<split>/ and "
                           f"labels/<split>/ in the output folder")


def check_not_input(written: list[Path], inputs: list[Path]) -> None:
    """Refuse, before anything is read, an output that is (or holds) one of the `inputs`."""
    for path in written:
        target = path.resolve()
        for source in inputs:
            if source.resolve() == target or source.resolve().is_relative_to(target):
                raise DatasetError(f"{path} is an input of this conversion ({source}); "
                                   f"write the output somewhere else")


def check_absent(written: list[Path], exist_ok: bool, earlier: str) -> None:
    """Refuse, unless `exist_ok`, outputs that exist: `earlier` says what they hold."""
    there = [path for path in written if path.exists() or path.is_symlink()]
    if there and not exist_ok:
        raise DatasetError(f"{there[0]} {earlier}; give another output, or --exist-ok to "
                           f"replace it whole")


def to_coco(root: Path, content: dict, problems: Problems, out: Path, log: Log) -> dict:
    """Write a reader's COCO dict (its annotations' `source` removed) to `out`, atomically;
    log the reader's notes and the counts; return the counts."""
    for annotation in content["annotations"]:
        annotation.pop("source", None)
    for message in problems.messages():
        log(message if message.startswith("warning: ") else f"warning: {message}")
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_temp_files(out.parent):
        log(f"removed {stale}, left by an interrupted write")
    text = json.dumps(content).encode()
    write_file_atomic(out, lambda file: file.write(text), ELSEWHERE)
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


def yolo_names(file_names: list[str], annotations: Path, log: Log) -> list[Path]:
    """Each image's name under images/<split>/ (`yolo_name`), such that each has a label file
    of its own: images whose names differ only in the extension (`a.jpg`, `a.png`, which the
    label rule would both give `a.txt`) are written with it in the name (`a_jpg.jpg`,
    `a_png.png`), and said; names that still clash are refused, naming both images."""
    targets = [yolo_name(name) for name in file_names]
    _refuse_shared(targets, file_names, annotations, lambda target: target)
    by_stem: dict[Path, list[int]] = {}
    for k, target in enumerate(targets):
        by_stem.setdefault(target.with_suffix(""), []).append(k)
    twins = [group for group in by_stem.values() if len(group) > 1]
    for group in twins:
        for k in group:
            targets[k] = targets[k].with_name(f"{targets[k].stem}_{targets[k].suffix[1:]}"
                                              f"{targets[k].suffix}")
    _refuse_shared(targets, file_names, annotations, lambda target: target.with_suffix(".txt"))
    if twins:
        first = twins[0]
        log(f"note: {sum(map(len, twins))} images share their name with another but for the "
            f"extension (e.g. {file_names[first[0]]} and {file_names[first[1]]}); they are "
            f"written as {targets[first[0]]} and {targets[first[1]]}, so that each has a label "
            f"file of its own")
    return targets


def _refuse_shared(targets: list[Path], file_names: list[str], annotations: Path,
                   written: Callable[[Path], Path]) -> None:
    """Refuse two images whose `written(target)` (the picture, or the label file) is one,
    naming both."""
    seen: dict[Path, int] = {}
    for k, target in enumerate(targets):
        other = seen.setdefault(written(target), k)
        if other != k:
            raise DatasetError(f"{annotations}: images {file_names[other]} and {file_names[k]} "
                               f"would both be written as {written(target)} under the split's "
                               f"folder (the folders up to images/ are left out of their "
                               f"names); rename one")


def _check_images(annotations: Path, images: Path, names: list[str]) -> None:
    missing = [name for name in names if not (images / name).is_file()]
    if missing:
        raise DatasetError(f"{len(missing)} of the {len(names)} images of {annotations} are not "
                           f"in {images} (e.g. {images / missing[0]}); give the folder that "
                           f"the json's file_name values are relative to")


def _check_sources(images: Path, names: list[str], split_dirs: list[Path]) -> None:
    """No image to link or copy lies in the split it would replace (a copy made by an
    earlier `--copy`; a link there points elsewhere and is only replaced)."""
    inside = [split_dir.resolve() for split_dir in split_dirs]
    for name in names:
        source = (images / name).resolve()
        if any(source.is_relative_to(folder) for folder in inside):
            raise DatasetError(f"{images / name} is an input of this conversion and lies in "
                               f"{split_dirs[0]}, which it replaces; write the output "
                               f"somewhere else")


def coco_to_yolo(annotations: Path, images: Path, out: Path, split: str, copy: bool,
                 log: Log, exist_ok: bool = False) -> dict:
    """A COCO instances json to a YOLO folder under `out` (see the module docstring). Refused
    before anything is written when an image is not in `images`, when `split` is not a name,
    when the output holds an input, and when `out` holds the split already, unless `exist_ok`:
    then the split is replaced whole. Returns the counts."""
    check_split_name(split)
    split_dirs = [out / "images" / split, out / "labels" / split]
    check_not_input([*split_dirs, out / "data.yaml"], [annotations, images])
    if out.is_dir():  # a killed conversion's split is put back (or finished) before the checks
        _recover(out, log)
    check_absent(split_dirs, exist_ok, f"holds split '{split}' of an earlier conversion")
    parsed = parse_instances(annotations.read_bytes(), annotations)
    _check_images(annotations, images, parsed["file_names"])
    _check_sources(images, parsed["file_names"], split_dirs)
    targets = yolo_names(parsed["file_names"], annotations, log)
    data_yaml = _data_yaml_text(out / "data.yaml", split, parsed["category_names"])
    for message in parsed["problems"]:
        log(f"warning: {message}")
    with open(annotations, "rb") as file:
        sizes = {image["id"]: (image["width"], image["height"])
                 for image in json.load(file)["images"]}
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    staging = temp_path(out / split)
    try:
        starts = [0, *parsed["box_counts"].cumsum().tolist()]
        for k, (name, image_id) in enumerate(zip(parsed["file_names"], parsed["image_ids"])):
            width, height = sizes[int(image_id)]
            _put(staging / "images" / targets[k], functools.partial(
                shutil.copyfile if copy else os.symlink, (images / name).resolve()))
            text = "".join(
                f"{int(cls) - 1} {(x1 + x2) / 2 / width:.6f} {(y1 + y2) / 2 / height:.6f} "
                f"{(x2 - x1) / width:.6f} {(y2 - y1) / height:.6f}\n"
                for x1, y1, x2, y2, cls in parsed["boxes"][starts[k]:starts[k + 1]].tolist())
            _put((staging / "labels" / targets[k]).with_suffix(".txt"),
                 lambda path, text=text: path.write_text(text))
        os.sync()  # the split on disk before it takes the final names
    except BaseException:
        shutil.rmtree(out if created else staging, ignore_errors=True)
        log(f"nothing written: {out} is as it was (the unfinished split in {staging} was "
            f"removed)" if not created else f"nothing written: {out}, made for this "
            f"conversion, was removed with the unfinished split")
        raise
    counts = {"images": len(parsed["file_names"]), "objects": len(parsed["boxes"]),
              "classes": len(parsed["category_names"]), "crowds": len(parsed["crowds"])}
    with _stops_held():  # data.yaml first: a split it names that is not there is refused
        write_file_atomic(out / "data.yaml", lambda file: file.write(data_yaml.encode()),
                          ELSEWHERE)
        _swap_in(staging, split_dirs)
        log(f"wrote {out / 'data.yaml'}: split '{split}' with {counts['images']} images, "
            f"{counts['objects']} objects, {counts['classes']} classes; {counts['crowds']} "
            f"crowd regions left out (YOLO has none)")
    return counts


def _put(path: Path, make: Callable[[Path], object]) -> None:
    """`make(path)` in a folder made for it; an OSError as one line naming `path` (a full
    disk with the free space there)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        make(path)
    except OSError as err:
        raise write_error(path, err, f"nothing is left under a final name; free some space or "
                          f"{ELSEWHERE}") from None


@contextlib.contextmanager
def _stops_held() -> Iterator[None]:
    """The stop signals wait while a split is swapped in: a stop then comes after it."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        yield
    finally:  # the caller's mask as it was (signals it had blocked stay blocked)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _recover(out: Path, log: Log) -> None:
    """Finish what a conversion killed outright (`kill -9`) left in `out`, then remove its
    temporary folder, saying so. Killed while its split was swapped in (`_swap_in`): the
    swap is finished when a part of the new split took its place already, else undone (the
    earlier split put back), so that a split is one conversion's, never a mix."""
    for staging, name in dead_writers_temp_paths(out, folders=True).items():
        split_dirs = [out / "images" / name, out / "labels" / name]
        forward = staging.is_dir() and not (staging / "images").exists()
        for kind, target in zip(("images", "labels"), split_dirs):
            source = staging / (kind if forward else f"earlier-{kind}")
            if source.exists() and not (target.exists() or target.is_symlink()):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, target)
                log(f"{'completed' if forward else 'restored'} {target} from {staging}, left "
                    f"by a conversion killed while it replaced split '{name}'")
    for stale in remove_stale_temp_files(out, folders=True):
        log(f"removed {stale}, left by an interrupted conversion")


def _swap_in(staging: Path, split_dirs: list[Path]) -> None:
    """The earlier split (images and labels both) moved into `staging`, the new one out of it
    into place, `staging` removed (`_recover` finishes or undoes it after a `kill -9`)."""
    for kind, target in zip(("images", "labels"), split_dirs):
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            os.replace(target, staging / f"earlier-{kind}")
    for kind, target in zip(("images", "labels"), split_dirs):
        (staging / kind).mkdir(parents=True, exist_ok=True)  # a split without images
        os.replace(staging / kind, target)
    shutil.rmtree(staging)


def _data_yaml_text(path: Path, split: str, names: list[str]) -> str:
    """data.yaml with the splits written before kept, `split` added, no `path:` key; refused
    when the file names other classes."""
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
    return header + yaml.safe_dump({**splits, "nc": len(names), "names": names},
                                   allow_unicode=True, sort_keys=False)
