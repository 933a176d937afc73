"""Autocast casts each weight once per step, not once per chunk (core.nnet.parallel.casts_once),
and the step computes exactly what a region per chunk computed."""

from __future__ import annotations

import contextlib

import pytest
import torch
from _tiny_nnet import batch_of, tiny_config
from torch.utils._python_dispatch import TorchDispatchMode

from core.data.chunks import deal
from core.nnet import parallel
from core.nnet.py_factory import NetworkFactory
from tests._dense_reference import coco128_db


@pytest.fixture(scope="module")
def db(coco128, tmp_path_factory):
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


class WeightCasts(TorchDispatchMode):
    """Counts the lower-precision copies made of trainable leaf tensors (the weights)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16 \
                and args[0].requires_grad and args[0].is_leaf:
            self.count += 1
        return func(*args, **kwargs)


def bf16_step(tmp_path, db, chunks: int) -> tuple[int, list[torch.Tensor]]:
    torch.manual_seed(0)
    config = tiny_config(tmp_path, amp="bf16", batch_size=2,
                         chunk_sizes=[1, 1] if chunks == 2 else None)
    share = deal(config.batch_size, config.chunk_sizes, 0, 1)
    nnet = NetworkFactory(config, db, device="cpu", share=share)
    with WeightCasts() as casts:
        nnet.train(batch_of(db, 2))
    return casts.count, [p.grad for p in nnet.model.parameters() if p.grad is not None]


@pytest.mark.slow  # 3 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_a_step_of_two_chunks_casts_each_weight_once_and_equals_a_region_per_chunk(
        tmp_path, db, monkeypatch):
    once, _ = bf16_step(tmp_path, db, chunks=1)
    two, grads = bf16_step(tmp_path, db, chunks=2)
    assert once > 10 and two == once
    monkeypatch.setattr(parallel, "casts_once", lambda _: contextlib.nullcontext())
    per_chunk, old_grads = bf16_step(tmp_path, db, chunks=2)  # the region per chunk of before
    assert per_chunk == 2 * once
    assert all(torch.equal(a, b) for a, b in zip(grads, old_grads))
