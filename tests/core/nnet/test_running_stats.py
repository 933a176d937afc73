"""BatchNorm running statistics merged across ranks equal those of one process running every
chunk (two ranks simulated in one process: the all-reduce adds the other rank's share)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from core.config import SystemConfig
from core.data.chunks import deal
from core.nnet import running_stats
from core.nnet.running_stats import RunningStatsMerge


def model() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 5, 1),
                        nn.BatchNorm2d(5, momentum=0.3), nn.BatchNorm2d(5))
    net[5].eval()  # a frozen layer keeps its statistics
    return net


def chunks(count: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(2, 3, 6, 6, generator=g) * (1 + j) + j for j in range(count)]


def stats(net: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in net.state_dict().items() if "running" in k
            or "num_batches" in k}


@pytest.mark.parametrize("sizes, world", [([2, 2, 2], 2), ([2, 2, 2, 2, 2], 2), ([2] * 4, 3)])
def test_merged_statistics_equal_one_process_running_every_chunk(monkeypatch, sizes, world):
    system = SystemConfig().update_config({"batch_size": sum(sizes), "chunk_sizes": sizes})
    data = chunks(len(sizes))
    single = model()
    for x in data:
        single(x)
    nets, merges = [], []
    shares = [deal(system.batch_size, system.chunk_sizes, rank, world) for rank in range(world)]
    for share in shares:
        net = model()
        merge = RunningStatsMerge(net, share)
        merge.begin()
        for j in range(share.first, share.first + share.count):
            net(data[j])
        nets.append(net)
        merges.append(merge)
    flats = []
    # finish() computes each rank's share before its all-reduce: gather them all, then sum.
    monkeypatch.setattr(running_stats.dist, "all_reduce", lambda flat: flats.append(flat))
    before = [copy.deepcopy(net) for net in nets]
    for merge in merges:
        merge.finish()
    total = torch.stack(flats).sum(0)
    for net, merge, old in zip(nets, merges, before):
        net.load_state_dict(old.state_dict())
        monkeypatch.setattr(running_stats.dist, "all_reduce", lambda flat: flat.copy_(total))
        merge.finish()
        want, got = stats(single), stats(net)
        for key in want:
            if want[key].is_floating_point():
                torch.testing.assert_close(got[key], want[key], rtol=1e-6, atol=1e-7)
            else:
                assert torch.equal(got[key], want[key]), key
        assert torch.equal(got["5.running_mean"], torch.zeros(5))  # frozen: untouched
        assert int(got["1.num_batches_tracked"]) == len(sizes)
