"""Images/s delivered to the trainer through the real prefetch path, and the data-wait share.

    python bench/bench_prefetch.py [--batches 40] [--tiny-iters 60] [--workers 1 2]
                                   [--eval-images N]

1. For the CornerNet and CornerNet-Squeeze configs on ../shared/data/coco128 (batch 8 per step),
   the trainer's side of core.data.prefetch with 1 and 2 workers and no model: images/s after a
   warm-up, as the loop would see them (ordered delivery, slot copied out, slot freed).
2. A real CPU run of `train.py CornerNet_Tiny` for a few iterations: the share of wall time
   the loop spent waiting for data, as train.py reports it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._coco128 import COCO128, coco128_run
from core.config import load_config
from core.data.chunks import deal
from core.data.prefetch import Prefetcher
from core.data.ring import probe_batch
from core.sample import sampler


def delivered(name: str, workers: int, batches: int, batch_size: int) -> float:
    system_config, make_db = coco128_run(name, batch_size=batch_size, chunk_sizes=None,
                                         prefetch_size=4)
    sample = sampler(system_config.sampling_function, system_config.strict_images)
    share = deal(system_config.batch_size, system_config.chunk_sizes, 0, 1)
    db = make_db()
    db.set_rng(np.random.default_rng(0))
    probe = probe_batch(db, sample, share)
    with Prefetcher(make_db, sample, probe, share=share, workers=workers, data_aug=True,
                    stream="train", seed=system_config.seed,
                    prefetch_size=system_config.prefetch_size) as data:
        for _ in range(4):
            data.get()
        t0 = time.perf_counter()
        for _ in range(batches):
            data.get()
        return batches * batch_size / (time.perf_counter() - t0)


def tiny_wait_share(iterations: int, eval_images: int | None = None) -> str:
    """Run train.py CornerNet_Tiny briefly; snapshots go to a scratch folder. `eval_images`
    limits the evaluation at the end of the run (system.eval_images; None: the config's)."""
    config = json.loads((REPO / "configs" / "CornerNet_Tiny.json").read_text())
    data_dir = load_config("CornerNet_Tiny")[0].data_dir  # reuse the generated dataset
    with tempfile.TemporaryDirectory() as tmp:
        config["system"].update(max_iter=iterations, cache_dir=f"{tmp}/cache",
                                data_dir=str(data_dir))
        if eval_images is not None:
            config["system"]["eval_images"] = eval_images
        folder = Path(tmp) / "configs"
        folder.mkdir()
        (folder / "CornerNet_Tiny.json").write_text(json.dumps(config))
        cmd = [sys.executable, str(REPO / "train.py"), "CornerNet_Tiny", "--workers", "2",
               "--config-dir", str(folder)]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                             check=False)
    found = re.search(r"waiting for data (\S+) of the time", out.stdout)
    return found.group(1) if found else f"(no summary; exit {out.returncode}) {out.stderr[-500:]}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--tiny-iters", type=int, default=60)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="the worker counts measured for each config")
    parser.add_argument("--eval-images", type=int, default=None,
                        help="validation images of the CornerNet_Tiny run's evaluation at its "
                             "end (default: the config's)")
    args = parser.parse_args()
    if not COCO128.is_dir():
        sys.exit(f"coco128 not found at {COCO128}")
    for name in ("CornerNet_Squeeze", "CornerNet"):
        for workers in args.workers:
            rate = delivered(name, workers, args.batches, args.batch_size)
            print(f"{name:18s} workers={workers}: {rate:7.1f} images/s delivered")
    print(f"CornerNet_Tiny CPU training ({args.tiny_iters} iterations): waiting for data "
          f"{tiny_wait_share(args.tiny_iters, args.eval_images)} of the wall time")


if __name__ == "__main__":
    main()
