"""Training losses: parity with the original's numbers, and the cases the original gets wrong."""

import json
from pathlib import Path

import pytest
import torch

from core.models.py_utils.decode import transpose_and_gather
from core.models.py_utils.losses import (
    CornerNet_Loss,
    CornerNet_Saccade_Loss,
    ae_loss,
    clamped_sigmoid,
    focal_loss,
    off_loss,
)

TOL = {"rtol": 1e-5, "atol": 1e-6}
LOSSES = {"CornerNet_Loss": CornerNet_Loss, "CornerNet_Saccade_Loss": CornerNet_Saccade_Loss}


def _tensors(spec):
    """A stored tensor, or nested lists of them, as torch tensors."""
    if isinstance(spec, dict):
        # 9 significant digits: float64 parse then float32 cast gives the exact stored value.
        return torch.tensor(spec["data"], dtype=getattr(torch, spec["dtype"])).view(spec["shape"])
    return [_tensors(item) for item in spec]


def _case(reference: Path, name: str) -> tuple[list, list, dict]:
    ref = json.loads((reference / f"{name}.json").read_text())
    outs = [_tensors(ref["inputs"]["outs"][key]) for key in ref["outs_order"]]
    targets = [_tensors(ref["inputs"]["targets"][key]) for key in ref["targets_order"]]
    return outs, targets, ref["expected"]


def _original(name: str) -> torch.nn.Module:
    return LOSSES[name](pull_weight=0.1, push_weight=0.1, push_diagonal=True)


def _close(actual: torch.Tensor, expected: float) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float32), **TOL)


@pytest.mark.parametrize("name", LOSSES)
def test_total_and_terms_match_original(reference: Path, name: str):
    outs, targets, expected = _case(reference, name)
    n_stacks = len(outs[0])

    total, terms = _original(name)(outs, targets)

    assert total.shape == () and total.dtype == torch.float32
    _close(total, expected["total"])
    expected_keys = ["focal", "att", "pull", "push", "off"] if "att" in expected else None
    assert list(terms) == (expected_keys or ["focal", "pull", "push", "off"])
    for key, value in terms.items():
        _close(value * n_stacks, expected[key])
    assert torch.equal(total.detach(), sum(terms.values()))


@pytest.mark.parametrize("name", LOSSES)
def test_per_stack_components_match_original(reference: Path, name: str):
    outs, targets, expected = _case(reference, name)
    tl_heats, br_heats, tl_tags, br_tags, tl_offs, br_offs = outs[:6]
    gt_tl, gt_br, mask, gt_tl_off, gt_br_off, tl_ind, br_ind = targets[:7]
    valid = targets[7:9] if name == "CornerNet_Saccade_Loss" else [None, None]
    per_stack = expected["per_stack"]

    for s in range(len(tl_heats)):
        _close(focal_loss(clamped_sigmoid(tl_heats[s]), gt_tl, valid[0]), per_stack["focal_tl"][s])
        _close(focal_loss(clamped_sigmoid(br_heats[s]), gt_br, valid[1]), per_stack["focal_br"][s])
        tl_tag = transpose_and_gather(tl_tags[s], tl_ind)[..., 0]
        br_tag = transpose_and_gather(br_tags[s], br_ind)[..., 0]
        pull, push = ae_loss(tl_tag, br_tag, mask, push_diagonal=True)
        _close(pull.sum(), per_stack["pull_unweighted"][s])
        _close(push.sum(), per_stack["push_unweighted"][s])
        tl_off = transpose_and_gather(tl_offs[s], tl_ind)
        br_off = transpose_and_gather(br_offs[s], br_ind)
        _close(off_loss(tl_off, gt_tl_off, mask), per_stack["off_tl_unweighted"][s])
        _close(off_loss(br_off, gt_br_off, mask), per_stack["off_br_unweighted"][s])


@pytest.mark.parametrize("name", LOSSES)
def test_per_image_pull_push_of_stack0_match_original(reference: Path, name: str):
    outs, targets, expected = _case(reference, name)
    tl_tag = transpose_and_gather(outs[2][0], targets[5])[..., 0]
    br_tag = transpose_and_gather(outs[3][0], targets[6])[..., 0]

    pull, push = ae_loss(tl_tag, br_tag, targets[2], push_diagonal=True)

    for image, (exp_pull, exp_push) in enumerate(expected["push_pull_stack0_per_image_unweighted"]):
        _close(pull[image], exp_pull)
        _close(push[image], exp_push)
    # The single-object image carries the float32 constant of the original.
    _close(push[1], 1.0001659393310547)


def test_attention_per_scale_matches_original(reference: Path):
    outs, targets, expected = _case(reference, "CornerNet_Saccade_Loss")
    atts, gt_atts = outs[6], targets[9]
    for scale, gt_att in enumerate(gt_atts):
        per_stack = [focal_loss(clamped_sigmoid(att[scale]), gt_att) for att in atts]
        _close(sum(per_stack) / len(atts), expected["att_per_scale"][scale])


@pytest.mark.parametrize("name", LOSSES)
def test_default_push_drops_only_the_constant(reference: Path, name: str):
    outs, targets, expected = _case(reference, name)
    tl_tag = transpose_and_gather(outs[2][0], targets[5])[..., 0]
    br_tag = transpose_and_gather(outs[3][0], targets[6])[..., 0]

    _, push = ae_loss(tl_tag, br_tag, targets[2])

    # Image 0 has 3 objects: the original's diagonal and -1/n terms add only ~1e-4 / (n(n-1)).
    original = torch.tensor(expected["push_pull_stack0_per_image_unweighted"][0][1])
    torch.testing.assert_close(push[0], original, rtol=1e-4, atol=0)
    assert push[1] == 0


@pytest.mark.parametrize("name", LOSSES)
def test_default_push_has_the_original_gradient(reference: Path, name: str):
    outs, targets, _ = _case(reference, name)
    grads = []
    for push_diagonal in (True, False):
        tags = [t.clone().requires_grad_() for t in outs[2] + outs[3]]
        n = len(outs[2])
        case = [*outs[:2], tags[:n], tags[n:], *outs[4:]]
        crit = LOSSES[name](pull_weight=0.1, push_weight=0.1, push_diagonal=push_diagonal)
        crit(case, targets)[0].backward()
        grads.append(torch.cat([t.grad.flatten() for t in tags]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)


def test_pull_and_push_by_hand():
    # Image 0: one object, tags 0.3 / 0.7 (mean 0.5). Image 1: two objects with means 0.5 and
    # 0.9, so |difference| = 0.4. The last slot of each image is padding with a wild tag.
    tl = torch.tensor([[0.3, 0.0, 9.0], [0.4, 1.0, 9.0]])
    br = torch.tensor([[0.7, 0.0, -9.0], [0.6, 0.8, -9.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 0]], dtype=torch.uint8)
    eps = 1e-4

    pull, push = ae_loss(tl, br, mask)
    _, push_original = ae_loss(tl, br, mask, push_diagonal=True)

    expected_pull = [2 * 0.2**2 / (1 + eps), 4 * 0.1**2 / (2 + eps)]
    torch.testing.assert_close(pull, torch.tensor(expected_pull))
    torch.testing.assert_close(push, torch.tensor([0.0, 2 * 0.6 / (2 + eps)]))
    diagonal = 2 * (1 - 1 / (2 + eps)) / (2 + eps)
    off_diagonal = 2 * (0.6 - 1 / (2 + eps)) / (2 + eps)
    torch.testing.assert_close(push_original[1], torch.tensor(diagonal + off_diagonal))


def test_bool_and_uint8_masks_give_the_same_loss(reference: Path):
    outs, targets, _ = _case(reference, "CornerNet_Loss")
    crit = _original("CornerNet_Loss")
    total_uint8, terms_uint8 = crit(outs, targets)
    total_bool, terms_bool = crit(outs, [*targets[:2], targets[2].bool(), *targets[3:]])
    assert terms_bool["push"] > 0
    assert torch.equal(total_uint8, total_bool)
    assert all(torch.equal(terms_uint8[k], terms_bool[k]) for k in terms_uint8)


def test_outputs_are_not_modified(reference: Path):
    outs, targets, _ = _case(reference, "CornerNet_Saccade_Loss")
    before = [[t.clone() for t in group] for group in outs[:6]]
    _original("CornerNet_Saccade_Loss")(outs, targets)
    assert all(torch.equal(a, b) for ga, gb in zip(outs, before) for a, b in zip(ga, gb))


def _tiny_case(mask: list[list[int]], stacks: int = 2, classes: int = 2, size: int = 8):
    """Random outputs and targets with objects at fixed corners; mask is (B, M)."""
    g = torch.Generator().manual_seed(0)
    batch, max_objects = len(mask), len(mask[0])

    def maps(channels: int) -> list[torch.Tensor]:
        shape = (batch, channels, size, size)
        return [torch.randn(shape, generator=g).requires_grad_() for _ in range(stacks)]

    outs = [maps(classes), maps(classes), maps(1), maps(1), maps(2), maps(2)]
    gt_tl, gt_br = torch.zeros(batch, classes, size, size), torch.zeros(batch, classes, size, size)
    tl_ind = torch.zeros(batch, max_objects, dtype=torch.int64)
    br_ind = torch.zeros(batch, max_objects, dtype=torch.int64)
    for b, row in enumerate(mask):
        for m, present in enumerate(row):
            if present:
                gt_tl[b, 0, m, m] = 1
                gt_br[b, 0, size - 1, m] = 1
                tl_ind[b, m], br_ind[b, m] = m * size + m, (size - 1) * size + m
    offs = torch.rand(batch, max_objects, 2, generator=g)
    mask_t = torch.tensor(mask, dtype=torch.uint8)
    return outs, [gt_tl, gt_br, mask_t, offs, offs.flip(2), tl_ind, br_ind]


def test_single_image_with_single_object_has_zero_push_and_exact_pull():
    outs, targets = _tiny_case([[1]])
    total, terms = CornerNet_Loss()(outs, targets)

    assert torch.isfinite(total)
    assert terms["push"] == 0
    pulls = []
    for tl_tag, br_tag in zip(outs[2], outs[3]):
        tl, br = tl_tag[0, 0, 0, 0], br_tag[0, 0, 7, 0]
        pulls.append(((tl - br) / 2) ** 2 * 2 / (1 + 1e-4))
    torch.testing.assert_close(terms["pull"], (sum(pulls) / 2).detach())


def test_original_push_keeps_the_single_object_constant():
    outs, targets = _tiny_case([[1]])
    _, terms = CornerNet_Loss(push_diagonal=True)(outs, targets)
    _close(terms["push"], 1.0001659393310547)


def test_gradients_are_finite():
    outs, targets = _tiny_case([[1, 1, 0], [1, 0, 0]])
    total, _ = CornerNet_Loss(pull_weight=0.1, push_weight=0.1)(outs, targets)
    total.backward()
    grads = [t.grad for group in outs for t in group]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    # Heats, tags and offsets all receive a gradient.
    assert all(g.abs().sum() > 0 for g in grads)


def test_images_without_objects_give_finite_loss_and_gradients():
    outs, targets = _tiny_case([[0, 0], [0, 0]])
    total, terms = CornerNet_Loss()(outs, targets)
    total.backward()
    assert torch.isfinite(total)
    assert terms["pull"] == 0 and terms["push"] == 0 and terms["off"] == 0
    assert all(torch.isfinite(t.grad).all() for group in outs for t in group)


def test_bf16_autocast_outputs_give_float32_loss(reference: Path):
    outs, targets, expected = _case(reference, "CornerNet_Saccade_Loss")
    low = [[t.bfloat16() for t in group] for group in outs[:6]]
    low.append([[a.bfloat16() for a in scales] for scales in outs[6]])

    with torch.autocast("cpu", dtype=torch.bfloat16):
        total, terms = _original("CornerNet_Saccade_Loss")(low, targets)

    assert total.dtype == torch.float32 and all(t.dtype == torch.float32 for t in terms.values())
    # Only the bf16 rounding of the inputs remains (about 3 significant digits).
    torch.testing.assert_close(total, torch.tensor(expected["total"]), rtol=2e-2, atol=0)
