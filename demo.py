#!/usr/bin/env python3
"""Detect objects in your own pictures and draw them.

python demo.py <Cfg> --testiter N --images a.jpg b.jpg ... --out DIR

Writes DIR/<name>.jpg for every input, with boxes, class names and scores above --thresh.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

from core.config import CONFIG_DIR, ConfigError, SystemConfig, load_config, lookup
from core.dbs import datasets
from core.inference import test_func
from core.nnet.py_factory import NetworkFactory
from core.utils.images import ImageReadError, read_image
from core.utils.vis import save_detections


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Draw the detections of a snapshot")
    parser.add_argument("cfg_file", help="config name in configs/, e.g. CornerNet_Squeeze")
    parser.add_argument("--testiter", type=int, default=None,
                        help="snapshot iteration (default: system.max_iter)")
    parser.add_argument("--images", nargs="+", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="folder for the pictures")
    parser.add_argument("--thresh", type=float, default=0.5, help="draw boxes scoring above it")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    return parser.parse_args(argv)


def class_source(system_config: SystemConfig, db_config: dict) -> Any:
    """The dataset of the validation split, whose annotation file names the classes; without
    that file, a dataset holding only the test settings (classes are then shown by number)."""
    dataset = lookup(datasets, system_config.dataset, "dataset")
    try:
        return dataset(db_config, split=system_config.val_split, sys_config=system_config)
    except (FileNotFoundError, ConfigError) as err:
        print(f"no class names ({err}); labelling classes by number")
        return dataset(db_config, split=None, sys_config=system_config)


def main(args: argparse.Namespace) -> list[Path]:
    system_config, db_config = load_config(args.cfg_file, args.config_dir)
    db = class_source(system_config, db_config)
    names = db.cls2name if db.class_ids else (lambda cls: f"class {cls}")
    nnet = NetworkFactory(system_config, db, device=args.device)
    nnet.load_params(system_config.max_iter if args.testiter is None else args.testiter,
                     model_only=True)
    nnet.eval_mode()
    inference = lookup(test_func, system_config.sampling_function, "sampling function")

    written = []
    for path in args.images:
        try:
            image = read_image(path)
        except ImageReadError as err:
            print(f"skipped: {err}")
            continue
        detections = inference(db, nnet, image)
        out = save_detections(args.out / f"{path.stem}.jpg", image, detections, names,
                              args.thresh)
        count = sum(int((boxes[:, 4] > args.thresh).sum()) for boxes in detections.values())
        print(f"{path}: {count} detections above {args.thresh} -> {out}")
        written.append(out)
    return written


if __name__ == "__main__":
    try:
        main(parse_args())
    except (ConfigError, OSError) as err:
        sys.exit(f"error: {err}")
