"""The runtime options of test and predict (`--runtime`, `--onnx`, `--precision`, `--threads`) as
an options group (core/config/options.py's way), the fields named as `add_runtime_args`'s dests.

A stand-in until core/deploy declares this group itself; then test and predict derive from that
one and this module goes. `--runtime` accepts the registry's names as they are when the command
line is read (`RUNTIMES.keys()` is a live view), so a runtime registered by another package is
accepted as before.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from core.deploy.runtimes import DEFAULT, RUNTIMES
from core.utils.options import option

_RUNTIME_HELP = (f"default {DEFAULT} (a file alone: the runtime its suffix names); "
                 + "; ".join(f"{entry.name}: {entry.summary}" for entry in RUNTIMES.values()))
_PRECISION_HELP = ("the runtime's precision (default: its first); "
                   + "; ".join(f"{entry.name}: {', '.join(entry.precisions)}"
                               for entry in RUNTIMES.values()))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeOptions:
    """Which runtime runs the network, from which file, at which precision, on how many
    threads."""

    runtime: str | None = option(None, "--runtime", choices=RUNTIMES.keys(), help=_RUNTIME_HELP)
    onnx: Path | None = option(
        None, "--onnx", parse=Path, metavar="PATH",
        help="with a runtime of exported files: the file (an .onnx, or for openvino also an IR "
             ".xml; default: the exported file of the snapshot, "
             "cache/nnet/<Cfg>/<Cfg>_<iter>.onnx)")
    precision: str | None = option(None, "--precision", help=_PRECISION_HELP)
    threads: int | None = option(
        None, "--threads", parse=int, metavar="N",
        help="CPU threads (default: OMP_NUM_THREADS, else the CPUs this process may use); test "
             "computes as many images at once (at most 4) on them; threads wait passively "
             "unless OMP_WAIT_POLICY says otherwise")
