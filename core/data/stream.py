"""Which images and which random draws batch n gets: a pure function of the seed and n.

The stream is a sequence of epochs, each a permutation of the split seeded from (seed, epoch);
chunk j of global batch n reads the stream positions `n * B + offset_j ...` and draws from a
generator seeded from (seed, stream, n, j). So a batch is the same whichever worker or process
builds it, and resuming is "start at batch n".
"""

from __future__ import annotations

import numpy as np

STREAMS = {"train": 0, "val": 1}


def batch_rng(seed: int, stream: str, number: int, chunk: int) -> np.random.Generator:
    """The generator that builds chunk `chunk` (counted over the global batch) of `number`."""
    return np.random.default_rng([seed, STREAMS[stream], number, chunk])


def stream_indices(seed: int, start: int, count: int, length: int, shuffle: bool,
                   cache: dict) -> np.ndarray:
    """Dataset indices at stream positions [start, start + count).

    The stream is a sequence of epochs, each a permutation of the `length` images seeded from
    (seed, epoch) (the identity without `shuffle`), identical in every process, so chunks at
    disjoint positions read disjoint images within an epoch. `cache` keeps recent permutations.
    """
    positions = np.arange(start, start + count)
    out = np.empty(positions.size, dtype=np.int64)
    for epoch in np.unique(positions // length):
        if epoch not in cache:
            if len(cache) > 4:
                cache.clear()
            cache[epoch] = (np.random.default_rng([seed, int(epoch)]).permutation(length)
                            if shuffle else np.arange(length))
        here = positions // length == epoch
        out[here] = cache[epoch][positions[here] % length]
    return out
