"""The runtime options test and predict share, declared once: `--runtime`, `--onnx`,
`--precision` and `--threads` as option fields (core/utils/options.py).

A command's options class derives from `RuntimeOptions` beside the groups of
core/config/options.py; its parser (cornernet/options.py) lists the runtimes registered when it
is built, so a runtime registered from outside is a choice too, and printing --help imports no
torch (the registry names its runtimes without importing them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..utils.options import option
from .runtimes import DEFAULT, RUNTIMES


def _runtime_help() -> str:
    return (f"default {DEFAULT} (a file alone: the runtime its suffix names); "
            + "; ".join(f"{entry.name}: {entry.summary}" for entry in RUNTIMES.values()))


def _precision_help() -> str:
    return "the runtime's precision (default: its first); " + "; ".join(
        f"{entry.name}: {', '.join(entry.precisions)}" for entry in RUNTIMES.values())


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeOptions:
    """Which runtime runs the snapshot, on which file, at which precision, on how many threads.
    The field names are the command line's (`--runtime` is `runtime`, ...)."""

    runtime: str | None = option(None, "--runtime", choices=lambda: tuple(RUNTIMES),
                                 help=_runtime_help)
    onnx: Path | None = option(None, "--onnx", parse=Path, metavar="PATH",
                               help="with a runtime of exported files: the file (an .onnx, or "
                                    "for openvino also an IR .xml; default: the exported file "
                                    "of the snapshot, cache/nnet/<Cfg>/<Cfg>_<iter>.onnx)")
    precision: str | None = option(None, "--precision", help=_precision_help)
    threads: int | None = option(None, "--threads", parse=int, metavar="N",
                                 help="CPU threads (default: OMP_NUM_THREADS, else the CPUs "
                                      "this process may use); test computes as many images at "
                                      "once (at most 4) on them; threads wait passively unless "
                                      "OMP_WAIT_POLICY says otherwise")
