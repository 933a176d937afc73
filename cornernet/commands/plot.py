"""Plot a run's curves from its metrics file.

    cornernet plot <Cfg | path/to/metrics.jsonl> [--out PNG] [--cache-dir DIR]

Reads cache/nnet/<Cfg>/metrics.jsonl (one JSON object a line, written by train.py) and writes
a PNG, by default metrics.png beside it, with a panel for each of: the loss terms and the total
loss (and the validation loss) against iteration, the learning rate, and the validation AP,
AP50 and AP75 (once an evaluation has run). It can run while training goes on: a last line still
being written is left out, and the PNG is written under another name and renamed, so a viewer
never shows half an image.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path

from core.config import load_config
from core.config.options import DebugOptions
from core.engine.curves import AP_KEYS, Curves, MetricsError, plot, select_curves, spans_decades  # noqa: F401 - the tests' names
from core.engine.exits import exit_status
from core.engine.metrics import read_lines
from core.engine.process import keeps_process
from core.errors import UsageError
from core.utils.options import option

from ..options import parse


def read_metrics(path: Path) -> list[dict]:
    """The records of a metrics.jsonl file, in file order, read as the trainer reads them: a
    damaged line is left out and named once on stderr."""
    if not path.is_file():
        raise MetricsError(f"no metrics file at {path}: train with this config first, or "
                           f"name the file (or --cache-dir) the run wrote to")
    try:
        return read_lines(path, lambda text: print(f"note: {text}", file=sys.stderr))
    except OSError as err:
        raise MetricsError(f"cannot read {path}: {err.strerror}") from None


def metrics_path(target: str, cache_dir: str | None) -> Path:
    """The metrics file named by `target`: a path to it, or a config name whose run wrote it
    to <cache_dir>/nnet/<snapshot_name>/metrics.jsonl."""
    if target.endswith(".jsonl") or os.sep in target or Path(target).is_file():
        if cache_dir is not None:
            raise MetricsError("--cache-dir goes with a config name, not with a metrics file")
        return Path(target)
    system_config, _ = load_config(target)
    if cache_dir is not None:
        system_config = system_config.replace(cache_dir=str(Path(cache_dir).resolve()))
    return system_config.snapshot_dir / "metrics.jsonl"


PROG = "cornernet plot"
DESCRIPTION = "Plot the loss terms, learning rate and validation AP of a run against iteration"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlotOptions(DebugOptions):
    """What `cornernet plot` takes."""

    target: str = option(help="config name (reads cache/nnet/<Cfg>/metrics.jsonl) or the path "
                              "of a metrics.jsonl file")
    out: Path | None = option(None, "--out", parse=Path,
                              help="PNG to write (default: metrics.png beside the metrics file)")
    cache_dir: str | None = option(None, "--cache-dir",
                                   help="the run's system.cache_dir, if not the config's")


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> PlotOptions:
    return parse(PlotOptions, argv, prog or PROG, DESCRIPTION)


@keeps_process
def run(options: PlotOptions, log: Callable[[str], None] = print) -> Path:
    """Draw the curves; returns the PNG written."""
    try:
        import matplotlib  # noqa: F401 - only to say how to get it
    except ImportError:
        raise UsageError("plotting needs matplotlib, a dependency this environment lacks: "
                         "pip install matplotlib") from None
    path = metrics_path(options.target, options.cache_dir)
    curves = select_curves(read_metrics(path), path,
                           lambda line: print(line, file=sys.stderr))
    out = options.out or path.with_name("metrics.png")
    plot(curves, out, f"{path.parent.name}: iteration {curves.last_iteration}")
    log(f"wrote {out}")
    return out


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), argv=argv)


if __name__ == "__main__":
    sys.exit(main())
