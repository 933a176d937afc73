"""bench/bench_syncs.py: the GPU's training step, built on the CPU, reads nothing back from the
device on an iteration that does not display; the counter sees the reads where they are."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from bench import bench_syncs
from core.nnet.py_factory import NetworkFactory
from core.utils.host_reads import counting_host_reads

pytestmark = pytest.mark.slow  # each trains CornerNet_Tiny a few steps in bf16 (~10 s)


@pytest.fixture(scope="module")
def tiny_rows():
    return bench_syncs.training_reads("CornerNet_Tiny", batch=2, steps=1)


def test_a_non_display_step_of_the_gpu_path_reads_nothing_back(tiny_rows):
    quiet = tiny_rows[0]
    assert quiet.label == "CornerNet_Tiny training"
    assert quiet.per_step == 0, quiet.reads


def test_a_display_step_reads_the_loss_terms_and_gradient_norm(tiny_rows):
    shown = tiny_rows[1]
    # settle reads the stacked losses once (tolist), the display reads loss, 2+ terms and the
    # gradient norm (float: _local_scalar_dense each)
    assert shown.reads["tolist"] == 1
    assert shown.reads["_local_scalar_dense"] >= 4


def test_the_cpus_own_step_is_seen_reading(tiny_rows):
    """The CPU keeps torch's default Adam (one tensor at a time, each step counter read on the
    host) and reads the loss's finiteness to skip: the counter sees both."""
    step, data = bench_syncs.gpu_step("CornerNet_Tiny", 2)
    cpu = dataclasses.replace(step.nnet.path, fused=False)
    nnet = NetworkFactory(step.nnet.system_config, SimpleNamespace(configs=step.nnet.db_configs),
                          device="cpu", path=cpu)
    nnet.train(data)
    with counting_host_reads() as counted:
        nnet.train(data)
    params = len(nnet.optimizer.param_groups[0]["params"])
    assert counted.reads["_local_scalar_dense"] == params + 1  # each counter, and bool(bad)


def test_the_bench_prints_the_step_and_the_decode_of_each_model(capsys):
    assert bench_syncs.main(["--models", "CornerNet_Tiny", "--steps", "1",
                             "--decode-batch", "2"]) == 0
    assert capsys.readouterr().out == (
        "CornerNet_Tiny training: host reads per non-display step: 0\n"
        "CornerNet_Tiny test: host reads per decode batch: 0\n")


def test_the_decode_row_counts_what_the_decode_reads(monkeypatch):
    """The decode row is the decode's own count: a decode that reads a value back (as the
    nonzero top-k did) shows in it, by op."""
    import bench.bench_decode_syncs as decode_syncs

    real = decode_syncs.decode_reads

    def reading(config, batch):
        import torch

        from core.utils.host_reads import counting_host_reads

        reads = real(config, batch)
        with counting_host_reads() as extra:
            torch.nonzero(torch.ones(3))
        return reads + extra.reads
    monkeypatch.setattr(decode_syncs, "decode_reads", reading)
    [row] = bench_syncs.decode_rows(["CornerNet_Tiny"], 2)
    assert row.per_step == 1 and row.reads == {"nonzero": 1}
    assert bench_syncs.line(row) == "CornerNet_Tiny test: host reads per decode batch: 1"
