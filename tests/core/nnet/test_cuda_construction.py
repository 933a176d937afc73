"""The constructions of two CUDA tests, checked where CI runs: on the CPU.

test_cuda.py skips without a GPU, so a test that fails by its own construction there would
only be found by the one session that gets a GPU. Two did: the fp16 training test started at the
gradient scaler's default scale, at which the gradients overflow fp16, and the decode test asked
CUDA's sigmoid to round like the CPU's.
"""

from __future__ import annotations

import pytest
import torch
from _cuda import FP16_SCALE, SCORE_RTOL, decode_logits
from _data import is_full
from _tiny_nnet import batch_of, tiny_config

from core.models.py_utils.decode import peak_topk, sigmoid_scores
from core.nnet.py_factory import NetworkFactory
from tests._dense_reference import coco128_db

FP16_MAX = torch.finfo(torch.float16).max


@pytest.fixture(scope="module")
def db(coco128, tmp_path_factory):  # the CUDA test's data (tests/core/nnet/test_cuda.py), whichever
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


def test_fp16_at_the_scalers_first_scales_overflows_and_the_tests_scale_fits(tmp_path, db,
                                                                             coco128):
    """The gradients of the CUDA training test's first step (its model, seed and batch), in
    float32 on the CPU. A parameter gradient is a sum that fp16 must hold after scaling; where
    |g| * scale exceeds 65504 the scaler finds inf and skips the step. The numbers are the full
    coco128's (the CUDA test's data where it is found); on the repository's 28 images the
    first batch differs (largest gradient 3.5, not 4.6) and 2 steps are skipped, not 3."""
    torch.manual_seed(0)  # as test_cuda.cuda_factory
    nnet = NetworkFactory(tiny_config(tmp_path), db, device="cpu")
    nnet.train(batch_of(db, 4))
    grads = {name: float(p.grad.abs().max()) for name, p in nnet.model.named_parameters()
             if p.grad is not None}
    name, largest = max(grads.items(), key=lambda item: item[1])
    assert "heat" in name and name.endswith("bias"), (name, largest)

    # The old construction: GradScaler's default first scale 2^16, halved after each overflow,
    # overflows at 2^16, 2^15 and 2^14, so of its 4 steps only the last one was taken, after
    # its loss was computed: the four losses came from the same weights, and the test's
    # `losses[-1] < losses[0]` could not hold.
    scale, skipped = torch.amp.GradScaler("cpu").get_scale(), 0
    while largest * scale > FP16_MAX:
        skipped, scale = skipped + 1, scale / 2
    assert skipped >= 1
    if is_full(coco128):
        assert skipped == 3 and scale == 2.0 ** 13
    # The new one starts where every gradient fits eight times over.
    assert largest * FP16_SCALE * 8 < FP16_MAX


def test_one_ulp_of_sigmoid_changes_many_decoded_scores_but_not_the_new_comparison():
    """Scores 1 ulp apart (a GPU's exp rounding otherwise) fail a bitwise comparison of the
    decoded scores with the CPU's, and pass the new test's tolerance."""
    logits = decode_logits()
    scores = sigmoid_scores(logits)
    nudged = torch.nextafter(scores, torch.ones_like(scores))  # every score 1 ulp up
    from core.models.py_utils.decode import nms_heatmap, topk
    cpu = peak_topk(logits, 100, 3)
    other = topk(nms_heatmap(nudged, 3), 100)
    changed = int((other[0] != cpu[0]).sum())
    assert changed > 0  # the old `torch.equal` of scores fails
    torch.testing.assert_close(other[0], cpu[0], rtol=SCORE_RTOL, atol=0)
    for got, want in zip(other[1:], cpu[1:]):  # a uniform nudge keeps the order
        assert torch.equal(got, want)
