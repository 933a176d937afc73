"""The CUDA lines of the trainer: pinned staging, non_blocking copies, bf16/fp16 autocast with the
gradient scaler, channels_last, SyncBatchNorm over NCCL. They skip without a GPU (CI has none);
run them on a GPU machine with `python -m pytest -q tests/test_cuda.py`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.data.chunks import deal, rank_config
from core.data.prefetch import Prefetcher
from tests._fake_data import FakeDB, fake_sample
from tests.test_precision import batch_of, tiny_config

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (this machine has none)")


@pytest.fixture(scope="module")
def db(coco128, tmp_path_factory):
    from tests._dense_reference import coco128_db
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


def cuda_factory(tmp_path, db, seed=0, **system):
    from core.nnet.py_factory import NetworkFactory
    torch.manual_seed(seed)
    return NetworkFactory(tiny_config(tmp_path, **system), db, device="cuda")


def test_batches_for_a_cuda_trainer_arrive_pinned_and_unchanged():
    system = tiny_config(".", batch_size=3, prefetch_size=4, seed=7)
    share = deal(system, 0, 1)
    probe, _ = fake_sample(rank_config(system, share), FakeDB(), 0)
    with Prefetcher(FakeDB, fake_sample, system, probe, share=share, workers=2, data_aug=True,
                    stream="train", device=torch.device("cuda")) as data:
        pinned = [data.get()[0] for _ in range(4)]
    with Prefetcher(FakeDB, fake_sample, system, probe, share=share, workers=2, data_aug=True,
                    stream="train") as data:
        plain = [data.get()[0] for _ in range(4)]
    for a, b in zip(pinned, plain):
        assert all(value.is_pinned() for value in a.values())
        for key in a:
            assert torch.equal(a[key], b[key]), key


def test_non_blocking_copy_of_a_pinned_batch_is_exact(tmp_path, db):
    nnet = cuda_factory(tmp_path, db)
    batch = {k: v.pin_memory() for k, v in batch_of(db, 4).items()}
    on_device = nnet._to_device(batch)
    torch.cuda.synchronize()
    for key, value in batch.items():
        assert on_device[key].device.type == "cuda"
        assert torch.equal(on_device[key].cpu(), value), key


@pytest.mark.parametrize("amp", [None, "bf16", "fp16"])
def test_training_steps_are_finite_and_learn(tmp_path, db, amp):
    nnet = cuda_factory(tmp_path, db, amp=amp)
    batch = batch_of(db, 4)
    losses = [float(nnet.train(batch)[0]) for _ in range(4)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    if amp == "fp16":
        assert nnet.scaler.is_enabled() and nnet.scaler.get_scale() > 0


def test_cuda_matches_cpu_in_fp32(tmp_path, db):
    from core.nnet.py_factory import NetworkFactory
    batch = batch_of(db, 2, data_aug=False)
    torch.manual_seed(0)
    cpu = NetworkFactory(tiny_config(tmp_path), db, device="cpu")
    gpu = cuda_factory(tmp_path, db)
    cpu.eval_mode(), gpu.eval_mode()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    loss_cpu, _ = cpu.validate(batch)
    loss_gpu, _ = gpu.validate(batch)
    assert float(loss_gpu) == pytest.approx(float(loss_cpu), rel=1e-3)


def test_channels_last_on_cuda_trains_like_the_default(tmp_path, db):
    batch = batch_of(db, 2)
    default = cuda_factory(tmp_path, db, amp="bf16")
    last = cuda_factory(tmp_path, db, amp="bf16", channels_last=True)
    a, b = float(default.train(batch)[0]), float(last.train(batch)[0])
    assert b == pytest.approx(a, rel=2e-2)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="SyncBN over NCCL needs 2 GPUs")
def test_sync_bn_over_nccl_trains_two_processes(tmp_path, coco128):
    from tests._train_helpers import run_train, train_cmd, write_config
    config_dir = write_config(tmp_path, coco128, sync_bn=True, batch_size=6,
                              chunk_sizes=[3, 3], max_iter=2)
    result = run_train(config_dir, cmd=train_cmd(config_dir, "Tiny128", "--distributed",
                                                 "--procs-per-node", "2"))
    assert result.returncode == 0, result.stderr
    assert "processes: 2" in result.stdout + result.stderr
