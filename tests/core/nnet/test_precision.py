"""Runtime options of the factory on CPU: bf16 autocast trains, fp16 and SyncBN are refused with a
clear error, the fp16 gradient scaler's state survives a snapshot, one forward of the whole local
batch (the SyncBN path) gives the per-chunk losses, channels_last changes nothing but the layout."""

from __future__ import annotations

import pytest
import torch
from _tiny_nnet import batch_of, factory, tiny_config

from core.config import ConfigError
from core.data.chunks import deal
from tests._dense_reference import coco128_db


@pytest.fixture(scope="module")
def db(coco128, tmp_path_factory):
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"),
                      categories=80)


@pytest.mark.slow  # 4 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_bf16_autocast_trains_on_cpu_with_float32_losses(tmp_path, db):
    nnet = factory(tmp_path, db, amp="bf16")
    before = {k: v.clone() for k, v in nnet.model.state_dict().items()}
    batch = batch_of(db, 4)
    losses = [nnet.train(batch) for _ in range(3)]
    for loss, terms in losses:
        assert loss.dtype == torch.float32 and torch.isfinite(loss)
        assert all(torch.isfinite(value) for value in terms.values())
    assert float(losses[2][0]) < float(losses[0][0])  # it learns the batch it sees three times
    changed = [k for k, v in nnet.model.state_dict().items()
               if v.is_floating_point() and not torch.equal(v, before[k])]
    assert len(changed) > len(before) // 2


def test_bf16_forward_differs_from_fp32_but_stays_close(tmp_path, db):
    batch = batch_of(db, 2, data_aug=False)
    fp32, bf16 = factory(tmp_path, db), factory(tmp_path, db, amp="bf16")
    fp32.eval_mode(), bf16.eval_mode()
    loss32, _ = fp32.validate(batch)
    loss16, _ = bf16.validate(batch)
    assert float(loss32) != float(loss16)  # autocast really ran in bfloat16
    assert float(loss16) == pytest.approx(float(loss32), rel=0.05)


@pytest.mark.parametrize("system, words", [
    ({"amp": "fp16"}, "fp16\" needs a GPU"),
    ({"sync_bn": True}, "sync_bn needs GPUs"),
])
def test_gpu_only_settings_are_a_config_error_on_cpu(tmp_path, db, system, words):
    with pytest.raises(ConfigError, match=words):
        factory(tmp_path, db, **system)


def test_unknown_amp_value_names_the_choices(tmp_path):
    with pytest.raises(ConfigError, match="bf16.*fp16"):
        tiny_config(tmp_path, amp="fp8")


def test_gradient_scaler_state_is_restored_from_the_snapshot(tmp_path, db):
    """fp16 needs a GPU; the scaler's save/load path is the same with an enabled CPU scaler."""
    nnet = factory(tmp_path, db)
    nnet.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=2)
    batch = batch_of(db, 4)
    for _ in range(3):
        nnet.train(batch)
    saved = nnet.scaler.state_dict()
    assert saved["scale"] == 2.0 ** 9 and saved["_growth_tracker"] == 1
    nnet.save_params(3)

    resumed = factory(tmp_path, db, seed=1)
    resumed.scaler = torch.amp.GradScaler("cpu", growth_interval=2)
    resumed.load_params(3)
    assert resumed.scaler.state_dict() == saved
    nnet.train(batch)
    resumed.train(batch)
    assert nnet.scaler.state_dict() == resumed.scaler.state_dict()
    for key, value in nnet.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[key], value), key


def test_one_forward_of_the_local_batch_gives_each_chunks_loss(tmp_path, db):
    """The SyncBN path runs the whole local batch at once and cuts the outputs per chunk; with
    batch norm in eval mode (no batch statistics) that must equal one forward per chunk."""
    system = {"batch_size": 5, "chunk_sizes": [3, 2]}
    share = deal(5, [3, 2], rank=0, world=1)
    per_chunk = factory(tmp_path, db, **system)
    per_chunk.share = share
    whole = factory(tmp_path, db, **system)
    whole.share, whole.one_forward = share, True
    per_chunk.eval_mode(), whole.eval_mode()
    batch = batch_of(db, 5, data_aug=False)
    loss_a, terms_a = per_chunk.validate(batch)
    loss_b, terms_b = whole.validate(batch)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-6)
    for key in terms_a:
        torch.testing.assert_close(terms_b[key], terms_a[key], rtol=1e-5, atol=1e-6)


def test_channels_last_trains_like_the_default_layout(tmp_path, db):
    batch = batch_of(db, 2)
    default, last = factory(tmp_path, db), factory(tmp_path, db, channels_last=True)
    weight = last.model.state_dict()["hg.pre.0.conv.weight"]
    assert weight.is_contiguous(memory_format=torch.channels_last)
    for _ in range(2):
        loss_a, _ = default.train(batch)
        loss_b, _ = last.train(batch)
        torch.testing.assert_close(loss_b, loss_a, rtol=1e-4, atol=1e-5)
