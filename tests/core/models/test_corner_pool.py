"""Corner pools against a naive loop implementation, forward and gradient, ties included.

Tie rule (what `torch.cummax` does on CPU: it keeps the later index on `>=`, so after the flips
the winner is the tied maximum reached last in the scan): each output's gradient goes to the
single tied maximum nearest to the output position along its ray.
"""
from __future__ import annotations

import pytest
import torch

from core.models.py_utils.corner_pool import (
    BottomPool,
    LeftPool,
    RightPool,
    TopPool,
    br_pool,
    tl_pool,
)

# pool -> (dim, ray looks towards larger indices)
POOLS = {TopPool: (2, True), BottomPool: (2, False), LeftPool: (3, True), RightPool: (3, False)}


def naive_pool(x: torch.Tensor, dim: int, forward_ray: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (out, argmax) with argmax the index along `dim` that receives the gradient."""
    xt = x.transpose(dim, 3) if dim != 3 else x
    out = torch.empty_like(xt)
    arg = torch.empty(xt.shape, dtype=torch.long)
    n = xt.shape[3]
    for b in range(xt.shape[0]):
        for c in range(xt.shape[1]):
            for r in range(xt.shape[2]):
                row = xt[b, c, r].tolist()
                for i in range(n):
                    # Visit the ray nearest-first; a strict '>' keeps the nearest tied maximum.
                    ray = range(i, n) if forward_ray else range(i, -1, -1)
                    best = i
                    for j in ray:
                        if row[j] > row[best]:
                            best = j
                    out[b, c, r, i] = row[best]
                    arg[b, c, r, i] = best
    if dim != 3:
        out, arg = out.transpose(dim, 3), arg.transpose(dim, 3)
    return out, arg


def naive_grad(x: torch.Tensor, grad_out: torch.Tensor, dim: int, forward_ray: bool):
    _, arg = naive_pool(x, dim, forward_ray)
    return torch.zeros_like(x).scatter_add_(dim, arg, grad_out)


def inputs(tied: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(7 if tied else 3)
    if tied:
        # Few distinct values: most rays contain several equal maxima.
        return torch.randint(0, 3, (2, 3, 5, 6), generator=g).float()
    return torch.randn(2, 3, 5, 6, generator=g)


@pytest.mark.parametrize("tied", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("pool", list(POOLS), ids=lambda p: p.__name__)
def test_pool_forward_equals_naive_max_along_ray(pool, tied):
    x = inputs(tied)
    expected, _ = naive_pool(x, *POOLS[pool])
    assert torch.equal(pool()(x), expected)


@pytest.mark.parametrize("tied", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("pool", list(POOLS), ids=lambda p: p.__name__)
def test_pool_gradient_goes_to_nearest_maximum(pool, tied):
    x = inputs(tied).requires_grad_()
    grad_out = torch.randn(x.shape, generator=torch.Generator().manual_seed(11))
    pool()(x).backward(grad_out)
    assert torch.allclose(x.grad, naive_grad(x.detach(), grad_out, *POOLS[pool]), atol=1e-6)


def test_top_pool_on_a_column_by_hand():
    col = torch.tensor([1.0, 3.0, 2.0, 3.0, 0.0]).view(1, 1, 5, 1).requires_grad_()
    out = TopPool()(col)
    assert out.flatten().tolist() == [3.0, 3.0, 3.0, 3.0, 0.0]
    out.sum().backward()
    # Rows 0 and 1 take the max at row 1; rows 2 and 3 the one at row 3.
    assert col.grad.flatten().tolist() == [0.0, 2.0, 0.0, 2.0, 1.0]


@pytest.mark.parametrize("pool", list(POOLS), ids=lambda p: p.__name__)
def test_pool_passes_gradcheck_in_float64(pool):
    x = torch.randn(1, 2, 4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(pool(), (x,))


@pytest.mark.parametrize("pool", list(POOLS), ids=lambda p: p.__name__)
def test_pool_keeps_bfloat16(pool):
    x = inputs(False)
    assert torch.equal(pool()(x.bfloat16()), pool()(x).bfloat16())


def test_corner_modules_pair_the_right_pools():
    tl, br = tl_pool(8, mid_dim=4), br_pool(8, mid_dim=4)
    assert (type(tl.pool1), type(tl.pool2)) == (TopPool, LeftPool)
    assert (type(br.pool1), type(br.pool2)) == (BottomPool, RightPool)


def test_corner_module_pools_the_sum_of_two_directions():
    # With identity convolutions and BN, the module reduces to
    # relu(relu(TopPool(relu x) + LeftPool(relu x)) + x) for the tl module.
    module = tl_pool(1, mid_dim=1).eval()
    with torch.no_grad():
        for conv in (module.p1_conv1.conv, module.p2_conv1.conv, module.p_conv1,
                     module.conv1, module.conv2.conv):
            conv.weight.zero_()
            centre = conv.weight.shape[-1] // 2
            conv.weight[:, :, centre, centre] = 1.0
    x = torch.randn(1, 1, 6, 7)
    r = x.relu()
    expected = (TopPool()(r) + LeftPool()(r) + x).relu()
    assert torch.allclose(module(x), expected, atol=1e-4)


@pytest.mark.parametrize("tied", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("pool", list(POOLS), ids=lambda p: p.__name__)
def test_channels_last_input_stays_channels_last_with_the_same_values_and_gradient(pool, tied):
    x = inputs(tied)
    grad_out = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    plain = x.clone().requires_grad_(True)
    last = x.contiguous(memory_format=torch.channels_last).requires_grad_(True)
    out_plain, out_last = pool()(plain), pool()(last)
    assert out_last.is_contiguous(memory_format=torch.channels_last)
    assert not out_last.is_contiguous()  # no copy back to NCHW
    assert torch.equal(out_last, out_plain)
    out_plain.backward(grad_out)
    out_last.backward(grad_out)
    assert torch.equal(last.grad, plain.grad)
