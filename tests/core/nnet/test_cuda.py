"""The CUDA lines of the trainer: device resolution, pinned staging, non_blocking copies,
rendering and decoding on the GPU, bf16/fp16 autocast with the gradient scaler, channels_last,
deterministic training, SyncBatchNorm over NCCL. They use the GPUs the machine has and skip what it
lacks, saying why (CI has no GPU); run them on a GPU machine with
`python -m pytest -q tests/core/nnet/test_cuda.py` (bench/gpu_check.py does)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _cuda import FP16_SCALE, SCORE_RTOL, decode_logits
from _tiny_nnet import batch_of, tiny_config

from core.data.chunks import deal
from core.data.prefetch import Prefetcher
from core.utils.device import configure, resolve_device
from tests._fake_data import FakeDB, fake_sample

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (this machine has none)")

# Without a GPU the module's mark skips, saying so (this one would say "this GPU").
needs_bf16 = pytest.mark.skipif(
    torch.cuda.is_available() and not torch.cuda.is_bf16_supported(including_emulation=False),
    reason="this GPU has no native bfloat16 (needs compute capability 8.0 or newer)")
needs_two = pytest.mark.skipif(torch.cuda.device_count() < 2,
                               reason="NCCL across processes needs 2 GPUs; this machine has "
                                      f"{torch.cuda.device_count()}")


@pytest.fixture(autouse=True)
def restore_global_settings():
    """TF32, cuDNN and determinism settings are process-wide: each test leaves them as found."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
             torch.are_deterministic_algorithms_enabled())
    yield
    (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
     torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic) = saved[:4]
    torch.use_deterministic_algorithms(saved[4])


@pytest.fixture(scope="module")
def db(coco128, tmp_path_factory):
    from tests._dense_reference import coco128_db
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


def cuda_factory(tmp_path, db, seed=0, **system):
    """The GPU's step (fused optimizer, static targets), eager unless `compile` is asked for:
    the compiled step is gpu_check's compile group, minutes these tests need not spend."""
    from core.nnet.py_factory import NetworkFactory
    torch.manual_seed(seed)
    return NetworkFactory(tiny_config(tmp_path, **{"compile": False, **system}), db,
                          device="cuda")


def test_cuda_resolves_to_the_current_gpu_and_the_factory_uses_it(tmp_path, db):
    current = torch.cuda.current_device()
    assert resolve_device("cuda") == torch.device("cuda", current)
    assert cuda_factory(tmp_path, db).device == torch.device("cuda", current)


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_batches_for_a_cuda_trainer_arrive_pinned_and_unchanged(device):
    system = tiny_config(".", batch_size=3, prefetch_size=4, seed=7)
    share = deal(system.batch_size, system.chunk_sizes, 0, 1)
    probe, _ = fake_sample(FakeDB(), 0, share.local_batch)
    with Prefetcher(FakeDB, fake_sample, probe, share=share, workers=2, data_aug=True,
                    stream="train", seed=7, prefetch_size=4,
                    device=resolve_device(device)) as data:
        pinned = [data.get()[0] for _ in range(4)]
    with Prefetcher(FakeDB, fake_sample, probe, share=share, workers=2, data_aug=True,
                    stream="train", seed=7, prefetch_size=4) as data:
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


def test_rendering_on_the_gpu_equals_the_cpu_and_never_waits_for_it(db):
    from core.sample.render import render_targets
    batch = batch_of(db, 4)
    on_gpu = {k: v.cuda() for k, v in batch.items()}
    render_targets(on_gpu, db.configs, 80)  # builds and uploads the cached kernel table
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a host sync raises
    try:
        rendered = render_targets(on_gpu, db.configs, 80)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for got, want in zip(rendered, render_targets(batch, db.configs, 80)):
        assert torch.equal(got.cpu(), want)


def test_decoding_on_the_gpu_equals_the_cpu_decoder_fed_the_gpu_scores():
    """CUDA's `exp` need not round like the CPU's, so the sigmoid scores may differ in the last
    bit (test_cuda_construction.py: 1 ulp changes dozens of the top scores). The decoding
    after the sigmoid (peak suppression, top-k, index split) must be the CPU's bit for bit when
    given the same scores; the scores themselves agree within a few ulps."""
    from core.models.py_utils.decode import nms_heatmap, peak_topk, sigmoid_scores, topk
    logits = decode_logits()
    on_gpu = peak_topk(logits.cuda(), 100, 3)
    gpu_scores = sigmoid_scores(logits.cuda()).cpu()
    for got, want in zip(on_gpu, topk(nms_heatmap(gpu_scores, 3), 100)):
        assert torch.equal(got.cpu(), want)
    torch.testing.assert_close(gpu_scores, sigmoid_scores(logits), rtol=SCORE_RTOL, atol=0)
    torch.testing.assert_close(on_gpu[0].cpu(), peak_topk(logits, 100, 3)[0],
                               rtol=SCORE_RTOL, atol=0)


@pytest.mark.parametrize("amp", [None, pytest.param("bf16", marks=needs_bf16), "fp16"])
def test_training_steps_are_finite_and_learn(tmp_path, db, amp):
    """fp16 starts at a scale its gradients fit in: at the scaler's default first scales
    (2^16..2^14) the heat head's bias gradient overflows fp16, three steps in a row are skipped
    and nothing is learnt in a short test (test_cuda_construction.py shows it on the CPU).
    Skipped steps are counted; learning is asserted over the steps taken."""
    nnet = cuda_factory(tmp_path, db, amp=amp)
    if amp == "fp16":
        nnet.scaler = torch.amp.GradScaler("cuda", init_scale=FP16_SCALE)
    batch = batch_of(db, 4)
    losses, skipped = [], 0
    for _ in range(5):
        losses.append(float(nnet.train(batch)[0]))
        skipped += nnet.scaler_skipped
    assert all(np.isfinite(losses))
    assert skipped <= 1, f"{skipped} of 5 fp16 steps skipped at scale {FP16_SCALE}"
    assert losses[-1] < losses[0], losses
    if amp == "fp16":
        assert nnet.scaler.is_enabled() and nnet.scaler.get_scale() > 0


def test_the_weight_average_updates_without_waiting_for_the_gpu(tmp_path, db):
    nnet = cuda_factory(tmp_path, db, ema_decay=0.99)
    nnet.train(batch_of(db, 2))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a host sync (a copy from pageable memory) raises
    try:
        nnet.ema.update(nnet.model)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert nnet.ema.steps == 2


def test_cuda_matches_cpu_in_fp32(tmp_path, db):
    from core.nnet.py_factory import NetworkFactory
    batch = batch_of(db, 2, data_aug=False)
    torch.manual_seed(0)
    cpu = NetworkFactory(tiny_config(tmp_path), db, device="cpu")
    gpu = cuda_factory(tmp_path, db, amp="fp32")  # "auto" is bf16 on a GPU that has it
    cpu.eval_mode(), gpu.eval_mode()
    torch.backends.cudnn.allow_tf32 = False  # restored by restore_global_settings
    torch.backends.cuda.matmul.allow_tf32 = False
    loss_cpu, _ = cpu.validate(batch)
    loss_gpu, _ = gpu.validate(batch)
    assert float(loss_gpu) == pytest.approx(float(loss_cpu), rel=1e-3)


@needs_bf16
def test_channels_last_on_cuda_trains_like_the_default(tmp_path, db):
    batch = batch_of(db, 2)
    default = cuda_factory(tmp_path, db, amp="bf16")
    last = cuda_factory(tmp_path, db, amp="bf16", channels_last=True)
    a, b = float(default.train(batch)[0]), float(last.train(batch)[0])
    assert b == pytest.approx(a, rel=2e-2)


def test_corner_pooling_keeps_channels_last_on_cuda():
    from core.models.py_utils.corner_pool import TopPool
    x = torch.randn(2, 8, 16, 16, device="cuda").contiguous(memory_format=torch.channels_last)
    out = TopPool()(x)
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()


def test_deterministic_training_repeats_bit_for_bit(tmp_path, db):
    configure(resolve_device("cuda"), deterministic=True, fixed_sizes=True)
    batch = batch_of(db, 4)
    runs = []
    for _ in range(2):
        nnet = cuda_factory(tmp_path, db, deterministic=True)
        runs.append([float(nnet.train(batch)[0]) for _ in range(3)]
                    + [float(sum(p.double().sum() for p in nnet.model.parameters()))])
    assert runs[0] == runs[1]


@needs_two
def test_sync_bn_over_nccl_trains_two_processes(tmp_path, coco128):
    from tests._train_helpers import run_train, train_cmd, write_config
    config_dir = write_config(tmp_path, coco128, sync_bn=True, batch_size=6,
                              chunk_sizes=[3, 3], max_iter=2)
    result = run_train(config_dir, cmd=train_cmd(config_dir, "Tiny128", "--distributed",
                                                 "--world-size", "1", "--procs-per-node", "2",
                                                 device="cuda"))
    assert result.returncode == 0, result.stderr
    assert "processes: 2" in result.stdout + result.stderr


@needs_two
def test_two_gpu_processes_train_the_tiny_model(tmp_path, coco128):
    from tests._train_helpers import run_train, train_cmd, write_config
    config_dir = write_config(tmp_path, coco128, batch_size=6, chunk_sizes=[3, 3], max_iter=2)
    result = run_train(config_dir, cmd=train_cmd(config_dir, "Tiny128", "--distributed",
                                                 "--world-size", "1", "--procs-per-node", "2",
                                                 device="cuda"))
    assert result.returncode == 0, result.stderr
    assert "device: cuda:0" in result.stdout and "processes: 2" in result.stdout
