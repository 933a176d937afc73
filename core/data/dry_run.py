"""A data-only dry run: the training prefetch path for N batches, timed, with no model.

    result = dry_run(make_db, sample, share, workers, batches, seed=seed,
                     prefetch_size=prefetch_size)
    print(result.report())

It starts the same `Prefetcher` as train.py (training stream, augmentation on, from batch 0)
and takes `batches` batches off it, doing nothing with them, so it tells whether the data path
or the training step is the bottleneck. Inside the workers the sampling function is wrapped
(`TimedSample`); each chunk records in its batch meta the seconds spent

- reading: in `db.read_image` (file read and decode),
- augmenting: in the rest of the sampling function (crop, resize, colour, box records),
- queueing: since the end of the worker's previous chunk (writing the ring, handing the batch
  over, waiting for a free slot),

and the prefetcher sums them per batch, so only delivered batches are counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError
from ..utils.files import format_bytes
from ..utils.images import say_decoder_warnings
from .chunks import Deal
from .prefetch import Prefetcher
from .ring import probe_batch

PHASES = ("read", "augment", "queue")


class _ReadTimer:
    """Wraps `db.read_image` and adds up the seconds spent in it."""

    def __init__(self, read: Callable[[int], np.ndarray]) -> None:
        self.read = read
        self.seconds = 0.0

    def __call__(self, ind: int) -> np.ndarray:
        began = time.perf_counter()
        try:
            return self.read(ind)
        finally:
            self.seconds += time.perf_counter() - began


class TimedSample:
    """A sampling function that also puts its timings into batch["meta"].

    meta gets "read_s", "augment_s" and "queue_s" (float seconds, see the module docstring).
    Picklable: each worker process unpickles its own copy, whose state is that worker's.
    """

    def __init__(self, sample: Callable) -> None:
        self.sample = sample
        self._last_end: float | None = None

    def __call__(self, db: Any, k_ind: int, batch_size: int,
                 data_aug: bool = True) -> tuple[dict, int]:
        if not isinstance(db.read_image, _ReadTimer):
            db.read_image = _ReadTimer(db.read_image)
        timer = db.read_image
        read_before = timer.seconds
        began = time.perf_counter()
        batch, k_ind = self.sample(db, k_ind, batch_size, data_aug=data_aug)
        ended = time.perf_counter()
        read = timer.seconds - read_before
        queued = 0.0 if self._last_end is None else began - self._last_end
        self._last_end = ended
        batch.setdefault("meta", {}).update(read_s=read, augment_s=ended - began - read,
                                            queue_s=queued)
        return batch, k_ind


@dataclass
class DryRun:
    """What a dry run measured on this rank.

    Attributes:
        batch_images: images per batch on this rank (`share.local_batch`).
        slot_bytes: bytes of one ring slot, i.e. of one batch's arrays crossing processes.
        first_s: seconds from starting the workers to the first batch in the trainer.
        wall_s: seconds from starting the workers to the last batch in the trainer.
        waits_s: the trainer's wait for each batch, seconds.
        worker_images: images each worker delivered.
        seconds: per phase ("read", "augment", "queue"), each worker's seconds.
    """

    batch_images: int
    slot_bytes: int
    first_s: float
    wall_s: float
    waits_s: list[float]
    worker_images: list[int]
    seconds: dict[str, list[float]]

    @property
    def batches(self) -> int:
        return len(self.waits_s)

    @property
    def images(self) -> int:
        return self.batches * self.batch_images

    @property
    def images_per_s(self) -> float:
        """Images delivered per second of wall time, worker start-up included."""
        return self.images / self.wall_s

    @property
    def steady_images_per_s(self) -> float | None:
        """Images per second after the first batch (None with a single batch)."""
        if self.batches < 2:
            return None
        return (self.images - self.batch_images) / (self.wall_s - self.first_s)

    @property
    def worker_images_per_s(self) -> list[float | None]:
        """Per worker: images per second spent building (reading + augmenting); None for a
        worker that delivered no batch."""
        rates = []
        for w, count in enumerate(self.worker_images):
            busy = self.seconds["read"][w] + self.seconds["augment"][w]
            rates.append(count / busy if count and busy > 0 else None)
        return rates

    @property
    def bytes_per_image(self) -> float:
        return self.slot_bytes / self.batch_images

    @property
    def shares(self) -> dict[str, float]:
        """Fraction of the workers' measured time in each phase (they sum to 1)."""
        totals = {phase: sum(self.seconds[phase]) for phase in PHASES}
        whole = sum(totals.values())
        return {phase: total / whole if whole > 0 else 0.0 for phase, total in totals.items()}

    @property
    def mean_wait_s(self) -> float | None:
        """The trainer's mean wait per batch after the first (None with a single batch)."""
        return float(np.mean(self.waits_s[1:])) if self.batches > 1 else None

    def report(self) -> str:
        """A few lines for the log."""
        rates = ", ".join(f"{w}: {rate:.1f}" if rate is not None else f"{w}: no batch"
                          for w, rate in enumerate(self.worker_images_per_s))
        shares, steady = self.shares, self.steady_images_per_s
        after = f", {steady:.1f} after the first batch" if steady is not None else ""
        lines = [(f"dry run: {self.batches} batches of {self.batch_images} images "
                  f"({self.images} images) from {len(self.worker_images)} workers; no model, "
                  f"nothing trained"),
                 (f"images/s: {self.images_per_s:.1f} overall (first batch after "
                  f"{self.first_s:.2f} s){after}"),
                 f"per worker, images/s while building: {rates}",
                 (f"bytes per image crossing processes: {format_bytes(self.bytes_per_image)} "
                  f"(a ring slot of {self.slot_bytes:,} bytes holds {self.batch_images} images)"),
                 (f"worker time: reading {shares['read']:.1%}, augmenting "
                  f"{shares['augment']:.1%}, queueing {shares['queue']:.1%}")]
        if self.mean_wait_s is not None:
            lines.append(f"trainer: one batch every {self.mean_wait_s * 1e3:.1f} ms after the "
                         f"first; training steps slower than that are not held up by the data")
        return "\n".join(lines)


def dry_run(make_db: Callable[[], Any], sample: Callable, share: Deal, workers: int,
            batches: int, *, seed: int, prefetch_size: int,
            device: torch.device | None = None,
            log: Callable[[str], None] | None = None) -> DryRun:
    """Take `batches` training batches through the prefetch path, as train.py builds it.

    Args:
        make_db, sample, seed, prefetch_size: as for `Prefetcher`.
        share: this rank's chunks (`core.data.chunks.deal`); workers: prefetch processes.
        device: where batches would go (on CUDA they are staged in pinned memory).
        log: hears what loading the split finds (`make_db(log=log)`, once, here: the workers'
            copies say it with `make_db`'s own log) and the images' decoder warnings.
    """
    if batches < 1:
        raise ConfigError(f"--dry-run needs at least 1 batch, got {batches}")
    # the probe that sizes the ring, built as train.py builds it
    db = make_db(log=log) if log is not None else make_db()
    db.set_rng(np.random.default_rng(seed))
    probe = probe_batch(db, sample, share)
    seconds = {phase: [0.0] * workers for phase in PHASES}
    worker_images, waits = [0] * workers, []
    began = time.perf_counter()
    with Prefetcher(make_db, TimedSample(sample), probe, share=share, workers=workers,
                    data_aug=True, stream="train", seed=seed, prefetch_size=prefetch_size,
                    device=device) as data:
        for number in range(batches):
            asked = time.perf_counter()
            batch, meta = data.get()
            arrived = time.perf_counter()
            waits.append(arrived - asked)
            if number == 0:
                first = arrived - began
                slot_bytes = sum(t.numel() * t.element_size() for t in batch.values())
            if log is not None:
                say_decoder_warnings(meta.get("decoder", []), log)
            w = number % workers  # the prefetcher's rule: batch n comes from worker n % W
            worker_images[w] += share.local_batch
            for phase in PHASES:
                seconds[phase][w] += meta[f"{phase}_s"]
    return DryRun(batch_images=share.local_batch, slot_bytes=slot_bytes, first_s=first,
                  wall_s=arrived - began, waits_s=waits, worker_images=worker_images,
                  seconds=seconds)

