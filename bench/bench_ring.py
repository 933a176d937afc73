"""The prefetch ring: /dev/shm it takes for the shipped configs, and what its size costs.

    python bench/bench_ring.py [--batches 30] [--repeats 3] [--workers 1 2 4]

1. Shared memory the rings take (`core.data.ring.shm_need`) for the shipped configs with
   --workers 1, 2 and 4, under the former rule (max(2, ceil(prefetch_size / workers)) slots
   per worker, validation included), the current `core.data.ring.ring_slots` and one slot per
   worker.
2. The hand-over cost alone: workers whose batch takes a fixed time to build (a sleep of
   --build-ms per image, so the CPU load of other processes does not blur it) and whose
   arrays have the shipped configs' shapes; images/s delivered to a trainer that takes them
   as fast as they come (where a worker waiting for a free slot would show), under both
   rules, alternated `--repeats` times; the median. The ideal is workers * 1000 / build-ms.
   The one-slot rule is measured here only: it is what fitting more in /dev/shm would cost.
3. The same with real batches: ../shared/data/coco128 at the configs' input sizes, batch 8.
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._coco128 import COCO128, MISSING, coco128_run
from core.config import SystemConfig, load_config
from core.data import prefetch, ring
from core.data.chunks import deal
from core.data.ring import probe_batch
from core.sample import sampler
from core.utils import files

CONFIGS = ("CornerNet", "CornerNet_Squeeze", "CornerNet_Saccade")
CURRENT = ring.ring_slots


def former(prefetch_size: int, workers: int, stream: str) -> int:
    """The ring size before: at least two slots per worker, validation sized like training."""
    return max(2, math.ceil(prefetch_size / workers))


def one(prefetch_size: int, workers: int, stream: str) -> int:
    """The smallest ring: one slot per worker, for the record of what it costs."""
    return 1


RULES = {"former": former, "current": CURRENT, "one slot": one}


def shm_table(workers: int) -> None:
    """The /dev/shm the shipped configs' rings take with `workers` (and validation)."""
    for name in CONFIGS:
        system_config, db_config = load_config(name)
        needs = []
        for label, rule in RULES.items():
            ring.ring_slots = rule
            need = files.format_bytes(ring.shm_need(
                db_config, system_config.sampling_function, system_config.batch_size, workers,
                prefetch_size=system_config.prefetch_size,
                validation=bool(system_config.val_iter)))
            needs.append(f"{label} {need:>10s}")
        ring.ring_slots = CURRENT
        print(f"{name:18s} batch {system_config.batch_size:2d} --workers {workers}: /dev/shm "
              + ", ".join(needs))


class TimedDB:
    """A dataset stand-in whose images cost `build_s` each to build and nothing else."""

    def __init__(self, build_s: float) -> None:
        self.build_s = build_s
        self.db_inds = np.arange(1000)

    def set_rng(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def image_path(self, ind: int) -> str:
        return f"timed/{ind}"

    read_image = image_path


def timed_sample(input_size: tuple[int, int], db: TimedDB, k_ind: int, size: int,
                 data_aug: bool = True) -> tuple[dict, int]:
    """A batch of `size` images of `input_size` (bound with functools.partial), built in
    `db.build_s` per image."""
    height, width = input_size
    time.sleep(size * db.build_s)
    return {"image": np.full((size, height, width, 3), k_ind % 255, np.uint8),
            "boxes": np.zeros((size, 128, 4), np.float32), "meta": {"skipped": []}}, k_ind


def handoff(name: str, workers: int, batches: int, batch_size: int, build_ms: float) -> float:
    """Images/s through the real Prefetcher with batches of fixed build time."""
    system_config, db_config = load_config(name)
    system_config = system_config.replace(batch_size=batch_size, chunk_sizes=None,
                                          prefetch_size=5)
    make_db = functools.partial(TimedDB, build_ms / 1000)
    sample = functools.partial(timed_sample, db_config["input_size"])
    return through(make_db, sample, system_config, workers, batches)


def through(make_db: Callable[[], Any], sample: Callable[..., tuple[dict, int]],
            system_config: SystemConfig, workers: int, batches: int) -> float:
    """Images/s delivered after a warm-up of 4 batches."""
    share = deal(system_config.batch_size, system_config.chunk_sizes, 0, 1)
    db = make_db()
    db.set_rng(np.random.default_rng(0))
    probe = probe_batch(db, sample, share)
    with prefetch.Prefetcher(make_db, sample, probe, share=share, workers=workers,
                             data_aug=True, stream="train", seed=system_config.seed,
                             prefetch_size=system_config.prefetch_size) as data:
        for _ in range(4):
            data.get()
        began = time.perf_counter()
        for _ in range(batches):
            data.get()
        return batches * system_config.batch_size / (time.perf_counter() - began)


def delivered(name: str, workers: int, batches: int, batch_size: int) -> float:
    """Images/s through the real Prefetcher with the rule now in `prefetch.ring_slots`."""
    system_config, make_db = coco128_run(name, batch_size=batch_size, chunk_sizes=None,
                                         prefetch_size=5)
    sample = sampler(system_config.sampling_function, system_config.strict_images)
    return through(make_db, sample, system_config, workers, batches)


def compare(label: str, workers: int, repeats: int, measure: Callable[[], float],
            rules: tuple[str, ...]) -> None:
    """Run `measure()` under `rules`, alternated; print the medians and every value."""
    rates: dict[str, list[float]] = {rule: [] for rule in rules}
    for _ in range(repeats):
        for rule in rules:
            prefetch.ring_slots = RULES[rule]
            rates[rule].append(measure())
    prefetch.ring_slots = CURRENT
    slots = " ".join(f"{rule} {RULES[rule](5, workers, 'train')}" for rule in rules)
    print(f"{label} workers={workers} slots/worker {slots}: "
          + ", ".join(f"{rule} {statistics.median(r):6.1f}" for rule, r in rates.items())
          + " images/s (" + "; ".join(
              f"{rule} " + " ".join(f"{v:.0f}" for v in r) for rule, r in rates.items()) + ")",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--build-ms", type=float, default=4.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4],
                        help="the worker counts of parts 2 and 3 (part 3 takes those up to 2)")
    args = parser.parse_args()
    for workers in (1, 2, 4):
        shm_table(workers)
    for name, batch_size in (("CornerNet", 49), ("CornerNet_Saccade", 48)):
        for workers in args.workers:
            compare(f"{name:18s} timed, batch {batch_size}", workers, args.repeats,
                    functools.partial(handoff, name, workers, args.batches, batch_size,
                                      args.build_ms), tuple(RULES))
    if not COCO128.is_dir():
        sys.exit(MISSING)
    for name in ("CornerNet_Squeeze", "CornerNet_Saccade"):
        for workers in (w for w in args.workers if w <= 2):
            compare(f"{name:18s} coco128, batch {args.batch_size}", workers, args.repeats,
                    functools.partial(delivered, name, workers, args.batches, args.batch_size),
                    ("former", "current"))


if __name__ == "__main__":
    main()
