"""Sampler speed and batch size on one core.

    python bench/bench_sampler.py [--batches 8] [--batch 32]

For the CornerNet, CornerNet-Squeeze and CornerNet-Saccade configs (their db sections, pointed at
../shared/data/coco128), a single process with torch, cv2 and numpy at one thread builds batches
with data_sampling_func and prints images/s after one warm-up batch, next to the rate of image
decoding alone (db.read_image over the same images: the ceiling for any sampler), the rate of
the sampler's own work (the same batches with the images decoded beforehand), and the bytes
per image of the batch (sum of the arrays' nbytes / batch size). Also the seconds per batch that
rendering the dense targets and the normalised image takes on the CPU, for reference (on a GPU it
is negligible). Needs the package importable (`pip install -e .`).
"""

from __future__ import annotations

import os

# Before numpy, cv2 and torch are imported: one thread each.
os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import tempfile
import time
from pathlib import Path

import cv2
import torch
from _coco128 import COCO128  # bench/ is the script's folder

from core.config import SystemConfig, load_config
from core.dbs import DETECTION, datasets
from core.sample import data_sampling_func
from core.sample.render import normalize_image, render_targets

CONFIGS = ("CornerNet", "CornerNet_Squeeze", "CornerNet_Saccade")


def build_db(config: str, data: Path, cache_dir: str) -> tuple[str, DETECTION]:
    system, db_config = load_config(config)
    db_config.update(image_dirs={"all": str(data / "images")},
                     annotation_files={"all": str(data / "annotations" /
                                                  "instances_coco128.json")})
    sys_config = SystemConfig().update_config({"cache_dir": cache_dir})
    return system.sampling_function, datasets["COCO"](db_config, split="all",
                                                      sys_config=sys_config)


def bench(config: str, data: Path, batches: int, batch_size: int, cache_dir: str) -> None:
    sampler, db = build_db(config, data, cache_dir)
    sample = data_sampling_func[sampler]
    system = SystemConfig().update_config({"batch_size": batch_size})
    batch, k_ind = sample(system, db, 0)
    start = time.perf_counter()
    for _ in range(batches):
        batch, k_ind = sample(system, db, k_ind)
    rate = batches * batch_size / (time.perf_counter() - start)

    start = time.perf_counter()
    decoded = [db.read_image(ind) for ind in range(len(db))]
    decode = len(db) / (time.perf_counter() - start)

    db.read_image = decoded.__getitem__
    start = time.perf_counter()
    for _ in range(batches):
        sample(system, db, k_ind)
    own = batches * batch_size / (time.perf_counter() - start)

    arrays = {key: value for key, value in batch.items() if key != "meta"}
    per_image = sum(value.nbytes for value in arrays.values()) / batch_size
    tensors = {key: torch.from_numpy(value) for key, value in arrays.items()}
    start = time.perf_counter()
    render_targets(tensors, db.configs, db.configs["categories"])
    normalize_image(tensors["image"], tensors["color"])
    render = time.perf_counter() - start
    print(f"{config:18s} {rate:6.1f} images/s | decode alone {decode:6.1f}/s | sampler without "
          f"decode {own:6.1f}/s | {per_image / 1e6:5.3f} MB/image | CPU render "
          f"{render:4.2f} s/batch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--data", type=Path, default=COCO128)
    args = parser.parse_args()
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as cache_dir:
        for config in CONFIGS:
            bench(config, args.data, args.batches, args.batch, cache_dir)


if __name__ == "__main__":
    main()
