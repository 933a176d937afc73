"""Deployment: the network a snapshot or an exported file runs as, in each runtime.

`runtimes` is the registry: one `Runtime` per name (torch, onnxruntime, openvino), each
registered by the module that implements it, and the one place that decides which runtime opens a
name or a file. `export` writes the ONNX graph with decoding inside, `quantize` its INT8 copies,
`machine` says what a benchmark ran on. The built-in runtimes are imported here, so that asking
the registry finds them; a runtime of another package registers itself the same way when that
package is imported.
"""

# A snapshot's or an exported file's config record is checked as a config file is, against the
# db keys the datasets declare when they are registered.
from .. import dbs  # noqa: F401
from . import network, onnx_runtime, openvino_runtime, runtimes

__all__ = ["network", "onnx_runtime", "openvino_runtime", "runtimes"]
