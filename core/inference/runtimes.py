"""The runtimes a snapshot runs in, by name: torch (the snapshot itself), onnxruntime and
OpenVINO (the file tools/export.py wrote); the one place that knows all three, so that neither
runtime module imports the other's."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from core.config.rules import check_decode_settings
from core.nnet.checkpoint import require_snapshot
from core.utils.device import resolve_device

from ..errors import UsageError
from ..utils import hints
from .network import InferenceNetwork
from .onnx_runtime import PRECISIONS, RUNTIMES, OnnxNetwork, check_identity, onnx_file
from .openvino_runtime import OpenVinoNetwork


def add_runtime_args(parser: argparse.ArgumentParser) -> None:
    """--runtime and --onnx, as test.py and demo.py take them."""
    parser.add_argument("--runtime", choices=RUNTIMES, default="torch",
                        help="run the network in torch (the snapshot), or the file "
                             "tools/export.py wrote in onnxruntime or OpenVINO")
    parser.add_argument("--onnx", type=Path, default=None, metavar="PATH",
                        help="with --runtime onnxruntime or openvino: the .onnx file (or, for "
                             "openvino, an IR .xml; default: the exported file of the "
                             "snapshot, cache/nnet/<Cfg>/<Cfg>_<iter>.onnx)")
    parser.add_argument("--precision", choices=PRECISIONS, default="f32",
                        help="with --runtime openvino: f32 (default; torch's detections within "
                             "the parity tolerance) or the CPU plugin's default for speed "
                             "(bf16 where the CPU has bf16 units)")


def open_network(runtime: str, system_config: Any, db: Any, testiter: int | str,
                 device: str | None, onnx: Path | None = None,
                 raw_weights: bool = False, precision: str = "f32") -> tuple[Any, Path]:
    """The network of snapshot `testiter` in `runtime`, ready for `detect`, and its file.

    torch: an `InferenceNetwork` (no training factory) with the snapshot's weights, the weight
    average when the snapshot has one (unless `raw_weights`). onnxruntime: an `OnnxNetwork` of
    `onnx` (default `onnx_file`), checked against the config's name and class count; its weights are
    those the export took. openvino: an `OpenVinoNetwork` of the same file at `precision`.
    """
    check_decode_settings(db.configs)
    if runtime == "torch":
        path = require_snapshot(system_config, testiter)
        return InferenceNetwork.from_file(path, system_config, db.configs, device,
                                          raw_weights), path
    path = Path(onnx) if onnx is not None else onnx_file(system_config, testiter)
    if not path.is_file():
        export = hints.command("tools/export.py",
                               f"{system_config.snapshot_name} --testiter {testiter}")
        raise UsageError(f"no ONNX file {path}: write it with {export} or name one with --onnx")
    config, categories = str(system_config.snapshot_name), int(db.configs["categories"])
    if runtime == "openvino":
        network = OpenVinoNetwork(path, config, categories, str(resolve_device(device)),
                                  precision)
    else:
        network = OnnxNetwork(path, config, categories, str(resolve_device(device)))
    check_identity(network.meta, path, system_config, testiter, raw_weights)
    return network, path
