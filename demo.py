#!/usr/bin/env python3
"""Detect objects in your own pictures and draw them.

python demo.py <Cfg> --testiter N --images a.jpg b.png folder/ ... --out DIR

Writes DIR/<name>.jpg for every readable input, with boxes, class names and scores above
--thresh. A folder means the files in it. Inputs are never written over, and two inputs never
share an output: x.jpg and x.png become x_jpg.jpg and x_png.jpg.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from core.config import CONFIG_DIR, ConfigError, SystemConfig, load_config, lookup
from core.dbs import datasets
from core.engine.cli import run_cli
from core.errors import UsageError
from core.inference import test_func
from core.inference.onnx_runtime import add_runtime_args, open_network
from core.nnet.checkpoint import require_snapshot
from core.utils.files import StorageError, probe_writable
from core.utils.images import ImageReadError, read_image
from core.utils.vis import save_detections


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Draw the detections of a snapshot")
    parser.add_argument("cfg_file", help="config name in configs/, e.g. CornerNet_Squeeze")
    parser.add_argument("--testiter", type=int, default=None,
                        help="snapshot iteration (default: system.max_iter)")
    parser.add_argument("--images", nargs="+", type=Path, required=True,
                        help="image files, or folders whose files are taken")
    parser.add_argument("--out", type=Path, required=True, help="folder for the pictures")
    parser.add_argument("--thresh", type=float, default=0.5, help="draw boxes scoring above it")
    parser.add_argument("--device", default=None,
                        help="cuda, cuda:1 or cpu (default: the current GPU, else cpu)")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    add_runtime_args(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return parser.parse_args(argv)


def input_files(paths: list[Path]) -> list[Path]:
    """The files named, with each folder replaced by its (non-hidden) files in name order."""
    files = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir()
                                if p.is_file() and not p.name.startswith(".")))
        elif path.exists():
            files.append(path)
        else:
            raise UsageError(f"--images {path}: no such file or folder")
    if not files:
        raise UsageError(f"--images {' '.join(map(str, paths))}: no files to draw")
    return files


def output_files(inputs: list[Path], out_dir: Path) -> list[Path]:
    """One distinct JPEG in `out_dir` per input, none of them an input.

    `<stem>.jpg`, or `<stem>_<extension>.jpg` when inputs share a stem (x.jpg, x.png), with
    `-2`, `-3`, ... when they still collide (x.jpg in two folders).
    """
    stems = Counter(path.stem for path in inputs)
    taken = {path.resolve() for path in inputs}
    outputs = []
    for path in inputs:
        name = path.stem if stems[path.stem] == 1 else f"{path.stem}_{path.suffix.lstrip('.')}"
        candidate, number = out_dir / f"{name}.jpg", 1
        while candidate.resolve() in taken:
            number += 1
            candidate = out_dir / f"{name}-{number}.jpg"
        taken.add(candidate.resolve())
        outputs.append(candidate)
    return outputs


def class_source(system_config: SystemConfig, db_config: dict) -> Any:
    """The dataset of the validation split, whose annotation file names the classes.

    Without one configured (`db.annotation_files` does not name the split and the dataset's
    default layout is not there), a dataset holding only the test settings: classes are then
    shown by number. A file the config names that is missing or broken is a mistake.
    """
    dataset = lookup(datasets, system_config.dataset, "dataset")
    named = system_config.val_split in (db_config.get("annotation_files") or {})
    try:
        return dataset(db_config, split=system_config.val_split, sys_config=system_config)
    except (FileNotFoundError, ConfigError) as err:
        if named:
            raise
        print(f"no class names ({err}); labelling classes by number")
        return dataset(db_config, split=None, sys_config=system_config)


def main(args: argparse.Namespace) -> list[Path]:
    system_config, db_config = load_config(args.cfg_file, args.config_dir)
    inputs = input_files(args.images)
    outputs = output_files(inputs, args.out)
    testiter = system_config.max_iter if args.testiter is None else args.testiter
    if args.runtime == "torch":
        require_snapshot(system_config, testiter, "pick --testiter")
    try:  # an unwritable --out is found now, not after the first image
        probe_writable(args.out, "--out")
    except StorageError as err:
        raise UsageError(str(err)) from None

    db = class_source(system_config, db_config)
    names = db.cls2name if db.class_ids else (lambda cls: f"class {cls}")
    nnet, _ = open_network(args.runtime, system_config, db, testiter, args.device, args.onnx,
                           precision=args.precision)
    print("weights: " + ("the average (system.ema_decay)" if nnet.evaluated_weights == "ema"
                         else "the trained ones"))
    inference = lookup(test_func, system_config.sampling_function, "sampling function")

    written, bad = [], []
    for path, out in zip(inputs, outputs):
        try:
            image = read_image(path)
        except ImageReadError as err:
            print(f"skipped: {err}")
            bad.append(path)
            continue
        detections = inference(db, nnet, image)
        save_detections(out, image, detections, names, args.thresh)
        count = sum(int((boxes[:, 4] > args.thresh).sum()) for boxes in detections.values())
        print(f"{path}: {count} detections above {args.thresh} -> {out}")
        written.append(out)
    print(f"drew {len(written)} of {len(inputs)} inputs in {args.out}"
          + (f"; unreadable: {', '.join(map(str, bad))}" if bad else ""))
    if not written:
        raise UsageError(f"none of the {len(inputs)} inputs is a readable image")
    return written


if __name__ == "__main__":
    run_cli(lambda: main(parse_args()))
