"""The exported detector in OpenVINO's CPU plugin: the runtime "openvino" of the registry
(core/deploy/runtimes.py, registered in core/deploy/builtin.py), `--runtime openvino`.

OpenVINO reads the .onnx file tools/export.py writes unchanged (its ONNX reader keeps the
file's metadata under the model's "framework" runtime info), or an OpenVINO IR (.xml beside its
.bin) written with that metadata, such as its INT8 copy (`quantize_openvino`: `nncf.quantize`,
written as `<name>.int8.xml`; core/deploy/quantize.py says what stays float). Either
way the file passes the checks of the onnxruntime runtime: its config and class count, its
snapshot identity, the decode settings baked into it and the input sizes it takes.

Precision: "f32" makes the plugin compute in float32 (detections equal torch's within the
parity tolerance); "default" leaves the plugin its own choice, bf16 on CPUs with bf16 units
(AVX-512 BF16 or AMX) and float32 elsewhere. An INT8 file runs its quantized layers in int8
at either setting. The precision in effect is `OpenVinoNetwork.precision`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.deploy.onnx_graph import CALIBRATION, META_KEYS
from core.nnet.checkpoint import recorded_classes

from ..errors import UsageError
from ..utils import hints
from .onnx_runtime import OnnxNetwork, check_config
from .quantize import calibration_record, head_output_convs, quiet
from .runtimes import runtime
from .unavailable import MissingOpenVino

# Where OpenVINO's ONNX reader puts an ONNX file's metadata_props (and where IR files written
# by this project keep them): the model's runtime info under this key.
RT_SECTION = "framework"
# The operations an INT8 copy quantizes (with the inputs, outputs and constants they need).
CONVOLUTIONS = {"Convolution", "GroupConvolution", "Parameter", "Result", "Constant"}


def openvino() -> Any:
    """The openvino module, or a one-line MissingOpenVino naming the extra."""
    try:
        import openvino as ov
    except ImportError:
        raise MissingOpenVino(f"openvino is not installed: {hints.install('openvino')}"
                              ) from None
    return ov


def read_model(path: Path) -> Any:
    """An openvino.Model of an .onnx or IR .xml file; one line when it cannot be read."""
    ov = openvino()
    try:
        return ov.Core().read_model(str(path))
    except Exception as err:  # noqa: BLE001 - OpenVINO raises plain RuntimeErrors
        text = str(err).strip()
        first = next((line.strip() for line in text.splitlines() if line.strip()),
                     type(err).__name__)
        raise UsageError(f"{path} is not a readable ONNX or OpenVINO IR file ({first[:200]}); "
                         f"export it again with {hints.command('export')}") from None


def model_metadata(model: Any) -> dict[str, Any]:
    """The export metadata of an openvino.Model, decoded (empty for a foreign file)."""
    found = {}
    for key in (*META_KEYS, CALIBRATION):
        if model.has_rt_info([RT_SECTION, key]):
            found[key] = json.loads(model.get_rt_info([RT_SECTION, key]).astype(str))
    return found


def set_model_metadata(model: Any, meta: dict[str, Any]) -> None:
    """Write `meta` ({key: value}) into `model`'s runtime info, as `model_metadata` reads it."""
    for key, value in meta.items():
        model.set_rt_info(json.dumps(value), [RT_SECTION, key])


def write_openvino_ir(path: Path) -> Path:
    """The exported .onnx file `path` as an OpenVINO IR beside it (`.xml` and `.bin`, weights in
    float32, the metadata kept); returns the .xml path."""
    out = path.with_suffix(".xml")
    openvino().save_model(read_model(path), str(out), compress_to_fp16=False)
    return out


def cpu_properties(precision: str, threads: int) -> dict[str, Any]:
    """The CPU plugin's settings: latency (one stream) on `threads` threads, and float32
    inference for `precision` "f32" (the plugin's own choice for "default")."""
    precisions = runtime("openvino").precisions  # declared in core/deploy/builtin.py
    if precision not in precisions:
        raise UsageError(f"--precision {precision}: choose one of {', '.join(precisions)}")
    props: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
                             "INFERENCE_NUM_THREADS": threads}
    if precision == "f32":
        props["INFERENCE_PRECISION_HINT"] = "f32"
    return props


class OpenVinoNetwork(OnnxNetwork):
    """An exported detector in OpenVINO's CPU plugin, used like `OnnxNetwork` (same `test`,
    same checks). Threads: as many as torch uses (`torch.get_num_threads()`)."""

    def __init__(self, path: Path, config: str, categories: int, device: str = "cpu",
                 precision: str = "f32") -> None:
        if torch.device(device).type != "cpu":
            raise UsageError("--runtime openvino runs on the CPU here: use --device cpu")
        model = read_model(path)
        self.path = path
        self.meta = model_metadata(model)
        check_config(self.meta, path, config, categories)
        self.classes = recorded_classes(self.meta.get("classes"), categories)
        self.outputs = [output.get_any_name() for output in model.outputs]
        try:
            self.compiled = openvino().Core().compile_model(
                model, "CPU", cpu_properties(precision, torch.get_num_threads()))
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else "no reason"
            raise RuntimeError(f"OpenVINO cannot compile {path}: {first}") from None
        self.request = self.compiled.create_infer_request()
        self.precision = self.compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        self.device = torch.device("cpu")
        self.evaluated_weights = self.meta.get("weights", "raw")

    def infer(self, pixels: np.ndarray) -> list[np.ndarray]:
        """The graph's outputs for a checked (B, 3, H, W) float32 input."""
        results = self.request.infer({0: pixels})
        return [np.array(results[output], copy=True) for output in self.compiled.outputs]


def open_openvino(path: Path, system_config: Any, db_config: dict, device: str, precision: str,
                  raw_weights: bool) -> OpenVinoNetwork:
    """The registry's opener (`core.deploy.runtimes.Opener`)."""
    return OpenVinoNetwork(path, str(system_config.snapshot_name), int(db_config["categories"]),
                           device, precision)


def file_metadata(path: Path) -> dict[str, Any]:
    """The export metadata of an .onnx or IR .xml file alone."""
    return model_metadata(read_model(path))


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
    with quiet():
        quantized = nncf.quantize(model, nncf.Dataset(inputs), subset_size=len(inputs),
                                  ignored_scope=scope)
    record = calibration_record(keep_float, excluded, f"nncf {nncf.__version__} quantize (OpenVINO "
                     f"{ov.__version__.split('-')[0]})", len(inputs), split, scale)
    set_model_metadata(quantized, {**meta, CALIBRATION: record})
    ov.save_model(quantized, str(out), compress_to_fp16=False)
    return record

