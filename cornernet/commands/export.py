"""Export a snapshot as one ONNX graph with the decoding inside, then check it.

    cornernet export <Cfg> [--testiter N|best|FILE] [--out PATH] [--opset K] [--image IMG]
                           [--raw-weights] [--max-map N]

Writes cache/nnet/<Cfg>/<Cfg>_<iter>.onnx (or --out): input `image` (B, 3, H, W) float32,
normalised, B, H and W dynamic; outputs `detections` (B, num_dets, 8) float32 and, for Saccade,
`att0..att2`. Before anything is written, it runs onnx.checker, runs the graph in onnxruntime on
a real image (--image, by default the first of the config's validation split) with its mirror
image as a batch of 2, and prints the largest differences from torch with the tolerance rule of
the parity references; only a graph that passes replaces the file (atomically: a failed or killed
export leaves the previous file and no temporary one). The file records the snapshot it holds
(iteration, which weights, their digest, the largest input side), which the onnxruntime runtime
compares. Needs the onnx extra: pip install -e ".[onnx]".

The workflow is core's (core/deploy/exporter.py, `export_snapshot`): this command reads its
options (`ExportOptions`), runs it and prints its report; `cornernet.export` and
`Detector.export` write the same files.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import load_config
from core.config.options import ConfigOptions, DebugOptions, SnapshotOptions
from core.deploy.defaults import DEFAULT_MAX_MAP, DEFAULT_OPSET, OPSETS, check_export
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError
from core.utils.options import option
from cornernet.options import parse

# torch, cv2 and the export itself are imported by the functions that use them, so that --help
# imports none of them (cornernet/commands/__init__.py).
if TYPE_CHECKING:
    from core.deploy.exporter import ExportReport

PROG = "cornernet export"
DESCRIPTION = "Export a snapshot to ONNX and check it"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportOptions(ConfigOptions, SnapshotOptions, DebugOptions):
    """`cornernet export`'s options; `cornernet.export` builds the same value by keyword.
    `runtime` and `precision` have no flag of their own: `--openvino` is runtime openvino."""

    out: Path | None = option(None, "--out", parse=Path,
                              help="the .onnx file (default: beside the snapshot)")
    opset: int = option(DEFAULT_OPSET, "--opset", parse=int,
                        help=f"ONNX opset, {OPSETS.start} to {OPSETS.stop - 1} (default "
                             f"{DEFAULT_OPSET})")
    raw_weights: bool = option(False, "--raw-weights",
                               help="export the trained weights, not their average "
                                    "(system.ema_decay)")
    image: Path | None = option(None, "--image", parse=Path,
                                help="the image of the check (default: the validation split's "
                                     "first)")
    max_map: int = option(DEFAULT_MAX_MAP, "--max-map", parse=int,
                          help="largest output-map side the graph is exact for (corner pooling "
                               "steps); inputs up to about 4x (Squeeze 8x) this")
    openvino: bool = option(False, "--openvino",
                            help="also write the checked graph as an OpenVINO IR beside it "
                                 "(<name>.xml and .bin, float32, same metadata; the openvino "
                                 "extra)")
    runtime: str | None = None  # the runtime of exported files it is for (default onnxruntime)
    precision: str | None = None  # that runtime's precision (default its first)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("out", "image"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value))
        check_export(self.opset, self.max_map)
        if self.openvino and self.runtime not in (None, "openvino"):
            raise UsageError(f"--openvino writes the files of runtime openvino, not "
                             f"{self.runtime}: name one of them")

    @property
    def target(self) -> str | None:
        """The runtime the files are for: openvino with --openvino, else `runtime`."""
        return "openvino" if self.openvino else self.runtime


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> ExportOptions:
    return parse(ExportOptions, argv, prog or PROG, DESCRIPTION)


def present(report: ExportReport, log: Callable[[str], None] = print) -> None:
    """The export's report, line by line."""
    for line in report.lines():
        log(line)


@keeps_process
def run(options: ExportOptions, log: Callable[[str], None] = print) -> ExportReport:
    """Export the snapshot the options name and print the report; returns it."""
    from core.deploy.exporter import ExportCheckFailed, export_snapshot
    from core.nnet.checkpoint import default_snapshot, snapshot_label

    system_config, db_config = load_config(options.cfg_file, options.config_dir,
                                           overrides=options.overrides)
    testiter = snapshot_label(system_config, default_snapshot(system_config, log)
                              if options.testiter is None else options.testiter)
    try:
        report = export_snapshot(system_config, db_config, testiter, options.out,
                                 runtime=options.target, precision=options.precision,
                                 opset=options.opset, max_map=options.max_map,
                                 raw_weights=options.raw_weights, image=options.image)
    except ExportCheckFailed as failed:  # what was measured, then the error
        present(failed.report, log)
        raise
    present(report, log)
    return report


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), argv=argv)


if __name__ == "__main__":
    sys.exit(main())
