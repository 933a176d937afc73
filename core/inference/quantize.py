"""INT8 copies of an exported detector: post-training static quantization, calibrated on images.

Two quantizers, each writing its own file beside the float one (the float file is unchanged):

- onnxruntime: `onnxruntime.quantization.quantize_static` in QDQ format (uint8 activations,
  int8 weights per output channel, min-max calibration), written as `<name>.int8.onnx`;
- OpenVINO: `nncf.quantize` on the model OpenVINO reads from the .onnx file, written as an IR
  `<name>.int8.xml` (+ `.bin`).

What stays float: only convolutions are quantized, by both (the corner pools' running maximum,
the residual additions, the decoding and everything after the heads keep float: NNCF left to
itself also quantizes the decoding's additions, which moved nearly every box); and with
`keep_float="heads"` (the default) the last convolution of every head (heatmaps, embeddings,
offsets) keeps float weights and inputs in both, since its outputs are the scores and
positions the decoding ranks and reads directly.

The calibration images are the config's training split, resized and padded as test.py does at
its first test scale, one per batch. The file's metadata is the float file's plus
`calibration`: {quantizer, images, split, scale, keep_float, float_layers}.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from core.inference.cornernet import network_input, resize_and_pad
from core.nnet.export import INPUT_NAME

from ..errors import UsageError
from .onnx_runtime import CALIBRATION
from .openvino_runtime import model_metadata, openvino, read_model, set_model_metadata

DEFAULT_IMAGES = 300
KEEP_FLOAT = ("heads", "none")
HEADS = ("heats", "tags", "offs")
CONVOLUTIONS = {"Convolution", "GroupConvolution", "Parameter", "Result", "Constant"}


def int8_file(path: Path, runtime: str) -> Path:
    """Where the INT8 copy of exported file `path` is written for `runtime`."""
    return path.with_suffix(".int8.onnx" if runtime == "onnxruntime" else ".int8.xml")


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


def _record(keep_float: str, float_layers: list[str], quantizer: str, count: int, split: str,
            scale: float) -> dict[str, Any]:
    return {"quantizer": quantizer, "images": count, "split": split, "scale": scale,
            "keep_float": keep_float, "float_layers": float_layers}


def quantize_onnxruntime(path: Path, out: Path, inputs: list[np.ndarray], split: str,
                         scale: float, keep_float: str = "heads") -> dict[str, Any]:
    """Write `out`, the INT8 QDQ copy of the .onnx file `path` calibrated on `inputs`; return
    its calibration record (also in its metadata)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    proto = onnx.load(str(path))
    excluded = head_output_convs(proto) if keep_float == "heads" else []

    class Reader(CalibrationDataReader):
        def __init__(self, batches: Iterable[np.ndarray]) -> None:
            self.batches = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self.batches, None)
            return None if batch is None else {INPUT_NAME: batch}

    with _quiet():
        quantize_static(proto, str(out), Reader(inputs), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=True, op_types_to_quantize=["Conv"],
                        nodes_to_exclude=excluded)
    import onnxruntime

    record = _record(keep_float, excluded, f"onnxruntime {onnxruntime.__version__} "
                     "quantize_static QDQ u8s8 per-channel min-max", len(inputs), split, scale)
    quantized = onnx.load(str(out))
    props = {prop.key: prop.value for prop in proto.metadata_props}
    props[CALIBRATION] = json.dumps(record)
    del quantized.metadata_props[:]
    quantized.metadata_props.extend(onnx.StringStringEntryProto(key=key, value=value)
                                    for key, value in props.items())
    onnx.save(quantized, str(out))
    return record


def quantize_openvino(path: Path, out: Path, inputs: list[np.ndarray], split: str,
                      scale: float, keep_float: str = "heads") -> dict[str, Any]:
    """Write `out` (.xml and .bin), the NNCF INT8 copy of the exported file `path`, calibrated
    on `inputs`; return its calibration record (also in its metadata)."""
    import nncf
    import onnx

    ov = openvino()
    excluded = head_output_convs(onnx.load(str(path))) if keep_float == "heads" else []
    model = read_model(path)
    meta = model_metadata(model)
    # Convolutions only, as for onnxruntime: NNCF would also quantize the inputs of the
    # decoding's and the corner pools' additions and comparisons (box coordinates in int8).
    others = sorted({op.get_type_name() for op in model.get_ordered_ops()} - CONVOLUTIONS)
    scope = nncf.IgnoredScope(patterns=[f"{name}(/.*)?" for name in excluded], types=others,
                              validate=False)
    nncf.set_log_level(logging.ERROR)
    with _quiet():
        quantized = nncf.quantize(model, nncf.Dataset(inputs), subset_size=len(inputs),
                                  ignored_scope=scope)
    record = _record(keep_float, excluded, f"nncf {nncf.__version__} quantize (OpenVINO "
                     f"{ov.__version__.split('-')[0]})", len(inputs), split, scale)
    set_model_metadata(quantized, {**meta, CALIBRATION: record})
    ov.save_model(quantized, str(out), compress_to_fp16=False)
    return record


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
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
