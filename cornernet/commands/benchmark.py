"""Every runtime and precision of one snapshot in one table: AP, AP50, ms per image, size, check.

    cornernet benchmark <Cfg> [--testiter N|best] [--images N] [--threads 1 2]
                              [--device cpu|cuda] [--batch 1 8] [--rows RUNTIME:PRECISION ...]
                              [--calib-images N] [--calib-split SPLIT] [--keep-float heads|none]
                              [--reps 3] [--json PATH] [--min-ap AP]

Rows on a CPU: torch fp32 and bf16 (autocast), onnxruntime fp32 and int8, OpenVINO f32, default
(the CPU plugin's choice: bf16 where the CPU has bf16 units) and int8; on a GPU (--device, the
default where there is one): torch fp32, bf16 and compile (torch.compile, float32), which a CPU
runs too when named in --rows. Each runtime of the registry (core/deploy/runtimes.py) declares
its rows, its default rows per device and which of its precisions are exact, so a runtime
registered from outside has rows too. The .onnx file is exported (`cornernet export`, which
checks it against torch) when missing or stale, the INT8 files are made from it (core/deploy/
quantize.py, calibrated on --calib-images training images) when missing. Every row then:

- check: its detections on the first validation image against torch fp32's: "passed" when an
  exact precision (fp32, f32, compile) is within the parity tolerance (shared/reference/
  README.md section 6) or a reduced one (bf16, default, int8) has AP within 0.01 of torch
  fp32's; "failed: why" otherwise; "not available: why" when its package, file, compiler or GPU
  is missing. A failing row is a row: the others still run.
- AP, AP50: the COCO metrics on the first --images validation images (default all), as the
  test command computes them;
- ms: median ms per image over --reps runs (after a warm-up) of the first validation image as
  the test command feeds it, repeated --batch times: on a CPU at each --threads count (default 1
  and all cores; columns "1", "2", and "1/b8" for batch 8), on a GPU at each batch (columns "b1",
  "b8", the GPU synchronised before and after each run);
- size_mb: the file the runtime reads (the evaluated weights for torch).

The CPU model and its instruction sets come first, then the device. --json writes the rows;
--min-ap makes the exit status 1 when a row's AP is below it (a row that is not available
counts only when named in --rows).

The measurement and the verdicts are core's (core/deploy/comparison.py, `compare_runtimes`, and
core/deploy/measure.py): this command reads its options (`BenchmarkOptions`), runs it, prints
the report's table and writes its rows; `cornernet.benchmark` builds the same options by
keyword.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import load_config
from core.config.options import ConfigOptions, DebugOptions, DeviceOptions, SnapshotOptions
from core.deploy.defaults import DEFAULT_IMAGES, KEEP_FLOAT
from core.deploy.runtimes import all_rows, default_rows
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError
from core.utils.options import MISSING, option
from core.utils.threads import usable_cpus
from cornernet.options import parse

# torch, cv2, the datasets and the measurement are imported by the functions that use them, so
# that --help imports none of them (cornernet/commands/__init__.py).

PROG = "cornernet benchmark"


def _rows_help() -> str:
    return (f"the rows to measure, of {' '.join(all_rows())} (default on a CPU: "
            f"{' '.join(default_rows('cpu'))}; on a GPU: {' '.join(default_rows('cuda'))}); "
            "torch:compile is torch.compile (inductor) of the model, float32")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchmarkOptions(ConfigOptions, SnapshotOptions, DeviceOptions, DebugOptions):
    """`cornernet benchmark`'s options; `cornernet.benchmark` builds the same value by keyword.
    --debug also shows each failing row's traceback."""

    debug: bool = option(False, "--debug",
                         help="show tracebacks of errors, also of each failing row's")

    images: int | None = option(None, "--images", parse=int,
                                help="evaluate the first N validation images (default: all)")
    threads: tuple[int, ...] = option(MISSING, "--threads", parse=int, nargs="+",
                                      factory=lambda: (1, usable_cpus()),
                                      help="thread counts to time (default: 1 and the CPUs "
                                           "this process may use)")
    rows: tuple[str, ...] | None = option(None, "--rows", nargs="+", choices=all_rows,
                                          metavar="ROW", help=_rows_help)
    batch: tuple[int, ...] | None = option(None, "--batch", parse=int, nargs="+",
                                           help="time ms per image at these batch sizes "
                                                "(default: 1 and 8 on a GPU, 1 on a CPU)")
    calib_images: int = option(DEFAULT_IMAGES, "--calib-images", parse=int,
                               help="training images the INT8 files are calibrated on (default "
                                    f"{DEFAULT_IMAGES})")
    calib_split: str | None = option(None, "--calib-split",
                                     help="the split to calibrate on (default: "
                                          "system.train_split)")
    keep_float: str = option("heads", "--keep-float", choices=KEEP_FLOAT,
                             help="INT8: keep the heads' last convolutions in float (default)")
    reps: int = option(3, "--reps", parse=int, help="timed runs per row (median)")
    time_size: int | None = option(None, "--time-size", parse=int, metavar="N",
                                   help="time on the first validation image resized to N x N "
                                        "(default: as the test command feeds it at the "
                                        "first test scale)")
    json: Path | None = option(None, "--json", parse=Path, help="write the rows here")
    min_ap: float | None = option(None, "--min-ap", parse=float,
                                  help="exit 1 when a row's AP is below this")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("threads", "rows", "batch"):  # the API may give lists
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        if self.json is not None:
            object.__setattr__(self, "json", Path(self.json))
        for name in ("images", "calib_images", "reps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if not self.threads or min(self.threads) < 1:
            raise UsageError("--threads must be at least 1")
        if self.batch is not None and (not self.batch or min(self.batch) < 1):
            raise UsageError("--batch must be at least 1")
        odd = [row for row in self.rows or () if row not in all_rows()]
        if odd:
            raise UsageError(f"--rows {odd[0]}: not a row; choose from {' '.join(all_rows())}")
        if self.keep_float not in KEEP_FLOAT:
            raise UsageError(f"--keep-float {self.keep_float}: choose {' or '.join(KEEP_FLOAT)}")


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> BenchmarkOptions:
    return parse(BenchmarkOptions, argv, prog or PROG, __doc__.splitlines()[0])


@keeps_process
def run(options: BenchmarkOptions, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """The benchmark; prints its progress and table, returns its rows (runtime, precision, AP,
    AP50, ms, size_mb, check)."""
    from core.deploy.comparison import compare_runtimes

    def say(line: str) -> None:  # said now, so that a run cut short keeps what it measured
        log(line)
        sys.stdout.flush()

    def trace(text: str) -> None:  # --debug: where a failing row's one line came from
        print(text, end="", file=sys.stderr, flush=True)

    system_config, db_config = load_config(options.cfg_file, options.config_dir,
                                           overrides=options.overrides)
    report = compare_runtimes(
        system_config, db_config, options.testiter, rows=options.rows and list(options.rows),
        device=options.device, threads=list(options.threads),
        batch=options.batch and list(options.batch), images=options.images, reps=options.reps,
        time_size=options.time_size, calib_images=options.calib_images,
        calib_split=options.calib_split, keep_float=options.keep_float, log=say,
        trace=trace if options.debug else None)
    log(report.table())
    log(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if options.json is not None:
        options.json.write_text(json.dumps(list(report.rows), indent=1))
        log(f"wrote {options.json}")
    return list(report.rows)


def below_min_ap(options: BenchmarkOptions, rows: list[dict[str, Any]]) -> int:
    """1 (said on stderr) when a row's AP is below --min-ap, else 0."""
    from core.deploy.comparison import below_min_ap as below

    if options.min_ap is not None:
        low = below(rows, options.min_ap, named=options.rows is not None)
        if low:
            print(f"AP below --min-ap {options.min_ap} (or not measured): {', '.join(low)}",
                  file=sys.stderr)
            return 1
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table, 1 when --min-ap is not met."""
    done: dict[str, Any] = {}

    def work() -> None:
        done["options"] = parse_args(argv, prog)
        done["rows"] = run(done["options"])

    status = exit_status(work, argv=argv)
    if status or "rows" not in done:  # a failure, or --help
        return status
    return below_min_ap(done["options"], done["rows"])


if __name__ == "__main__":
    sys.exit(main())
