"""A corner detector as one ONNX graph: normalised images in, decoded detections out.

The graph is the model's test path with two export-only substitutions, neither of which changes
a value: corner pooling by `max_scan` instead of `torch.cummax` (ONNX has no CumMax), and the
dense corner search `dense_peak_topk` instead of `peak_topk` (whose loop depends on the data).
What torch does in Python around the network (resizing, padding, flip merge, mapping back,
soft-NMS) stays in Python and is shared by both runtimes.

The graph's metadata (`metadata`) names the config, the class count, the decode settings baked
into the graph and the input sizes that fit, so a runtime can refuse a file that does not match.
It also carries the snapshot's identity: its iteration, which weights were taken (the average or
the trained ones), a digest of exactly those weights (`weights_digest`) and the largest input
side the corner-pool scan is exact for (`max_side`), so a file is never taken for another
snapshot's, for a retrained one, or run on an input its scan does not cover.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from core.models import fit, strip_module_prefix
from core.models.py_utils.corner_pool import (
    BottomPool,
    LeftPool,
    RightPool,
    TopPool,
    max_scan,
)
from core.models.py_utils.decode import decode, dense_peak_topk

from .defaults import DEFAULT_MAX_MAP

INPUT_NAME = "image"
DETECTIONS = "detections"
# The ONNX metadata keys written by `metadata` (values are JSON text).
META_KEYS = ("config", "model", "categories", "decode", "size_rule", "outputs", "iteration",
             "weights", "digest", "max_side", "settings", "classes")
# The keys that say which snapshot a file holds; a file without them predates them.
IDENTITY_KEYS = ("iteration", "weights", "digest", "max_side")
# Metadata an INT8 file adds to the export's (META_KEYS): how it was calibrated.
CALIBRATION = "calibration"


class ScanPool(nn.Module):
    """A corner pool whose running maximum is `max_scan` (same values as the cummax pools)."""

    def __init__(self, dim: int, reverse: bool, max_length: int) -> None:
        super().__init__()
        self.dim, self.reverse, self.max_length = dim, reverse, max_length

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return max_scan(x, self.dim, self.reverse, self.max_length)


POOL_DIRECTIONS = {TopPool: (2, True), BottomPool: (2, False), LeftPool: (3, True),
                   RightPool: (3, False)}


class DeployGraph(nn.Module):
    """What gets exported: image (B, 3, H, W) float32, normalised -> detections.

    forward returns `detections` (B, num_dets, 8) float32 rows `[x1, y1, x2, y2, score,
    tl_score, br_score, cls]` in output-map coordinates (as `decode` returns them), and for a
    model with attention heads (Saccade) also its attention maps after sigmoid, (B, 1, h_j, w_j)
    float32 per level, innermost first.

    The corner pools of `model` are replaced in place by `ScanPool`s: use a model built for
    export only.
    """

    def __init__(self, model: nn.Module, decode_kwargs: dict[str, Any],
                 max_map: int = DEFAULT_MAX_MAP) -> None:
        super().__init__()
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if type(child) in POOL_DIRECTIONS:
                    dim, reverse = POOL_DIRECTIONS[type(child)]
                    setattr(module, name, ScanPool(dim, reverse, max_map))
        self.model = model
        self.decode_kwargs = dict(decode_kwargs)
        self.eval()

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        heads, atts = self.model.last_stack(image)
        detections = decode(*heads, corners=dense_peak_topk, **self.decode_kwargs)
        return (detections, *[att.sigmoid() for att in atts])


def output_names(model: nn.Module) -> list[str]:
    """`detections`, then `att0`, `att1`, ... for a model with attention heads."""
    levels = len(model.att_modules[-1]) if getattr(model, "with_att", False) else 0
    return [DETECTIONS, *[f"att{j}" for j in range(levels)]]


def size_rule(model: nn.Module) -> dict[str, int]:
    """The model's size rule (`core.models.fit.size_rule`) in the form an exported file
    records: {"stride": s, "multiple": m}; a side H fits when it lies in (j*m - s, j*m]."""
    return fit.size_rule(model).as_meta()


def fits(side: int, rule: dict[str, int]) -> bool:
    """Whether an input side fits the network whose recorded rule is `rule`."""
    return fit.SizeRule.from_meta(rule).fits(side)


def describe_sizes(rule: dict[str, int]) -> str:
    """The sides that fit a recorded rule, in words, for error messages."""
    return fit.SizeRule.from_meta(rule).describe()


def weights_digest(state: Mapping[str, torch.Tensor]) -> str:
    """A SHA-256 of a state dict: every entry's name, dtype, shape and bytes, in name order.

    `module.` prefixes are dropped, so a model's state_dict and the same weights as a snapshot
    or an official file (prefixed keys) give the same digest.
    """
    digest = hashlib.sha256()
    for key, tensor in sorted(strip_module_prefix(state).items()):
        value = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{key}|{value.dtype}|{tuple(value.shape)}|".encode())
        digest.update(value.view(torch.uint8).numpy().tobytes() if value.numel() else b"")
    return digest.hexdigest()


def snapshot_weights(snapshot: Mapping[str, Any], weights: str) -> Mapping[str, torch.Tensor]:
    """The state dict of `weights` ("ema" or "raw") in a loaded snapshot file (ours, or an
    official plain state dict, which holds raw weights only); {} when it has none of them."""
    if "format" not in snapshot:  # an official state dict
        return snapshot if weights == "raw" else {}
    if weights == "raw":
        return snapshot.get("model") or {}
    average = snapshot.get("ema") or {}
    return {key: value for key, value in average.items() if key != "n_averaged"}


def metadata(config: str, model_name: str, categories: int, decode_kwargs: dict[str, Any],
             rule: dict[str, int], outputs: list[str], iteration: int, weights: str,
             digest: str, max_side: int, settings: dict | None = None,
             classes: dict | None = None) -> dict[str, str]:
    """The metadata written into the .onnx file, as {key: JSON text} (keys `META_KEYS`).

    Args:
        iteration: the snapshot's iteration (the one it records, also for `best`).
        weights: which were exported: "ema" (the average, system.ema_decay) or "raw".
        digest: `weights_digest` of those weights.
        max_side: the largest input H and W the corner-pool scan is exact for.
        settings: the resolved config ({"system", "db"}), so that the file alone can be run.
        classes: the class names and category ids (`checkpoint.class_record`), so that the
            file alone names what it finds.
    """
    values = {"config": config, "model": model_name, "categories": categories,
              "decode": decode_kwargs, "size_rule": rule, "outputs": outputs,
              "iteration": iteration, "weights": weights, "digest": digest,
              "max_side": max_side, "settings": settings, "classes": classes}
    return {key: json.dumps(values[key]) for key in META_KEYS}


def export_onnx(graph: DeployGraph, example: torch.Tensor, opset: int, meta: dict[str, str],
                max_side: int) -> tuple[bytes, list[str]]:
    """`graph` as an ONNX file's bytes with B, H and W dynamic and metadata `meta`, checked by
    `onnx.checker`; and the output names. Nothing is written: the caller writes the file once
    every check has passed.

    Args:
        example: (B, 3, H, W) float32 with B >= 2 and H != W, so that no size is taken as fixed.
        opset: the ONNX opset to write; a ValueError when the exporter wrote another one (it
            falls back to its own for a version it cannot convert to).
        max_side: the largest H and W the graph is declared for.
    """
    import onnx

    names = output_names(graph.model)
    # The exporter names every torchvision op it cannot find; this project has no torchvision.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    dims = {0: torch.export.Dim("batch", min=1, max=1024),
            2: torch.export.Dim("height", min=1, max=max_side),
            3: torch.export.Dim("width", min=1, max=max_side)}
    with (torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()),
          contextlib.redirect_stderr(io.StringIO())):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(graph, (example,), dynamo=True, opset_version=opset,
                                    input_names=[INPUT_NAME], output_names=names,
                                    dynamic_shapes={"image": dims}, verbose=False)
    program.model.metadata_props.update(meta)
    proto = program.model_proto
    written = opset_of(proto)
    if written != opset:
        raise ValueError(f"the exporter cannot write opset {opset} for this model (it fell "
                         f"back to opset {written})")
    onnx.checker.check_model(proto, full_check=True)
    return proto.SerializeToString(), names


def opset_of(proto: Any) -> int | None:
    """The default-domain (ai.onnx) opset of an ONNX ModelProto."""
    return next((entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx")),
                None)


def within_tolerance(got: np.ndarray, ref: np.ndarray) -> tuple[float, bool]:
    """Largest |got - ref| and whether every element meets the forward rule of
    shared/reference/README.md section 6: |got - ref| <= 1e-4 * scale + 1e-4 * |ref|, with
    scale the mean magnitude of `ref`."""
    if ref.size == 0:
        return 0.0, got.size == 0
    diff = np.abs(got.astype(np.float64) - ref)
    scale = float(np.abs(ref).mean())
    return float(diff.max()), bool((diff <= 1e-4 * scale + 1e-4 * np.abs(ref)).all())


def match_rows(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """For each valid row of `ref` (N, 8), the valid row of `got` of the same class nearest to
    it (rows whose scores nearly tie may come in another order); `got`'s rows, reordered."""
    got, ref = got[got[:, 4] > -1], ref[ref[:, 4] > -1]
    if len(got) != len(ref):
        raise AssertionError(f"{len(got)} valid detections instead of {len(ref)}")
    free = np.ones(len(got), dtype=bool)
    order = []
    for row in ref:
        cost = np.abs(got[:, :7] - row[:7]).max(1) + np.where(free & (got[:, 7] == row[7]),
                                                              0, np.inf)
        pick = int(cost.argmin())
        if not np.isfinite(cost[pick]):
            raise AssertionError(f"no detection of class {int(row[7])} left to match {row}")
        free[pick] = False
        order.append(pick)
    return got[order]


def compare_outputs(got: list[np.ndarray], ref: list[np.ndarray]) -> dict[str, Any]:
    """Exported (`got`) against torch (`ref`) outputs of the same input: detections first
    (B, N, 8), then attention maps.

    Returns:
        {"boxes": largest box difference, "scores": largest score difference (score, tl, br),
         "attention": largest attention difference (0 without), "valid": valid rows per
         image, "ok": every value within the tolerance rule and every class equal}.
    """
    report: dict[str, Any] = {"boxes": 0.0, "scores": 0.0, "attention": 0.0, "valid": [],
                              "ok": True}
    for got_dets, ref_dets in zip(got[0], ref[0]):
        try:
            matched = match_rows(got_dets, ref_dets)
        except AssertionError as err:
            report.update(ok=False, error=str(err))
            return report
        valid = ref_dets[ref_dets[:, 4] > -1]
        report["valid"].append(len(valid))
        for key, columns in (("boxes", slice(0, 4)), ("scores", slice(4, 7))):
            diff, ok = within_tolerance(matched[:, columns], valid[:, columns])
            report[key] = max(report[key], diff)
            report["ok"] &= ok
    for got_att, ref_att in zip(got[1:], ref[1:]):
        diff, ok = within_tolerance(got_att, ref_att)
        report["attention"] = max(report["attention"], diff)
        report["ok"] &= ok
    return report
