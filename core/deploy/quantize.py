"""INT8 copies of an exported detector: post-training static quantization, calibrated on images.

Each runtime that has one declares its quantizer and its file's suffix in the registry
(`Runtime.int8`, core/deploy/builtin.py), beside the runtime itself; the float file is unchanged:

- onnxruntime (core/deploy/onnx_runtime.py): `onnxruntime.quantization.quantize_static` in QDQ
  format (uint8 activations, int8 weights per output channel, min-max calibration), written as
  `<name>.int8.onnx`;
- OpenVINO (core/deploy/openvino_runtime.py): `nncf.quantize` on the model OpenVINO reads from
  the .onnx file, written as an IR `<name>.int8.xml` (+ `.bin`).

What stays float: only convolutions are quantized, by both (the corner pools' running maximum,
the residual additions, the decoding and everything after the heads keep float: NNCF left to
itself also quantizes the decoding's additions, which moved nearly every box); and with
`keep_float="heads"` (the default) the last convolution of every head (heatmaps, embeddings,
offsets) keeps float weights and inputs in both, since its outputs are the scores and
positions the decoding ranks and reads directly.

The calibration images are the config's training split, resized and padded as test.py does at
its first test scale, one per batch (`calibration_inputs`). The file's metadata is the float
file's plus `calibration`: {quantizer, images, split, scale, keep_float, float_layers}
(`calibration_record`).
"""
from __future__ import annotations

import ast
import contextlib
import io
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from core.inference.cornernet import network_input, resize_and_pad

from ..errors import UsageError
from .runtimes import runtime

HEADS = ("heats", "tags", "offs")


def int8_file(path: Path, name: str) -> Path:
    """Where the INT8 copy of exported file `path` is written for runtime `name`."""
    int8 = runtime(name).int8
    if int8 is None:
        raise UsageError(f"runtime {name} has no INT8 copy")
    return path.with_suffix(int8.suffix)


def calibration_inputs(db: Any, scale: float, count: int,
                       log: Callable[[str], None] = lambda _: None) -> list[np.ndarray]:
    """Up to `count` (1, 3, H, W) float32 inputs of `db`'s images as test.py prepares them at
    `scale`, in split order; unreadable images are skipped (and named to `log`)."""
    inputs = []
    for ind in db.db_inds:
        if len(inputs) == count:
            break
        try:
            image = db.read_image(ind)
        except Exception as err:  # noqa: BLE001 - any unreadable image is skipped, named
            log(f"calibration: skipped image {db.image_id(ind)} ({err})")
            continue
        canvas = resize_and_pad(image, scale)[0]
        inputs.append(np.ascontiguousarray(
            network_input(canvas[None], db.mean, db.std, "cpu").numpy(), dtype=np.float32))
    if not inputs:
        raise UsageError("no readable image to calibrate on in the training split")
    return inputs


def head_output_convs(proto: Any) -> list[str]:
    """ONNX node names of the last convolution of every head: a Conv whose module (from the
    exporter's `pkg.torch.onnx.name_scopes`) is `model.<tl|br>_<heats|tags|offs>.<j>.1`."""
    found = []
    for node in proto.graph.node:
        if node.op_type != "Conv":
            continue
        props = {prop.key: prop.value for prop in node.metadata_props}
        scopes = ast.literal_eval(props.get("pkg.torch.onnx.name_scopes", "[]"))
        module = scopes[-2] if len(scopes) >= 2 else ""
        parts = module.split(".")
        if len(parts) == 4 and parts[0] == "model" and parts[1].endswith(HEADS) \
                and parts[3] == "1":
            found.append(node.name)
    return found


def calibration_record(keep_float: str, float_layers: list[str], quantizer: str, count: int,
                       split: str, scale: float) -> dict[str, Any]:
    """What an INT8 file's metadata says of its calibration (its `calibration` key)."""
    return {"quantizer": quantizer, "images": count, "split": split, "scale": scale,
            "keep_float": keep_float, "float_layers": float_layers}


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The quantizers' progress bars, warnings and info lines, kept off the console."""
    root, level = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.ERROR)  # onnxruntime's advice to pre-process goes to the root logger
    try:
        with (warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()),
              contextlib.redirect_stderr(io.StringIO())):
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)
