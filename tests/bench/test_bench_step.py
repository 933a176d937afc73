"""bench/bench_step.py's pieces that a GPU run relies on, checked on the CPU: the step's
breakdown (its parts time a real step, the optimizer's included) and what the sync count
counts."""

from __future__ import annotations

import pytest
import torch

from bench import bench_step
from bench.bench_syncs import gpu_step


@pytest.mark.parametrize("path", ["cpu", "gpu"])
def test_the_breakdown_times_each_part_of_a_step_that_updates_the_weights(path):
    if path == "gpu":  # the GPU's step (fused optimizer, one forward), built on the CPU
        step, batch = gpu_step("CornerNet_Tiny", 2, side=64)
    else:
        bench = bench_step.Bench("CornerNet_Tiny", 2, torch.device("cpu"), side=64)
        step, batches = bench.build(compile=False)
        batch = batches[0]
    before = [p.detach().clone() for p in step.nnet.model.parameters()]
    text = bench_step.breakdown(step, batch, reps=1)
    parts = [part.split(" ")[0] for part in text.split(", ")]
    assert parts == ["host-to-device", "render+normalise", "forward+loss", "backward",
                     "optimizer"], text
    moved = [not torch.equal(a, b) for a, b in zip(before, step.nnet.model.parameters())]
    assert sum(moved) > len(moved) // 2, "the breakdown's optimizer step changed no weights"


def test_the_sync_count_leaves_out_the_modes_own_prototype_warning():
    assert not bench_step.is_sync(
        "Synchronization debug mode is a prototype feature and does not yet detect all "
        "synchronizing operations (Triggered internally at Module.cpp:1003.)")
    assert bench_step.is_sync("called a synchronizing CUDA operation "
                              "(Triggered internally at CUDAFunctions.cpp:150.)")
