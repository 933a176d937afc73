"""This project's runtimes, registered without importing them: torch (core/deploy/network.py),
onnxruntime (onnx_runtime.py) and OpenVINO (openvino_runtime.py).

What the command line and the error messages say of a runtime (its name, precisions, suffixes,
benchmark rows, the errors it raises when it cannot run here) is written here; the functions
that open, read and quantize its files are `Later`s, which import its module, and torch,
onnxruntime or OpenVINO with it, when first called. So `--runtime`'s choices and help cost no
import of torch, and a runtime's package is imported only when a network is opened, a file's
metadata read or an INT8 copy made in it. core/deploy/__init__.py imports this module, so that
asking the registry finds them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..utils import hints
from .runtimes import Convert, Int8, Runtime, register
from .unavailable import CompileUnavailable, MissingOnnxRuntime, MissingOpenVino


@dataclass(frozen=True)
class Later:
    """A function of a runtime's module, imported when first called: `load()` returns it."""

    load: Callable[[], Callable[..., Any]]

    def __call__(self, *args: Any) -> Any:
        return self.load()(*args)


def _network() -> ModuleType:
    from . import network

    return network


def _onnx_runtime() -> ModuleType:
    from . import onnx_runtime

    return onnx_runtime


def _openvino_runtime() -> ModuleType:
    from . import openvino_runtime

    return openvino_runtime


register(Runtime(
    "torch", "the snapshot itself, in torch", ("config", "fp32", "bf16", "compile"),
    Later(lambda: _network().open_snapshot), exported=False,
    unavailable=(CompileUnavailable,), exact=("fp32", "compile"),
    rows={"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "compile")}))
register(Runtime(
    "onnxruntime", f"the file {hints.command('export')} wrote, in onnxruntime", ("fp32",),
    Later(lambda: _onnx_runtime().open_onnx), suffixes=(".onnx",),
    read_metadata=Later(lambda: _onnx_runtime().file_metadata),
    unavailable=(MissingOnnxRuntime,), exact=("fp32",), rows={"cpu": ("fp32", "int8")},
    int8=Int8(".int8.onnx", Later(lambda: _onnx_runtime().quantize_onnxruntime))))
# f32: the CPU plugin computes in float32 (equal to torch within the parity tolerance);
# default: what it picks for speed (bf16 on CPUs with bf16 units, else f32).
register(Runtime(
    "openvino", f"the file {hints.command('export')} wrote (or its IR), in OpenVINO's CPU "
    "plugin",
    ("f32", "default"), Later(lambda: _openvino_runtime().open_openvino), suffixes=(".xml",),
    read_metadata=Later(lambda: _openvino_runtime().file_metadata),
    unavailable=(MissingOpenVino,), exact=("f32",), rows={"cpu": ("f32", "default", "int8")},
    int8=Int8(".int8.xml", Later(lambda: _openvino_runtime().quantize_openvino)),
    convert=Convert("OpenVINO IR, float32", Later(lambda: _openvino_runtime().write_openvino_ir),
                    Later(lambda: _openvino_runtime().openvino))))
