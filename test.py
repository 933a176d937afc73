#!/usr/bin/env python3
"""Evaluate a snapshot: python test.py <Cfg> [--testiter N] [--split S] [--suffix X] [--debug].

Runs the inference of `system.sampling_function` on every image of the split, writes
results/<Cfg>/<iter>/<split>[/<suffix>]/results.json and, where the split has annotations, the 12
COCO metrics to metrics.json in the same folder.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from core.config import CONFIG_DIR, ConfigError, config_path, load_config, lookup
from core.dbs import DatasetError, datasets
from core.inference import test_func
from core.inference.coco_eval import BACKENDS, save_and_evaluate
from core.nnet.py_factory import NetworkFactory
from core.utils.images import ImageReadError
from core.utils.vis import save_detections

SPLITS = ("training", "validation", "testing")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Evaluate a CornerNet-Lite snapshot")
    parser.add_argument("cfg_file", help="config name in configs/, e.g. CornerNet_Squeeze")
    parser.add_argument("--testiter", type=int, default=None,
                        help="snapshot iteration (default: system.max_iter)")
    parser.add_argument("--split", choices=SPLITS, default="validation")
    parser.add_argument("--suffix", default=None,
                        help="test-time settings from configs/<Cfg>-<suffix>.json (or the config "
                             "named <suffix>), e.g. multi_scale; the snapshots stay <Cfg>'s")
    parser.add_argument("--debug", action="store_true",
                        help="only the first --debug-images images, and annotated JPEGs of them")
    parser.add_argument("--debug-images", type=int, default=20)
    parser.add_argument("--images", type=int, default=None, help="evaluate the first N images")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backend", choices=BACKENDS, default="faster",
                        help="COCO evaluator (pycocotools is the reference)")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    return parser.parse_args(argv)


def settings_name(args: argparse.Namespace) -> str:
    """The config file to read: <Cfg>, <Cfg>-<suffix>, or the config named <suffix>."""
    if args.suffix is None:
        return args.cfg_file
    for name in (f"{args.cfg_file}-{args.suffix}", args.suffix):
        try:
            config_path(name, args.config_dir)
            return name
        except ConfigError:
            continue
    raise ConfigError(f"--suffix {args.suffix}: neither {args.cfg_file}-{args.suffix}.json nor "
                      f"{args.suffix}.json is in {args.config_dir}")


def main(args: argparse.Namespace) -> dict | None:
    system_config, db_config = load_config(settings_name(args), args.config_dir)
    # A suffix config holds other test settings for the same network and snapshots.
    system_config.full["snapshot_name"] = args.cfg_file
    if system_config.model is None:
        system_config.full["model"] = args.cfg_file
    split = {"training": system_config.train_split, "validation": system_config.val_split,
             "testing": system_config.test_split}[args.split]
    testiter = system_config.max_iter if args.testiter is None else args.testiter

    dataset = lookup(datasets, system_config.dataset, "dataset")
    db = dataset(db_config, split=split, sys_config=system_config)
    nnet = NetworkFactory(system_config, db, device=args.device)
    print(f"loading {system_config.snapshot_file(testiter)}")
    nnet.load_params(testiter, model_only=True)
    nnet.eval_mode()
    inference = lookup(test_func, system_config.sampling_function, "sampling function")

    out_dir = system_config.result_dir / str(testiter) / split
    if args.suffix is not None:
        out_dir = out_dir / args.suffix
    limit = args.debug_images if args.debug else args.images
    db_inds = db.db_inds[:limit]

    top_bboxes, skipped = {}, []
    start = time.perf_counter()
    for ind in tqdm(db_inds, desc=f"{args.cfg_file} {split}", ncols=80):
        try:
            image = db.read_image(ind)
        except ImageReadError as err:
            if system_config.strict_images:
                raise
            skipped.append(err.path)
            continue
        detections = inference(db, nnet, image)
        top_bboxes[db.image_id(ind)] = detections
        if args.debug:
            save_detections(out_dir / "debug" / f"{db.image_id(ind)}.jpg", image, detections,
                            db.cls2name)
    seconds = time.perf_counter() - start
    if skipped:
        print(f"skipped {len(skipped)} unreadable images (scored as misses): "
              f"{', '.join(map(str, skipped[:5]))}{' ...' if len(skipped) > 5 else ''}")
    print(f"{len(db_inds)} images, {1000 * seconds / max(len(db_inds), 1):.1f} ms per image "
          f"on {nnet.device}")
    return save_and_evaluate(db, top_bboxes, out_dir, backend=args.backend)


if __name__ == "__main__":
    try:
        main(parse_args())
    except (ConfigError, DatasetError, OSError) as err:
        sys.exit(f"error: {err}")
