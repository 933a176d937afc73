"""The three published models match the original numerically; CornerNet-Tiny works as documented.

Parity data and rules: ../shared/reference/README.md (helpers in tests/_parity.py).
"""
from __future__ import annotations

import importlib

import _parity
import pytest
import torch

from core.models import load_original_state_dict
from core.models.CornerNet_Tiny import model as TinyModel
from core.models.py_utils.decode import decode

PUBLISHED = ["CornerNet", "CornerNet_Squeeze", "CornerNet_Saccade"]
PARAMS = {"CornerNet": 201_035_212, "CornerNet_Squeeze": 31_771_852,
          "CornerNet_Saccade": 116_969_339}

needs_reference = pytest.mark.skipif(
    not _parity.REFERENCE.is_dir(),
    reason=f"parity references not found at {_parity.REFERENCE} (the shared/ folder beside the "
           "repository)")


def build(name: str, **kwargs) -> torch.nn.Module:
    return importlib.import_module(f"core.models.{name}").model(**kwargs)


# The full-size networks: `parity` tests (CI runs them; `-m "not parity"` leaves them out).
@pytest.fixture(scope="module", params=[pytest.param(name, marks=pytest.mark.parity)
                                        for name in PUBLISHED])
def published(request):
    """(name, model filled with the deterministic rule, in eval mode), built once per module."""
    model = build(request.param).eval()
    _parity.fill_deterministic(model)
    return request.param, model


@pytest.fixture(scope="module")
def train_outputs(published):
    """The train path's outputs of `published` on the parity input, computed once per network
    (a forward of a full-size network costs seconds): for the tests that compare with them."""
    _, model = published
    with torch.no_grad():
        return model(_parity.reference_input())


@pytest.fixture(scope="module",
                params=[pytest.param("CornerNet_Squeeze", marks=pytest.mark.parity)])
def squeeze(request):
    model = build(request.param).eval()
    _parity.fill_deterministic(model)
    return model


@needs_reference
@pytest.mark.slow  # 4 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_state_dict_matches_manifest(published):
    name, model = published
    manifest = [[k.removeprefix("module."), shape, dtype]
                for k, shape, dtype in _parity.load_reference(f"{name}.state_dict.json")]
    ours = [[k, list(v.shape), str(v.dtype).removeprefix("torch.")]
            for k, v in model.state_dict().items()]
    assert ours == manifest
    assert sum(p.numel() for p in model.parameters()) == PARAMS[name]


def test_loss_is_attached_without_state(published):
    name, model = published
    expected = "CornerNet_Saccade_Loss" if name == "CornerNet_Saccade" else "CornerNet_Loss"
    assert type(model.loss).__name__ == expected
    assert (model.loss.pull_weight, model.loss.push_weight, model.loss.off_weight) == (.1, .1, 1)
    assert not any(k.startswith("loss.") for k in model.state_dict())


def test_prefixed_state_dict_loads_strictly(published):
    _, model = published
    state = model.state_dict()
    key = next(iter(state))
    original = state[key].clone()
    # Views of the model's own tensors (copying onto themselves is a no-op) plus one changed entry.
    prefixed = {f"module.{k}": v for k, v in state.items()}
    prefixed[f"module.{key}"] = original + 1.0
    load_original_state_dict(model, prefixed)
    assert torch.equal(model.state_dict()[key], original + 1.0)
    state[key].copy_(original)


def test_state_dict_with_wrong_keys_is_rejected_by_name(published):
    _, model = published
    state = dict(model.state_dict())
    state["hg.extra.weight"] = state.pop("hg.pre.0.conv.weight")
    with pytest.raises(RuntimeError, match=r"hg\.pre\.0\.conv\.weight.*hg\.extra\.weight"):
        load_original_state_dict(model, state)


@needs_reference
def test_fill_matches_fill_check(published):
    name, model = published
    rows = _parity.load_reference(f"{name}.forward.json")["fill_check"]["rows"]
    _parity.assert_fill_check(model, rows)


@needs_reference
@pytest.mark.slow  # 4 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_train_path_forward_matches_original(published, train_outputs):
    name, _ = published
    reference = _parity.load_reference(f"{name}.forward.json")
    x = _parity.reference_input()
    _parity.assert_matches_record(x, reference["input"] | {"name": "input"})
    named = _parity.named_outputs(train_outputs)
    assert sorted(named) == sorted(r["name"] for r in reference["outputs"])
    for record in reference["outputs"]:
        _parity.assert_matches_record(named[record["name"]], record)


@needs_reference
def test_squeeze_test_path_matches_original_decode(squeeze):
    ref = _parity.load_reference("CornerNet_Squeeze.forward.json")["test_decode"]
    x = _parity.reference_input()
    with torch.no_grad():
        detections, tl_heat, br_heat, tl_tag, br_tag = squeeze(x, test=True, **ref["kwargs"])
        train_outs = squeeze(x)
    for got, per_stack in zip((tl_heat, br_heat, tl_tag, br_tag), train_outs):
        assert torch.equal(got, per_stack[-1])

    # The tie-free top-K corners after sigmoid and 3x3 NMS, from the test-path heads. Their
    # scores inherit the heads' forward tolerance, at most a quarter of it (sigmoid' <= 1/4).
    records = {r["name"]: r for r in
               _parity.load_reference("CornerNet_Squeeze.forward.json")["outputs"]}
    for heat, corners, name in ((tl_heat, ref["topk_corners_last_stack"]["tl"], "tl_heat"),
                                (br_heat, ref["topk_corners_last_stack"]["br"], "br_heat")):
        record = records[f"stack1.{name}"]
        atol = 0.25 * _parity.forward_atol(record["abs_sum"], heat.numel())
        prob = heat.sigmoid()
        prob = prob * (torch.nn.functional.max_pool2d(prob, 3, 1, 1) == prob)
        scores, flat = prob.view(1, -1).topk(ref["kwargs"]["K"])
        hw, w = heat.shape[2] * heat.shape[3], heat.shape[3]
        torch.testing.assert_close(scores[0], torch.tensor(corners["scores"]),
                                   rtol=1e-4, atol=atol)
        assert (flat[0] % hw).tolist() == corners["inds"]
        assert (flat[0] // hw).tolist() == corners["clses"]
        assert (flat[0] % hw // w).tolist() == corners["ys"]
        assert (flat[0] % w).tolist() == corners["xs"]

    # Degenerate case: every score is -1, so rows are compared as a set (README section 3).
    assert list(detections.shape) == ref["shape"]
    assert detections[0, :, 4].tolist() == ref["score_column_all_rows"]
    rows = detections[0]
    for row in torch.tensor(ref["first20_rows"]):
        close = ((rows[:, :7] - row[:7]).abs() <= 1e-5 + 1e-5 * row[:7].abs()).all(dim=1)
        assert (close & (rows[:, 7] == row[7])).any(), f"reference row {row.tolist()} missing"


@pytest.mark.slow  # 8 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_test_path_returns_what_the_original_returns(published, train_outputs):
    """Without attention: (detections, tl_heat, br_heat, tl_tag, br_tag) of the last stack;
    Saccade: (detections, last-stack attention maps after sigmoid), or detections if no_att."""
    name, model = published
    # The parity input size: convolution primitives for it are already set up (fast).
    x = _parity.reference_input()
    kwargs = {"K": 10, "kernel": 3, "num_dets": 20}
    train_outs = train_outputs
    with torch.no_grad():
        test_outs = model(x, test=True, **kwargs)
        if name == "CornerNet_Saccade":
            only_detections = model(x, test=True, no_att=True, **kwargs)
    assert test_outs[0].shape == (1, 20, 8)
    if name != "CornerNet_Saccade":
        assert len(test_outs) == 5
        for got, per_stack in zip(test_outs[1:], train_outs):
            assert torch.equal(got, per_stack[-1])
        return
    detections, atts = test_outs
    assert torch.equal(only_detections, detections)
    assert [tuple(a.shape) for a in atts] == [(1, 1, 16, 16), (1, 1, 32, 32), (1, 1, 64, 64)]
    for att, logits in zip(atts, train_outs[6][-1]):
        assert torch.equal(att, logits.sigmoid())


@pytest.mark.slow  # 10 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_squeeze_runs_under_bfloat16_autocast(squeeze):
    x = torch.randn(1, 3, 127, 127, generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        outs = squeeze(x)
    for maps in outs:
        for t in maps:
            assert t.dtype == torch.bfloat16 and torch.isfinite(t).all()
    assert outs[0][-1].shape == (1, 80, 16, 16)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return TinyModel(categories=3)


def test_tiny_outputs_have_documented_shapes(tiny):
    x = torch.randn(2, 3, 128, 128)
    outs = tiny(x)
    expected = [(2, 3, 32, 32)] * 2 + [(2, 1, 32, 32)] * 2 + [(2, 2, 32, 32)] * 2
    assert [[tuple(t.shape) for t in maps] for maps in outs] == [[s] for s in expected]
    assert tiny.tl_heats[0][-1].bias.tolist() == pytest.approx([-2.19] * 3)


def test_categories_sets_the_heatmap_channels():
    model = build("CornerNet_Squeeze", categories=3)
    assert [m[-1].out_channels for m in (*model.tl_heats, *model.br_heats)] == [3] * 4


def test_tiny_default_has_80_categories():
    assert TinyModel().tl_heats[0][-1].out_channels == 80


def test_tiny_test_path_decodes_the_last_stack_of_the_train_path(tiny):
    x = torch.randn(2, 3, 128, 128)
    with torch.no_grad():
        tiny.eval()
        detections, *maps = tiny(x, test=True, K=10, kernel=3, num_dets=50)
        heads = [stacks[-1] for stacks in tiny(x)]
    tiny.train()
    assert detections.shape == (2, 50, 8)
    for got, expected in zip(maps, heads[:4]):  # tl/br heats and tags, raw
        assert torch.equal(got, expected)
    assert torch.equal(detections, decode(*heads, K=10, kernel=3, num_dets=50))
    scores = detections[..., 4]
    assert (scores[:, :-1] >= scores[:, 1:]).all()  # best first
    assert set(detections[..., 7].unique().tolist()) <= {0.0, 1.0, 2.0}  # one of 3 classes


def test_tiny_trains_through_its_loss(tiny):
    x = torch.randn(2, 3, 128, 128)
    gt_heat = torch.zeros(2, 3, 32, 32)
    gt_heat[0, 1, 4, 5] = gt_heat[1, 2, 10, 3] = 1.0
    gt_mask = torch.tensor([[1, 0], [1, 0]], dtype=torch.uint8)
    gt_off = torch.full((2, 2, 2), 0.5)
    tl_ind = torch.tensor([[4 * 32 + 5, 0], [10 * 32 + 3, 0]])
    targets = [gt_heat, gt_heat, gt_mask, gt_off, gt_off, tl_ind, tl_ind + 33]
    tiny.zero_grad()
    total, _ = tiny.loss(tiny(x), targets)
    total.backward()
    assert torch.isfinite(total)
    assert all(torch.isfinite(p.grad).all() for p in tiny.parameters())
    assert tiny.hg.pre[0].conv.weight.grad.abs().sum() > 0


def test_tiny_runs_under_bfloat16_autocast(tiny):
    x = torch.randn(2, 3, 128, 128, generator=torch.Generator().manual_seed(3))
    tiny.eval()
    with torch.no_grad():
        reference = tiny(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = tiny(x)
    tiny.train()
    for ref_maps, low_maps in zip(reference, low):
        assert low_maps[0].dtype == torch.bfloat16
        error = (low_maps[0].float() - ref_maps[0]).norm() / ref_maps[0].norm()
        assert error < 0.05
