"""Chunks: how a global batch is cut into chunks and dealt to the training processes.

The original ran one chunk per GPU under DataParallel and averaged the chunks' losses; the losses
normalise over their own chunk, so the chunk list is part of the objective. Here the chunks are
the unit of work for any process count P: the global batch is cut into `chunk_sizes` (or
re-chunked when there are fewer chunks than processes), the chunks are dealt to the processes in
order, as evenly as possible, and every process scales its chunks' losses by P / K (K chunks in
all) so that DDP's average of the gradients is the gradient of the mean over all K chunks:
exactly what one process running every chunk computes.

A chunk's images and random draws depend only on (seed, batch number, chunk index), never on
which process runs it, so the data stream is the same for every P with the same chunks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class Deal:
    """This process's part of every global batch.

    Attributes:
        sizes: every chunk of the global batch, in order (they sum to the batch size).
        world: the number of processes.
        rank: this process.
        first: index of this process's first chunk; its chunks are contiguous.
        count: how many chunks this process runs (counts differ by at most one between ranks).
        note: a sentence for the log when the configured chunks were replaced, else None.
    """

    sizes: tuple[int, ...]
    world: int
    rank: int
    first: int
    count: int
    note: str | None = None

    @property
    def batch_size(self) -> int:
        """The global batch."""
        return sum(self.sizes)

    @property
    def mine(self) -> list[int]:
        """The sizes of this process's chunks."""
        return list(self.sizes[self.first:self.first + self.count])

    @property
    def indices(self) -> range:
        """The global indices of this process's chunks."""
        return range(self.first, self.first + self.count)

    @property
    def offsets(self) -> list[int]:
        """Where each chunk of the global batch starts, in images."""
        starts, total = [], 0
        for size in self.sizes:
            starts.append(total)
            total += size
        return starts

    @property
    def local_batch(self) -> int:
        """The images this process builds and trains on per batch."""
        return sum(self.mine)

    def per_rank(self) -> Deal:
        """The same dealing with each process's chunks joined into one: what a process running
        its local batch in one forward is to BatchNorm (its running statistics' merge)."""
        counts = even_split(len(self.sizes), self.world)
        starts = [sum(counts[:rank]) for rank in range(self.world)]
        sizes = tuple(sum(self.sizes[start:start + count])
                      for start, count in zip(starts, counts))
        return Deal(sizes=sizes, world=self.world, rank=self.rank, first=self.rank, count=1,
                    note=self.note)

    @property
    def loss_weight(self) -> float:
        """What each chunk's loss is multiplied by before backward: P / K, so that DDP's mean
        over P processes of the summed, weighted chunk gradients is the mean over K chunks."""
        return self.world / len(self.sizes)


def even_split(total: int, parts: int) -> list[int]:
    """`total` cut into `parts` sizes differing by at most one, the larger first."""
    base, extra = divmod(total, parts)
    return [base + 1] * extra + [base] * (parts - extra)


def global_chunks(batch_size: int, chunk_sizes: list[int] | None,
                  world: int) -> tuple[list[int], str | None]:
    """The chunks of the global batch for `world` processes, and a note if they were changed.

    The configured chunks are kept when there are at least `world` of them. Otherwise (or
    without `chunk_sizes`) the batch is cut evenly into the fewest chunks that are at least
    `world` in number and no larger than the largest configured chunk.
    """
    if batch_size < world:
        raise ConfigError(f"system.batch_size {batch_size} cannot be dealt to {world} processes: "
                          f"every process needs at least one image; use at least {world} "
                          f"images or fewer processes (--procs-per-node)")
    configured = list(chunk_sizes) if chunk_sizes else [batch_size]
    if len(configured) >= world:
        return configured, None
    largest = max(configured)
    count = max(world, math.ceil(batch_size / largest))
    sizes = even_split(batch_size, count)
    what = f"system.chunk_sizes {configured}" if chunk_sizes else "the batch (no chunk_sizes)"
    note = (f"{what} gives fewer chunks than the {world} processes: the batch of {batch_size} "
            f"is cut into {count} chunks {sizes}, whose losses are averaged")
    return sizes, note


def deal(batch_size: int, chunk_sizes: list[int] | None, rank: int, world: int) -> Deal:
    """This process's share: the chunks of the global batch (system.batch_size, cut into
    system.chunk_sizes) dealt in order to `world` ranks."""
    sizes, note = global_chunks(batch_size, chunk_sizes, world)
    counts = even_split(len(sizes), world)
    return Deal(sizes=tuple(sizes), world=world, rank=rank, first=sum(counts[:rank]),
                count=counts[rank], note=note)
