"""The runtimes a snapshot runs in, by name: the registry, and the one place that decides which
runtime opens a name or a file.

Each runtime is a `Runtime`: what the command line and the error messages say of it (name,
precisions, suffixes, benchmark rows) and the functions that open, read and quantize its files.
This project's three (torch, onnxruntime, OpenVINO) are registered by core/deploy/builtin.py
(core/deploy/__init__.py imports it) with functions that import their modules, and torch,
onnxruntime or OpenVINO with them, only when first called. This module imports no torch either,
so a parser that lists the runtimes (`core.deploy.options.RuntimeOptions`) prints its --help at
once. A runtime of another package is one module that calls `register` when it is imported.
test.py, demo.py, `cornernet.Detector` and tools/benchmark.py ask `runtime(name)`,
`runtime_of(file)` and `open_network`; none of them compares a runtime's name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.rules import check_decode_settings
from ..errors import UsageError, closest
from ..utils import hints
from ..utils.threads import use_threads

# `open_file(path, system_config, db_config, device, precision, raw_weights)`: the network of
# `path` (a snapshot for torch, an exported file for the others) on `device`, at `precision`.
Opener = Callable[[Path, Any, dict, str, str, bool], Any]
# `quantize(path, out, inputs (list of (1, 3, H, W) float32), split, scale, keep_float)`: write
# the INT8 copy `out` of the exported file `path`; return its calibration record.
Quantizer = Callable[[Path, Path, list, str, float, str], dict]


@dataclass(frozen=True)
class Int8:
    """How a runtime makes and names the INT8 copy of an exported file (core/deploy/quantize.py)."""

    suffix: str  # the copy is written beside the float file: <name><suffix>
    quantize: Quantizer


@dataclass(frozen=True)
class Convert:
    """How a runtime makes a file of its own from the checked .onnx an export wrote (OpenVINO's
    IR); `cornernet export` writes it beside the .onnx for that runtime."""

    what: str  # the file in words, for the export's report: "OpenVINO IR, float32"
    write: Callable[[Path], Path]  # the .onnx file -> the file written beside it
    require: Callable[[], Any]  # raises the runtime's `unavailable` error when it cannot write


@dataclass(frozen=True)
class Runtime:
    """One runtime: what it opens, at which precisions, and where it runs.

    Args:
        name: what --runtime takes.
        summary: a phrase for --help.
        precisions: what --precision takes with it; the first is its default.
        open_file: see `Opener`.
        exported: it opens the file tools/export.py wrote (checked to be the export of the
            snapshot asked for); otherwise the snapshot itself.
        suffixes: the exported files it opens alone (`runtime_of`), e.g. (".xml",).
        read_metadata: the export metadata of a file alone ({} for a foreign file), for a file
            opened without its config (`cornernet.Detector.from_file`).
        exact: the precisions whose detections equal torch float32's within the parity
            tolerance (the others are judged by their AP).
        rows: the precisions tools/benchmark.py measures by default on each device type
            ({"cpu": ("fp32", "int8")}; "int8" is the `int8` copy at the first precision).
        unavailable: the errors it raises when its package is missing (a benchmark row says
            "not available" rather than "failed").
        int8: its INT8 copy, where it has one.
        convert: the file of its own an export writes beside the .onnx, where it has one.
    """

    name: str
    summary: str
    precisions: tuple[str, ...]
    open_file: Opener
    exported: bool = True
    suffixes: tuple[str, ...] = ()
    read_metadata: Callable[[Path], dict[str, Any]] | None = None
    exact: tuple[str, ...] = ()
    rows: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unavailable: tuple[type[BaseException], ...] = ()
    int8: Int8 | None = None
    convert: Convert | None = None

    def precision(self, asked: str | None) -> str:
        """`asked` when this runtime has it (its default for None), else a one-line error."""
        if asked is None:
            return self.precisions[0]
        if asked not in self.precisions:
            raise UsageError(f"--precision {asked} is not one of --runtime {self.name}'s: "
                             f"choose {' or '.join(self.precisions)}")
        return asked

    def file_of(self, system_config: Any, testiter: int | str, file: Path | None = None) -> Path:
        """The file this runtime opens for snapshot `testiter` (`file` where one is named),
        or a one-line error saying how to make it when it does not exist."""
        from ..nnet.checkpoint import require_snapshot  # torch: here, not with the registry
        from .identity import onnx_file

        if not self.exported:
            return require_snapshot(system_config, testiter,
                                    "train first or pick another snapshot (--testiter)")
        path = Path(file) if file is not None else onnx_file(system_config, testiter)
        if not path.is_file():
            export = hints.command("export",
                                   f"{system_config.snapshot_name} --testiter {testiter}")
            raise UsageError(f"no exported file {path}: write it with {export} or name one "
                             "with --onnx")
        return path

    def row_names(self) -> tuple[str, ...]:
        """Every benchmark row it can measure: its precisions, and "int8" where it has a copy."""
        return self.precisions + (("int8",) if self.int8 is not None else ())

    def label(self, network: Any) -> str:
        """The runtime and the precision its network runs at, as test.py prints it and its
        journal records it (results at another precision are another run)."""
        precision = getattr(network, "precision", None)
        return f"{self.name} {precision}" if precision else self.name


RUNTIMES: dict[str, Runtime] = {}
DEFAULT = "torch"  # what runs a snapshot when no runtime is named
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def register(entry: Runtime) -> Runtime:
    """Add `entry` to the registry under its name (again: replaced); returns it. A ValueError
    here, at the call that made it, when it could not run: a name that --runtime and the
    benchmark's `runtime:precision` rows cannot take, or no precision to run at."""
    if not _NAME.fullmatch(entry.name):
        raise ValueError(f"runtime {entry.name!r}: a name is letters, digits, '_', '.' and "
                         "'-' (it is --runtime's value and the first half of a benchmark row "
                         "'runtime:precision')")
    if isinstance(entry.precisions, str) or not entry.precisions:
        raise ValueError(f"runtime {entry.name!r}: precisions must be a tuple of at least one "
                         f"name (the first is the default), got {entry.precisions!r}")
    odd = [p for p in (*entry.precisions, *entry.exact) if not _NAME.fullmatch(str(p))]
    if odd:
        raise ValueError(f"runtime {entry.name!r}: precision {odd[0]!r} is not a name (letters, "
                         "digits, '_', '.', '-')")
    extra = [p for p in entry.exact if p not in entry.precisions]
    if extra:
        raise ValueError(f"runtime {entry.name!r}: exact names {extra[0]!r}, which is not one "
                         f"of its precisions {', '.join(entry.precisions)}")
    RUNTIMES[entry.name] = entry
    return entry


def runtime(name: str | None) -> Runtime:
    """The runtime registered as `name` (None: `DEFAULT`), or a one-line error naming the
    registered ones."""
    name = DEFAULT if name is None else name
    if name not in RUNTIMES:
        raise UsageError(f"no runtime '{name}': {closest(name, tuple(RUNTIMES))}")
    return RUNTIMES[name]


def runtime_of(path: Path, name: str | None = None) -> Runtime:
    """The runtime that opens the exported file `path` alone: `name` where one is asked for,
    else the first registered whose suffixes hold the file's (.onnx: onnxruntime)."""
    if name is not None:
        return runtime(name)
    suffix = Path(path).suffix.lower()
    found = next((entry for entry in RUNTIMES.values() if suffix in entry.suffixes), None)
    if found is None:
        known = sorted({s for entry in RUNTIMES.values() for s in entry.suffixes})
        raise UsageError(f"{path}: no runtime opens a {suffix or 'suffixless'} file alone "
                         f"(known: {', '.join(known)}); name the runtime")
    return found


def all_rows() -> list[str]:
    """Every benchmark row (`runtime:precision`) a registered runtime can measure."""
    return [f"{entry.name}:{precision}" for entry in RUNTIMES.values()
            for precision in entry.row_names()]


def default_rows(device_type: str) -> list[str]:
    """The benchmark rows measured by default on a device of this type, as each runtime
    declares them."""
    return [f"{entry.name}:{precision}" for entry in RUNTIMES.values()
            for precision in entry.rows.get(device_type, ())]


def unavailable() -> tuple[type[BaseException], ...]:
    """What a runtime raises when its package, compiler or GPU is missing."""
    return (ImportError, *(kind for entry in RUNTIMES.values() for kind in entry.unavailable))


def open_network(name: str | None, system_config: Any, db: Any, testiter: int | str,
                 device: str | None, onnx: Path | None = None,
                 raw_weights: bool = False, precision: str | None = None,
                 threads: int | None = None) -> tuple[Any, Path]:
    """The network of snapshot `testiter` in runtime `name` (None: `DEFAULT`), ready for
    `detect`, and its file.

    torch: an `InferenceNetwork` (no training factory) with the snapshot's weights, the weight
    average when the snapshot has one (unless `raw_weights`). A runtime of exported files opens
    `onnx` (default `onnx_file`), checked against the config's name and class count and to be
    the export of snapshot `testiter`'s weights now; its weights are those the export took.
    Every runtime computes on `threads` CPU threads (`core.utils.threads.choose_threads`). The
    class names the file records become `db`'s (same category ids), for tables and pictures.
    """
    from ..utils.device import resolve_device  # torch: here, not with the registry
    from .identity import check_identity

    entry = runtime(name)
    precision = entry.precision(precision)
    check_decode_settings(db.configs)
    use_threads(threads)
    path = entry.file_of(system_config, testiter, onnx)
    network = entry.open_file(path, system_config, db.configs,
                              str(resolve_device(device)), precision, raw_weights)
    if entry.exported:
        check_identity(network.meta, path, system_config, testiter, raw_weights)
    _recorded_names(db, network)
    return network, path


def _recorded_names(db: Any, network: Any) -> None:
    """The class names the network's file records name `db`'s classes (tables, pictures)."""
    if getattr(network, "classes", None) is not None and hasattr(db, "use_names"):
        db.use_names(*network.classes)
