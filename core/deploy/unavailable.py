"""Why a built-in runtime cannot run on this machine: its package is missing (the message names
the extra that brings it) or torch.compile cannot compile here.

Each is something to install or a benchmark row to leave out, said in one line. They live apart
from the runtimes that raise them, so that the registry declares them (`Runtime.unavailable`,
core/deploy/builtin.py) without importing torch, onnxruntime or OpenVINO.
"""

from __future__ import annotations

from ..errors import UsageError, UserMistake


class CompileUnavailable(UserMistake, RuntimeError):
    """torch.compile cannot run on this machine (a missing compiler, not a wrong model): like a
    missing package, something to install or a row to leave out, said in one line."""


class MissingOnnxRuntime(UsageError):
    """onnxruntime is not installed."""


class MissingOpenVino(UsageError):
    """openvino is not installed."""
