"""core.data.chunks: the global batch cut into chunks and dealt to any number of processes."""

from __future__ import annotations

import pytest

from core.config import ConfigError, SystemConfig, load_config
from core.data.chunks import deal, global_chunks

SHIPPED = ("CornerNet", "CornerNet_Squeeze", "CornerNet_Saccade", "CornerNet-multi_scale",
           "CornerNet_Tiny")


def config(batch_size, chunk_sizes=None):
    return SystemConfig().update_config({"batch_size": batch_size, "chunk_sizes": chunk_sizes})


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_deals_to_one_to_eight_processes(name):
    system, _ = load_config(name)
    for world in range(1, 9):
        shares = [deal(system.batch_size, system.chunk_sizes, rank, world) for rank in range(world)]
        sizes = shares[0].sizes
        assert sum(sizes) == system.batch_size
        assert all(share.sizes == sizes for share in shares)
        counts = [share.count for share in shares]
        assert min(counts) >= 1 and max(counts) - min(counts) <= 1
        # Contiguous, complete, in order: the ranks' chunks concatenate to the chunk list.
        assert [j for share in shares for j in share.indices] == list(range(len(sizes)))
        assert sum(share.local_batch for share in shares) == system.batch_size
        # DDP averages over the ranks: P * (1/P) * sum of weights = 1 over the K chunks.
        assert sum(share.loss_weight * share.count for share in shares) / world == \
            pytest.approx(1.0)


def test_configured_chunks_are_kept_when_there_are_enough():
    system, _ = load_config("CornerNet")  # 49, [4, 5 x 9]
    shares = [deal(system.batch_size, system.chunk_sizes, rank, 3) for rank in range(3)]
    assert [share.mine for share in shares] == [[4, 5, 5, 5], [5, 5, 5], [5, 5, 5]]
    assert [share.local_batch for share in shares] == [19, 15, 15]
    assert shares[0].note is None
    assert shares[1].offsets[shares[1].first] == 19
    assert shares[2].loss_weight == pytest.approx(3 / 10)


def test_fewer_chunks_than_processes_are_cut_evenly_and_said():
    system, _ = load_config("CornerNet_Squeeze")  # 55, [13, 14, 14, 14]
    assert deal(system.batch_size, system.chunk_sizes, 0, 4).mine == [13]
    share = deal(system.batch_size, system.chunk_sizes, 0, 6)
    assert share.sizes == (10, 9, 9, 9, 9, 9)
    assert "cut into 6 chunks" in share.note and "[13, 14, 14, 14]" in share.note
    saccade, _ = load_config("CornerNet_Saccade")  # 48, [12 x 4]
    assert deal(saccade.batch_size, saccade.chunk_sizes, 0, 8).sizes == (6,) * 8
    # 4 chunks for 3 processes: 2, 1, 1
    assert deal(saccade.batch_size, saccade.chunk_sizes, 0, 3).note is None


def test_re_chunking_never_exceeds_the_largest_configured_chunk():
    sizes, note = global_chunks(40, [20, 20], 3)
    assert sizes == [14, 13, 13] and note
    sizes, _ = global_chunks(100, [30, 30, 40], 4)
    assert len(sizes) == 4 and max(sizes) <= 40 and sum(sizes) == 100


def test_without_chunk_sizes_one_process_has_one_chunk_and_more_are_cut():
    assert global_chunks(16, None, 1) == ([16], None)
    sizes, note = global_chunks(16, None, 3)
    assert sizes == [6, 5, 5] and "no chunk_sizes" in note


def test_a_batch_smaller_than_the_process_count_is_an_error():
    with pytest.raises(ConfigError, match="batch_size 2 cannot be dealt to 3 processes"):
        deal(2, None, 0, 3)


def test_a_share_carries_this_rank_batch_and_chunks():
    system = config(8, [2, 2, 1, 3])
    share = deal(system.batch_size, system.chunk_sizes, 1, 2)
    assert share.local_batch == 4 and share.mine == [1, 3] and share.batch_size == 8


def test_one_forward_per_rank_is_one_chunk_of_each_ranks_local_batch():
    """What BatchNorm sees of a rank that runs its chunks in one forward (the running
    statistics' merge is taken over these)."""
    sizes = [4, 5, 5, 5, 5, 5, 5, 5, 5, 5]  # CornerNet's 49 in 10 chunks, on 3 processes
    shares = [deal(49, sizes, rank, 3) for rank in range(3)]
    joined = [share.per_rank() for share in shares]
    assert [j.sizes for j in joined] == [(19, 15, 15)] * 3
    assert [(j.first, j.count, j.mine) for j in joined] == [(0, 1, [19]), (1, 1, [15]),
                                                            (2, 1, [15])]
    assert [j.local_batch for j in joined] == [s.local_batch for s in shares]
