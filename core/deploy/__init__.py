"""Deployment: the network a snapshot or an exported file runs as, in each runtime.

`runtimes` is the registry: one `Runtime` per name (torch, onnxruntime, openvino), and the one
place that decides which runtime opens a name or a file. `builtin` registers this project's
three, importing each one's module (and torch, onnxruntime or OpenVINO with it) only when a
network is opened, a file read or an INT8 copy made in it; it is imported here, so that asking
the registry finds them, and importing this package, the registry or `options` (the runtime
options test and predict share) costs no torch. A runtime of another package registers itself
when that package is imported. `onnx_graph` is the ONNX graph with decoding inside and its
metadata, `quantize` its INT8 copies, `machine` says what a benchmark ran on; `defaults` holds
what their options default to, for the parsers.
"""

from . import builtin  # noqa: F401 - registers the built-in runtimes
