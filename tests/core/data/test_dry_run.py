"""core.data.dry_run: the prefetch path alone, its counts, bytes and where the workers' time
goes."""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest
from _dense_reference import coco128_db
from _fake_data import FakeDB, fake_sample

from core.config import ConfigError, SystemConfig, load_config
from core.data.chunks import deal
from core.data.dry_run import DryRun, TimedSample, dry_run
from core.sample import sampler

DELAY = 0.02


def config(batch_size: int = 3, **extra) -> SystemConfig:
    return SystemConfig().update_config({"batch_size": batch_size, "prefetch_size": 4,
                                         "seed": 7, **extra})


def slow_sample(db, k_ind, batch_size, data_aug=True):
    """fake_sample plus DELAY seconds of work outside db.read_image per call."""
    time.sleep(DELAY)
    return fake_sample(db, k_ind, batch_size, data_aug)


def run(workers: int, batches: int, make_db=FakeDB, sample=fake_sample, **extra) -> DryRun:
    system = config(**extra)
    return dry_run(make_db, sample, deal(system.batch_size, None, 0, 1), workers, batches,
                   seed=system.seed, prefetch_size=system.prefetch_size)


def test_counts_images_per_batch_and_per_worker():
    result = run(workers=2, batches=5)
    assert result.images == 15
    assert result.worker_images == [9, 6]  # batches 0, 2, 4 and 1, 3
    assert len(result.waits_s) == 5
    assert result.wall_s >= result.first_s > 0


def test_bytes_per_image_is_the_ring_slot_over_its_images():
    # fake_sample ships per image a (2, 2, 3) uint8 image (12 bytes) and one float64 (8 bytes).
    result = run(workers=1, batches=2, batch_size=3)
    assert result.slot_bytes == 3 * (12 + 8)
    assert result.bytes_per_image == 20


def test_slow_reads_are_counted_as_reading():
    result = run(workers=1, batches=4, make_db=functools.partial(FakeDB, delay=DELAY),
                 chunk_sizes=[1, 2])  # chunk timings add up within a batch
    assert sum(result.seconds["read"]) >= result.images * DELAY
    shares = result.shares
    assert shares["read"] > shares["augment"] + shares["queue"]
    assert sum(shares.values()) == pytest.approx(1.0)


def test_slow_sampling_is_counted_as_augmenting_not_reading():
    result = run(workers=1, batches=4, sample=slow_sample)
    assert sum(result.seconds["augment"]) >= 4 * DELAY
    assert result.shares["augment"] > result.shares["read"] + result.shares["queue"]


def test_per_worker_rate_is_images_over_building_time():
    result = run(workers=2, batches=4)
    for w, rate in enumerate(result.worker_images_per_s):
        busy = result.seconds["read"][w] + result.seconds["augment"][w]
        assert rate == pytest.approx(result.worker_images[w] / busy)


def test_timed_sample_splits_reading_augmenting_and_queueing():
    db = FakeDB(length=6, delay=DELAY)
    sample = TimedSample(slow_sample)
    first, _ = sample(db, 0, 2)
    time.sleep(DELAY)
    second, _ = sample(db, 2, 2)
    assert first["meta"]["queue_s"] == 0.0  # nothing before a worker's first chunk
    assert second["meta"]["queue_s"] >= DELAY
    for batch in (first, second):
        assert batch["meta"]["read_s"] >= 2 * DELAY
        assert batch["meta"]["augment_s"] >= DELAY
        assert batch["meta"]["skipped"] == []  # the sampler's own meta is kept
    assert np.array_equal(second["image"][:, 0, 0, 0], [2, 3])


def test_report_names_every_figure():
    text = run(workers=2, batches=3).report()
    for words in ("3 batches of 3 images (9 images) from 2 workers", "images/s", "per worker",
                  "bytes per image crossing processes: 20 B", "reading", "augmenting",
                  "queueing", "ms after the first"):
        assert words in text


def test_needs_at_least_one_batch():
    with pytest.raises(ConfigError, match="at least 1 batch"):
        run(workers=1, batches=0)


def test_real_coco128_batches_ship_the_documented_arrays(coco128, tmp_path):
    system, _ = load_config("CornerNet_Squeeze")
    system = system.replace(batch_size=2, chunk_sizes=None, prefetch_size=2, seed=3)
    make_db = functools.partial(coco128_db, coco128, "CornerNet_Squeeze", tmp_path)
    db = make_db()
    (height, width), objects = db.configs["input_size"], db.configs["max_objects"]
    result = dry_run(make_db, sampler("cornernet"), deal(2, None, 0, 1), workers=1, batches=2,
                     seed=3, prefetch_size=2)
    # image uint8, colour affine (3, 4) float32, boxes (M, 4) float32, classes (M,) int64,
    # num_objects int64: see core/sample/__init__.py
    assert result.bytes_per_image == height * width * 3 + 48 + objects * 16 + objects * 8 + 8
    assert result.images == 4
    assert sum(result.seconds["read"]) > 0 and sum(result.seconds["augment"]) > 0
