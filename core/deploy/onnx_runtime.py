"""An exported .onnx file in onnxruntime: the runtime "onnxruntime" of the registry
(core/deploy/runtimes.py, registered in core/deploy/builtin.py); OpenVINO
(core/deploy/openvino_runtime.py) shares its checks.

Its network answers `test(images, **decode_kwargs)` as torch's does, so one `detect()` loop, one
inference per sampling function and one scorer serve every runtime: only the network and the
decoding (inside the graph) differ. The graph's metadata (see core/deploy/onnx_graph.py) must name
the config and class count being evaluated, and the decode settings it was exported with must be
the ones asked for; anything else is a one-line error saying what to do. That the file is the
export of the snapshot asked for is checked for every exported runtime alike
(core/deploy/identity.py).

Its INT8 copy (`quantize_onnxruntime`, the registry's `int8` of this runtime) is
`onnxruntime.quantization.quantize_static` in QDQ format (uint8 activations, int8 weights per
output channel, min-max calibration), written as `<name>.int8.onnx`; core/deploy/quantize.py
says what stays float and how it is calibrated.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.deploy.onnx_graph import CALIBRATION, INPUT_NAME, META_KEYS, describe_sizes, fits
from core.nnet.checkpoint import recorded_classes

from ..errors import UsageError
from ..utils import hints
from .quantize import calibration_record, head_output_convs, quiet
from .unavailable import MissingOnnxRuntime


def _ort() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise MissingOnnxRuntime(f"onnxruntime is not installed: {hints.install('onnx')}"
                                 ) from None
    return onnxruntime


def read_metadata(session: Any) -> dict[str, Any]:
    """The export metadata of an onnxruntime session, decoded (empty for a foreign file)."""
    props = session.get_modelmeta().custom_metadata_map
    return {key: json.loads(props[key]) for key in (*META_KEYS, CALIBRATION) if key in props}


def check_config(meta: dict[str, Any], path: Path, config: str, categories: int) -> None:
    """A one-line UsageError unless the file `path` (metadata `meta`) was exported from
    `config` with `categories` classes."""
    if meta.get("config") != config or meta.get("categories") != categories:
        raise UsageError(
            f"{path} was exported from config {meta.get('config', '?')} with "
            f"{meta.get('categories', '?')} classes, not {config} with {categories}: "
            f"export {config} with {hints.command('export', config)} or pass its file "
            "to --onnx")


class OnnxNetwork:
    """An exported detector in onnxruntime, used like a NetworkFactory by the inference code.

    `test(images (B, 3, H, W) float32, **decode_kwargs)` returns what the torch model's test path
    returns: `(detections,)` with detections (B, num_dets, 8) float32 as `decode` gives them,
    or, for a model with attention heads, `(detections, [att (B, 1, h_j, w_j) float32, ...])`
    (only detections with `no_att=True`). Tensors come back on the CPU.

    Threads: onnxruntime uses as many as torch does (`torch.get_num_threads()`, which
    `core.utils.threads` sets), so both runtimes follow the same setting; they do not spin
    while they wait when OpenMP's do not (OMP_WAIT_POLICY=PASSIVE, the commands' default).
    """

    def __init__(self, path: Path, config: str, categories: int, device: str = "cpu",
                 content: bytes | None = None) -> None:
        """`content`: the file's bytes when they are not written yet (the export's own check);
        `path` then only names it."""
        ort = _ort()
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = ["CPUExecutionProvider"]
        if torch.device(device).type == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise UsageError("--device cuda with --runtime onnxruntime needs "
                                 "onnxruntime-gpu; use --device cpu or install it")
            providers.insert(0, "CUDAExecutionProvider")
        try:
            self.session = ort.InferenceSession(str(path) if content is None else content,
                                                options, providers=providers)
        except Exception as err:  # noqa: BLE001 - onnxruntime raises its own plain types
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UsageError(f"{path} is not a readable ONNX file ({first}); export it again "
                             f"with {hints.command('export')}") from None
        self.path = path
        self.meta = read_metadata(self.session)
        check_config(self.meta, path, config, categories)
        self.classes = recorded_classes(self.meta.get("classes"), categories)
        self.device = torch.device("cpu")
        self.outputs = [output.name for output in self.session.get_outputs()]
        # "ema" or "raw", as test.py reports it; files from before it was recorded hold raw ones
        self.evaluated_weights = self.meta.get("weights", "raw")

    def check_input(self, shape: tuple[int, ...]) -> None:
        """A one-line error unless (B, 3, H, W) is a size the exported network takes."""
        rule = self.meta["size_rule"]
        if len(shape) != 4 or shape[1] != 3 or not (fits(shape[2], rule) and
                                                     fits(shape[3], rule)):
            raise UsageError(f"{self.path} cannot take an input of shape {tuple(shape)}: it "
                             f"needs (B, 3, H, W) with H and W {describe_sizes(rule)}")
        largest = self.meta.get("max_side")
        if largest is not None and max(shape[2:]) > largest:
            raise UsageError(f"{self.path} is exact for inputs up to {largest} pixels a side, "
                             f"not {tuple(shape)}: export it again with a larger --max-map "
                             f"({hints.command('export', '... --max-map N')}) or "
                             "test at a smaller "
                             "scale")

    def check_decode(self, kwargs: dict[str, Any]) -> None:
        """A one-line error unless `kwargs` are the decode settings the graph holds."""
        baked = self.meta["decode"]
        asked = {key: value for key, value in kwargs.items() if key != "no_att"}
        if asked != {key: baked.get(key) for key in asked} or set(baked) - set(asked):
            raise UsageError(f"{self.path} decodes with {baked}, but {asked} is asked for: "
                             "export the snapshot again with this config's test settings")

    def test(self, image: torch.Tensor, no_att: bool = False, **kwargs: Any) -> Any:
        self.check_input(tuple(image.shape))
        self.check_decode({**kwargs, "no_att": no_att})
        pixels = np.ascontiguousarray(image.detach().cpu().numpy(), dtype=np.float32)
        found = [torch.from_numpy(out) for out in self.infer(pixels)]
        if len(found) == 1:
            return (found[0],)
        return found[0] if no_att else (found[0], found[1:])

    def infer(self, pixels: np.ndarray) -> list[np.ndarray]:
        """The graph's outputs for a checked (B, 3, H, W) float32 input."""
        return self.session.run(self.outputs, {INPUT_NAME: pixels})


def file_metadata(path: Path) -> dict[str, Any]:
    """The export metadata of the .onnx file `path` alone."""
    return read_metadata(_ort().InferenceSession(str(path), providers=["CPUExecutionProvider"]))


def open_onnx(path: Path, system_config: Any, db_config: dict, device: str, precision: str,
              raw_weights: bool) -> OnnxNetwork:
    """The registry's opener (`core.deploy.runtimes.Opener`); one precision, the file's own."""
    return OnnxNetwork(path, str(system_config.snapshot_name), int(db_config["categories"]),
                       device)


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

    with quiet():
        quantize_static(proto, str(out), Reader(inputs), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=True, op_types_to_quantize=["Conv"],
                        nodes_to_exclude=excluded)
    import onnxruntime

    record = calibration_record(keep_float, excluded, f"onnxruntime {onnxruntime.__version__} "
                     "quantize_static QDQ u8s8 per-channel min-max", len(inputs), split, scale)
    quantized = onnx.load(str(out))
    props = {prop.key: prop.value for prop in proto.metadata_props}
    props[CALIBRATION] = json.dumps(record)
    del quantized.metadata_props[:]
    quantized.metadata_props.extend(onnx.StringStringEntryProto(key=key, value=value)
                                    for key, value in props.items())
    onnx.save(quantized, str(out))
    return record

