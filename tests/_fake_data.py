"""A dataset and sampler with no files, for testing the prefetch machinery by itself."""

from __future__ import annotations

import time

import numpy as np


class FakeDB:
    """`length` images; image `i` is a 2x2x3 block of value i. Image `fail_at` cannot be read."""

    def __init__(self, length: int = 10, fail_at: int | None = None, delay: float = 0.0):
        self.db_inds = np.arange(length)
        self.rng = np.random.default_rng(0)
        self.fail_at, self.delay = fail_at, delay

    def set_rng(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def image_path(self, ind: int) -> str:
        return f"fake/{ind:03d}.jpg"

    def read_image(self, ind: int) -> np.ndarray:
        if ind == self.fail_at:
            raise OSError(f"cannot decode {self.image_path(ind)}")
        time.sleep(self.delay)
        return np.full((2, 2, 3), ind, np.uint8)


def fake_sample(db, k_ind, size, data_aug=True):
    """Records which images a batch holds and one random draw per image (the call form of
    `core.sample.sampler`)."""
    image = np.zeros((size, 2, 2, 3), np.uint8)
    noise = np.zeros((size,), np.float64)
    for b in range(size):
        image[b] = db.read_image(db.db_inds[k_ind])
        noise[b] = db.rng.random() if data_aug else 0.0
        k_ind = (k_ind + 1) % len(db.db_inds)
    return {"image": image, "noise": noise, "meta": {"skipped": []}}, k_ind
