"""Test-time decoding: parity with the original `_decode` and hand-made cases with known answers."""

import json
from pathlib import Path

import pytest
import torch

from core.models.py_utils import decode as decode_module
from core.models.py_utils.decode import (
    decode,
    dense_topk,
    nms_heatmap,
    peak_topk,
    sigmoid_scores,
    topk,
    transpose_and_gather,
)
from core.utils.host_reads import counting_host_reads

BACKGROUND = -10.0


def _tensor(spec: dict) -> torch.Tensor:
    # Values are stored with 9 significant digits: float64 parse then float32 cast is exact.
    return torch.tensor(spec["data"], dtype=getattr(torch, spec["dtype"])).view(spec["shape"])


def _heads(size: int = 8, classes: int = 2) -> dict[str, torch.Tensor]:
    """One image of background heads: low heat, zero tags and offsets."""
    return {
        "tl_heat": torch.full((1, classes, size, size), BACKGROUND),
        "br_heat": torch.full((1, classes, size, size), BACKGROUND),
        "tl_tag": torch.zeros(1, 1, size, size),
        "br_tag": torch.zeros(1, 1, size, size),
        "tl_regr": torch.zeros(1, 2, size, size),
        "br_regr": torch.zeros(1, 2, size, size),
    }


def _place(heads, tl=(0, 1, 2), br=(0, 5, 6), tl_tag=0.2, br_tag=0.3):
    """Put one strong tl corner and one strong br corner, each at (class, y, x)."""
    heads["tl_heat"][(0, *tl)] = 5.0
    heads["br_heat"][(0, *br)] = 4.0
    heads["tl_tag"][0, 0, tl[1], tl[2]] = tl_tag
    heads["br_tag"][0, 0, br[1], br[2]] = br_tag
    return heads


def _single_pair(heads, **kwargs) -> torch.Tensor:
    # K=1 keeps only the strongest corner of each type, so exactly one pair is judged.
    return decode(**heads, K=1, kernel=3, ae_threshold=0.5, num_dets=1, **kwargs)[0, 0]


def test_decode_matches_original_valid_rows(reference: Path):
    ref = json.loads((reference / "decode.json").read_text())
    inputs = {name: _tensor(spec) for name, spec in ref["inputs"].items()}

    dets = decode(**inputs, **ref["kwargs"])

    assert dets.shape == tuple(ref["output_shape"]) and dets.dtype == torch.float32
    for image, rows in enumerate(ref["valid_rows_per_image"]):
        expected = torch.tensor(rows, dtype=torch.float32)
        n_valid = len(rows)
        assert int((dets[image, :, 4] > -1).sum()) == n_valid
        torch.testing.assert_close(dets[image, :n_valid, :7], expected[:, :7], rtol=1e-5, atol=1e-5)
        assert torch.equal(dets[image, :n_valid, 7], expected[:, 7])
        assert torch.all(dets[image, n_valid:, 4] == -1)


def test_matching_corners_give_their_box_with_offsets():
    heads = _place(_heads())
    heads["tl_regr"][0, :, 1, 2] = torch.tensor([0.25, 0.5])
    heads["br_regr"][0, :, 5, 6] = torch.tensor([0.75, 0.125])
    tl_score, br_score = torch.sigmoid(torch.tensor(5.0)), torch.sigmoid(torch.tensor(4.0))

    row = _single_pair(heads)

    expected = torch.stack(
        [
            torch.tensor(2.25),
            torch.tensor(1.5),
            torch.tensor(6.75),
            torch.tensor(5.125),
            (tl_score + br_score) / 2,
            tl_score,
            br_score,
            torch.tensor(0.0),
        ]
    )
    torch.testing.assert_close(row, expected)


def test_class_is_reported_zero_based():
    row = _single_pair(_place(_heads(), tl=(1, 1, 2), br=(1, 5, 6)))
    assert row[7] == 1 and row[4] > 0.9


def test_embeddings_further_apart_than_threshold_are_rejected():
    row = _single_pair(_place(_heads(), tl_tag=0.2, br_tag=0.8))
    assert row[4] == -1


def test_inverted_corners_are_rejected():
    row = _single_pair(_place(_heads(), tl=(0, 5, 6), br=(0, 1, 2)))
    assert row[4] == -1


def test_class_mismatch_is_rejected():
    row = _single_pair(_place(_heads(), tl=(0, 1, 2), br=(1, 5, 6)))
    assert row[4] == -1


def test_no_border_rejects_corners_on_the_map_edge():
    heads = _place(_heads(), tl=(0, 3, 0), br=(0, 5, 6))
    assert _single_pair(heads, no_border=False)[4] > 0.9
    assert _single_pair(heads, no_border=True)[4] == -1


def test_nms_keeps_only_local_maxima():
    heat = torch.tensor([[[[0.1, 0.5, 0.2], [0.3, 0.4, 0.9], [0.0, 0.2, 0.1]]]])
    kept = nms_heatmap(heat, kernel=3)
    assert torch.equal(kept, torch.where(heat == 0.9, heat, 0))
    assert torch.equal(nms_heatmap(heat, kernel=1), heat)


def test_topk_splits_flat_index_into_class_y_x():
    scores = torch.zeros(1, 3, 4, 5)
    scores[0, 2, 3, 1] = 1.0
    scores[0, 0, 1, 4] = 0.5
    values, inds, clses, ys, xs = topk(scores, K=2)
    assert values.tolist() == [[1.0, 0.5]]
    assert inds.tolist() == [[3 * 5 + 1, 1 * 5 + 4]]
    assert clses.tolist() == [[2, 0]]
    assert ys.tolist() == [[3.0, 1.0]] and xs.tolist() == [[1.0, 4.0]]


def test_transpose_and_gather_picks_channel_vectors():
    feat = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).view(2, 3, 4, 5)
    ind = torch.tensor([[0, 7], [19, 6]])
    out = transpose_and_gather(feat, ind)
    assert out.shape == (2, 2, 3)
    for b in range(2):
        for m in range(2):
            y, x = divmod(int(ind[b, m]), 5)
            assert torch.equal(out[b, m], feat[b, :, y, x])


def test_invalid_sizes_raise_a_clear_error():
    with pytest.raises(ValueError, match="num_dets"):
        decode(**_heads(), K=2, num_dets=5)


# ---- the fast corner search equals the dense computation ---------------------------------

def _maps(seed: int, shape, spread: float = 1.0, offset: float = -6.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator) * spread + offset


def adversarial_maps():
    """(name, logits, K) cases where a shortcut would go wrong."""
    shape = (2, 40, 24, 40)  # enough rows for the fast path to be tried at K <= 60
    rounded = _maps(1, shape, spread=2).round()                    # many exact ties
    flat = torch.full(shape, -3.0)                                 # every pixel equal
    plateau = _maps(2, shape)
    plateau[:, :, 3:9, 5:15] = 30.0                                # sigmoid saturates to 1
    few_peaks = -(torch.arange(24.0).view(24, 1) + torch.arange(40.0)).expand(shape).clone()
    few_peaks[0, 1, 10, 10] = 5.0                                  # 1 peak per class
    empty_class = _maps(3, shape)
    empty_class[:, 2:] = -1e4                                      # sigmoid underflows to 0
    near = _maps(4, shape, spread=1e-6, offset=2.0)               # scores a few ulps apart
    return [("rounded", rounded, 30), ("all equal", flat, 25), ("saturated", plateau, 40),
            ("fewer maxima than K", few_peaks, 50), ("empty class", empty_class, 60),
            ("ulp apart", near, 20)]


@pytest.mark.parametrize("kernel", [1, 3, 5])
def test_peak_topk_equals_dense_on_random_maps(kernel):
    for seed, (shape, K) in enumerate([((1, 80, 32, 48), 20), ((2, 80, 64, 96), 100),
                                       ((3, 3, 16, 16), 20), ((1, 7, 9, 200), 11)]):
        logits = _maps(seed, shape, spread=1 + seed)
        for got, expected in zip(peak_topk(logits, K, kernel), dense_topk(logits, K, kernel)):
            assert torch.equal(got, expected), f"shape {shape}"


@pytest.mark.parametrize("kernel", [1, 3])
@pytest.mark.parametrize("case", adversarial_maps(), ids=lambda case: case[0])
def test_peak_topk_equals_dense_on_adversarial_maps(case, kernel):
    _, logits, K = case
    for got, expected in zip(peak_topk(logits, K, kernel), dense_topk(logits, K, kernel)):
        assert torch.equal(got, expected)


def test_peak_topk_scores_only_candidates_on_a_peaky_map(monkeypatch):
    logits = _maps(6, (2, 80, 64, 96))
    expected = dense_topk(logits, 100, 3)
    monkeypatch.setattr(decode_module, "nms_heatmap", None)  # the dense path would call it
    for got, want in zip(peak_topk(logits, 100, 3), expected):
        assert torch.equal(got, want)


def test_equal_scores_are_ordered_by_flat_index():
    scores = torch.zeros(1, 2, 3, 4)
    scores[0, 1, 0, 0] = scores[0, 0, 2, 3] = scores[0, 0, 0, 1] = 0.5
    values, inds, clses, *_ = topk(scores, K=4)
    assert values.tolist() == [[0.5, 0.5, 0.5, 0.0]]
    assert (clses * 12 + inds).tolist() == [[1, 11, 12, 0]]


def test_sigmoid_scores_do_not_depend_on_position():
    logits = _maps(5, (3, 80, 37, 41), spread=4, offset=0)
    whole = sigmoid_scores(logits).reshape(-1)
    picked = torch.randperm(logits.numel(), generator=torch.Generator().manual_seed(0))[:999]
    assert torch.equal(sigmoid_scores(logits.reshape(-1)[picked]), whole[picked])
    torch.testing.assert_close(whole, logits.reshape(-1).sigmoid(), rtol=2e-7, atol=0)


def _random_heads(seed: int, batch: int, classes: int, height: int, width: int, tags=0.3):
    generator = torch.Generator().manual_seed(seed)
    return {
        "tl_heat": torch.randn(batch, classes, height, width, generator=generator) - 3,
        "br_heat": torch.randn(batch, classes, height, width, generator=generator) - 3,
        "tl_tag": tags * torch.randn(batch, 1, height, width, generator=generator),
        "br_tag": tags * torch.randn(batch, 1, height, width, generator=generator),
        "tl_regr": torch.rand(batch, 2, height, width, generator=generator),
        "br_regr": torch.rand(batch, 2, height, width, generator=generator),
    }


SETTINGS = {  # (batch, classes, H, W, decode kwargs) of the shipped configs, smaller maps
    "squeeze": (1, 80, 32, 48, {"K": 20, "kernel": 3, "ae_threshold": 0.5, "num_dets": 100}),
    "cornernet": (2, 80, 32, 48, {"K": 100, "kernel": 3, "ae_threshold": 0.5, "num_dets": 1000}),
    "saccade": (4, 80, 16, 16, {"K": 12, "kernel": 3, "ae_threshold": 0.3, "num_dets": 12,
                                "no_border": True}),
}


@pytest.mark.parametrize("setting", SETTINGS)
def test_decode_equals_the_dense_decode(setting, monkeypatch):
    batch, classes, height, width, kwargs = SETTINGS[setting]
    for seed in range(3):
        heads = _random_heads(seed, batch, classes, height, width)
        if seed == 2:  # ties and saturated corners as well
            heads["tl_heat"] = (heads["tl_heat"] * 2).round()
            heads["br_heat"][:, :, 2:6, 2:6] = 40.0
        fast = decode(**heads, **kwargs)
        with monkeypatch.context() as patched:
            patched.setattr(decode_module, "peak_topk", dense_topk)
            dense = decode(**heads, **kwargs)
        assert torch.equal(fast, dense), f"{setting}, seed {seed}"


# ---- the ordered top-k has no data-dependent shape ----------------------------------------

def _ordered_topk_by_nonzero(values: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`ordered_topk` as it was before it lost its `nonzero`: the reference order and ties."""
    kth = values.topk(K, dim=1).values[:, -1:]
    above = values > kth
    ties = values == kth
    wanted = K - above.sum(1, keepdim=True)
    chosen = above | (ties & (ties.cumsum(1) <= wanted))
    inds = chosen.nonzero()[:, 1].view(values.shape[0], K)
    picked, order = values.gather(1, inds).sort(dim=1, descending=True, stable=True)
    return picked, inds.gather(1, order)


@pytest.mark.parametrize("case", adversarial_maps(), ids=lambda case: case[0])
def test_ordered_topk_keeps_the_order_and_ties_of_the_nonzero_version(case):
    _, logits, K = case
    for values in (logits.reshape(2, -1), nms_heatmap(logits.sigmoid(), 3).reshape(2, -1)):
        for k in (1, K, 7 * K):
            got = decode_module.ordered_topk(values, k)
            expected = _ordered_topk_by_nonzero(values, k)
            assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_ordered_topk_breaks_a_tie_at_the_cut_by_the_lower_index():
    values = torch.tensor([[0.0, 2.0, 1.0, 2.0, 1.0, 1.0, 3.0]])
    scores, inds = decode_module.ordered_topk(values, 5)
    assert scores.tolist() == [[3.0, 2.0, 2.0, 1.0, 1.0]]
    assert inds.tolist() == [[6, 1, 3, 2, 4]]


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_batch_decoded_as_on_a_gpu_reads_nothing_back_to_the_host(setting):
    # Off the CPU, peak_topk hands the maps to dense_topk: that is the path a GPU decodes by.
    batch, classes, height, width, kwargs = SETTINGS[setting]
    heads = _random_heads(0, batch, classes, height, width)
    heads["tl_heat"] = (heads["tl_heat"] * 2).round()  # ties at the cut
    with counting_host_reads() as counted:
        dets = decode(**heads, **kwargs, corners=dense_topk)
    assert counted.total == 0, counted.reads
    assert torch.equal(dets, decode(**heads, **kwargs))


def test_the_nonzero_version_would_have_been_counted():
    # The counter sees what the ordered top-k used to do: one data-dependent shape per call.
    values = _maps(0, (2, 3, 8, 8)).reshape(2, -1)
    with counting_host_reads() as counted:
        _ordered_topk_by_nonzero(values, 10)
    assert counted.reads == {"nonzero": 1}


def test_ordered_topk_of_a_row_with_nan_stays_within_the_row():
    """A NaN (a diverged network's heatmap) chooses fewer than K entries: the indices stay
    within the row instead of indexing past it (a device-side assert on a GPU)."""
    from core.models.py_utils.decode import ordered_topk

    values = torch.tensor([[0.9, float("nan"), 0.5, 0.7]])
    picked, inds = ordered_topk(values, 4)
    assert inds.min() >= 0 and inds.max() <= 3
    assert set(inds[0].tolist()) == {0, 2, 3}  # every finite entry, the gap filled in-row
    assert picked[0, 0] == pytest.approx(0.9) and picked[0, -1] == pytest.approx(0.5)
