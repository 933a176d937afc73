"""The export-only pieces equal what training and testing use: max_scan = cummax, and the dense
corner search gives the decoder's rows (today's and the original's, decode.json)."""

import json
from pathlib import Path

import pytest
import torch

from core.models.py_utils.corner_pool import directional_max, max_scan
from core.models.py_utils.decode import decode, dense_peak_topk, peak_topk

DIRECTIONS = [(2, True), (2, False), (3, True), (3, False)]  # top, bottom, left, right pools


@pytest.mark.parametrize(("dim", "reverse"), DIRECTIONS)
@pytest.mark.parametrize("shape", [(2, 3, 37, 29), (1, 2, 1, 64), (1, 1, 65, 3)])
def test_max_scan_equals_cummax_bit_for_bit_with_ties(dim, reverse, shape):
    generator = torch.Generator().manual_seed(sum(shape) + dim + reverse)
    # Five values only: long runs of equal maxima, and -inf / inf / -0.0 among them.
    values = torch.tensor([-1.5, 0.0, 2.25, float("-inf"), float("inf"), -0.0])
    x = values[torch.randint(0, len(values), shape, generator=generator)]
    noisy = x + torch.randn(shape, generator=generator).round()

    for tensor in (x, noisy):
        expected = directional_max(tensor, dim, reverse)
        got = max_scan(tensor, dim, reverse, max_length=tensor.shape[dim])
        assert torch.equal(got, expected)
        assert torch.equal(got.signbit(), expected.signbit())


def test_max_scan_is_exact_up_to_max_length_and_not_beyond():
    x = torch.arange(20.0).view(1, 1, 1, 20)  # increasing: the reverse scan must see the end
    assert torch.equal(max_scan(x, 3, True, 32), torch.full_like(x, 19.0))
    short = max_scan(x, 3, True, 4)  # 4 positions seen: x + 3, capped at 19
    assert torch.equal(short, (x + 3).clamp(max=19))


def _reference_inputs(reference: Path) -> tuple[dict, dict, list]:
    ref = json.loads((reference / "decode.json").read_text())
    inputs = {name: torch.tensor(spec["data"], dtype=getattr(torch, spec["dtype"]))
              .view(spec["shape"]) for name, spec in ref["inputs"].items()}
    return inputs, ref["kwargs"], ref["valid_rows_per_image"]


def test_dense_decode_equals_todays_decoder_and_the_original(reference: Path):
    inputs, kwargs, valid_rows = _reference_inputs(reference)

    dense = decode(**inputs, **kwargs, corners=dense_peak_topk)
    today = decode(**inputs, **kwargs)

    for image, rows in enumerate(valid_rows):
        n_valid = len(rows)
        assert int((dense[image, :, 4] > -1).sum()) == n_valid
        assert torch.equal(dense[image, :n_valid], today[image, :n_valid])
        expected = torch.tensor(rows, dtype=torch.float32)
        torch.testing.assert_close(dense[image, :n_valid, :7], expected[:, :7], rtol=1e-5,
                                   atol=1e-5)
        assert torch.equal(dense[image, :n_valid, 7], expected[:, 7])


def test_dense_corners_equal_peak_topk_on_tie_free_maps():
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 5, 24, 31, generator=generator) * 3

    dense = dense_peak_topk(logits, 40, kernel=3)
    fast = peak_topk(logits, 40, kernel=3)

    assert len(set(fast[0].flatten().tolist())) == fast[0].numel()  # no ties among the best
    for got, expected in zip(dense, fast):
        assert got.dtype == expected.dtype
        assert torch.equal(got, expected)
