"""Helpers for the numeric parity references (tests/data/reference; see its README).

`fill_deterministic` applies the README's deterministic fill rule; the `check_*` functions
compare against the stored statistics with the README's tolerances.
"""
from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import torch
from _data import reference_dir
from torch import nn

# As the `reference` fixture finds it (CORNERNET_DATA, ../shared, ./shared).
REFERENCE = reference_dir() or Path(__file__).resolve().parents[2] / "shared" / "reference"


def load_reference(name: str) -> dict | list:
    """Parse `<REFERENCE>/<name>` (a JSON file)."""
    with open(REFERENCE / name) as f:
        return json.load(f)


def reference_input() -> torch.Tensor:
    """The README's fixed input: (1, 3, 255, 255) float32."""
    return torch.randn(1, 3, 255, 255, generator=torch.Generator().manual_seed(0))


def fill_value(key: str, shape: tuple[int, ...], batchnorm_weight: bool) -> torch.Tensor:
    """The value the fill rule gives entry `key` (no `module.` prefix) of the given shape."""
    if key.endswith(".num_batches_tracked"):
        return torch.tensor(0, dtype=torch.int64)
    g = torch.Generator().manual_seed(zlib.crc32(key.encode("utf-8")))
    if key.endswith(".running_var"):
        return 1 + 0.5 * torch.rand(shape, generator=g)
    if key.endswith(".running_mean"):
        return 0.1 * torch.randn(shape, generator=g)
    if batchnorm_weight:
        return 1 + 0.1 * torch.randn(shape, generator=g)
    fan_in = math.prod(shape) // shape[0]
    return torch.randn(shape, generator=g) * (1.0 / math.sqrt(fan_in))


@torch.no_grad()
def fill_deterministic(model: nn.Module) -> None:
    """Overwrite every state-dict entry of `model` in place with the README's fill rule."""
    for key, tensor in model.state_dict().items():
        # BatchNorm weights are exactly the 1-D `.weight` entries in these models.
        is_bn_weight = key.endswith(".weight") and tensor.dim() == 1
        tensor.copy_(fill_value(key, tuple(tensor.shape), is_bn_weight))


def assert_fill_check(model: nn.Module, rows: list, rtol: float = 1e-6) -> None:
    """rows: `[key, sum, abs_sum, first]` per entry, as in `<Model>.forward.json`."""
    sd = model.state_dict()
    assert [r[0] for r in rows] == list(sd.keys())
    for key, ref_sum, ref_abs, ref_first in rows:
        t = sd[key]
        got = (t.sum(dtype=torch.float64).item(), t.abs().sum(dtype=torch.float64).item(),
               t.flatten()[0].item())
        for name, a, b in zip(("sum", "abs_sum", "first"), got, (ref_sum, ref_abs, ref_first)):
            assert math.isclose(a, b, rel_tol=rtol, abs_tol=1e-9), f"{key} {name}: {a} != {b}"


def forward_atol(abs_sum: float, numel: int) -> float:
    """The absolute part of the README's forward tolerance: 1e-4 times the output's mean
    magnitude, because summation order (AVX2 against AVX-512) moves every output by an amount
    proportional to its scale, not by a fixed 1e-5 (README section 6)."""
    return 1e-4 * abs_sum / numel


def assert_matches_record(t: torch.Tensor, record: dict) -> None:
    """Compare a float32 output with a `{name, shape, sum, abs_sum, sample_indices, samples}`
    record at the README's section-6 tolerances: samples within 1e-4 * mean|output| + 1e-4 *
    |ref|, sum within 1e-5 * abs_sum, abs_sum within rtol 1e-5."""
    name = record["name"]
    assert list(t.shape) == record["shape"], f"{name}: shape {list(t.shape)}"
    flat = t.detach().contiguous().view(-1)
    samples = flat[torch.tensor(record["sample_indices"])].double()
    ref = torch.tensor(record["samples"], dtype=torch.float64)
    atol = forward_atol(record["abs_sum"], flat.numel())
    bad = (samples - ref).abs() > atol + 1e-4 * ref.abs()
    assert not bad.any(), (f"{name}: samples {samples[bad].tolist()} != {ref[bad].tolist()} "
                           f"(atol {atol:.3g})")
    total, abs_total = flat.double().sum().item(), flat.double().abs().sum().item()
    assert abs(total - record["sum"]) <= 1e-5 * record["abs_sum"], f"{name}: sum {total}"
    assert math.isclose(abs_total, record["abs_sum"], rel_tol=1e-5), f"{name}: abs_sum"


def named_outputs(outs: list) -> dict[str, torch.Tensor]:
    """Map a train-path output list to the reference names `stack{s}.{head}` / `stack{s}.att{j}`."""
    heads = ("tl_heat", "br_heat", "tl_tag", "br_tag", "tl_off", "br_off")
    named = {f"stack{s}.{head}": t for head, per_stack in zip(heads, outs) for s, t in
             enumerate(per_stack)}
    for s, atts in enumerate(outs[6] if len(outs) > 6 else []):
        named.update({f"stack{s}.att{j}": a for j, a in enumerate(atts)})
    return named
