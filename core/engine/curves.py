"""The training curves of a run: loss terms, learning rate and validation AP against iteration.

Read from the records of metrics.jsonl (`read_lines`) and drawn on a matplotlib Figure without
pyplot (no GUI backend); tools/plot_metrics.py and the end-of-run report both draw it.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..utils import hints
from ..utils.files import write_file_atomic
from .metrics import read_lines

if TYPE_CHECKING:  # matplotlib is an extra, imported where a figure is drawn
    from matplotlib.axes import Axes

AP_KEYS = ("AP", "AP50", "AP75")
PANEL_INCHES = (9.0, 3.0)
DPI = 100
LOSS_STYLES = {"loss": {"color": "black", "linewidth": 2},
               "val_loss": {"linestyle": "--", "marker": "o"}}

Series = tuple[list[int], list[float]]  # iterations (ascending), values


class MetricsError(UsageError):
    """The metrics file cannot be plotted; the message names it and says why."""


@dataclass
class Curves:
    """What the figure shows: every series is (iterations, values)."""

    losses: dict[str, Series]
    lr: Series
    ap: dict[str, Series] = field(default_factory=dict)

    @property
    def last_iteration(self) -> int:
        return max(its[-1] for its, _ in self.losses.values() if its)


def select_curves(records: list[dict], where: Path, say: Callable[[str], None]) -> Curves:
    """The series to plot. A training line is one with a "loss"; its "terms" name its loss terms.
    A line whose "terms" is not a list of names is left out of the terms, in a note to `say`.

    Losses are "loss", then the terms in order of first appearance, then "val_loss" if
    any. When an iteration appears more than once the last value wins.
    """
    training = [r for r in records if _is_number(r.get("loss"))]
    if not training:
        raise MetricsError(f"{where} holds no training line yet (one with a \"loss\"); "
                           f"wait for the first display interval")
    names = ["loss"]
    for record in training:
        terms = record.get("terms", [])
        if not (isinstance(terms, list) and all(isinstance(term, str) for term in terms)):
            say(f"note: {where}: iteration {record['iteration']}: \"terms\" is {terms!r}, "
                f"not a list of names; its terms are left out")
            continue
        names += [term for term in terms if term not in names]
    names += ["val_loss"] if any("val_loss" in r for r in records) else []
    # COCO gives -1 for an AP it could not compute (no objects of that kind): not plotted.
    ap = {key: _series(records, key, minimum=0.0) for key in AP_KEYS}
    return Curves(losses={name: _series(records, name) for name in names},
                  lr=_series(records, "lr"), ap={key: s for key, s in ap.items() if s[0]})


def _series(records: list[dict], key: str, minimum: float = -math.inf) -> Series:
    points = {}
    for record in records:
        value = record.get(key)
        if _is_number(value) and value >= minimum:
            points[record["iteration"]] = float(value)
    iterations = sorted(points)
    return iterations, [points[i] for i in iterations]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def spans_decades(series: list[Series], decades: float) -> bool:
    """Whether every value is positive and they span at least `decades` powers of ten: then a
    log axis shows them better than a linear one."""
    values = [v for _, vs in series for v in vs if not math.isnan(v)]
    if not values or min(values) <= 0:
        return False
    return math.log10(max(values) / min(values)) >= decades


def plot(curves: Curves, out: Path, title: str) -> None:
    """Write the figure to `out` as a PNG of PANEL_INCHES * DPI pixels per panel, atomically.

    Panels, top to bottom: losses; learning rate (if logged); validation AP (if any).
    """
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, and a faster start

    panels = [_draw_losses] + ([_draw_lr] if curves.lr[0] else []) + (
        [_draw_ap] if curves.ap else [])
    width, height = PANEL_INCHES
    figure = Figure(dpi=DPI, figsize=(width, height * len(panels)))
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)
    for axis, draw in zip(axes[:, 0], panels):
        draw(axis, curves)
        axis.grid(True, alpha=0.3)
    axes[0, 0].set_title(title)
    axes[-1, 0].set_xlabel("iteration")
    figure.tight_layout()
    write_file_atomic(out, lambda file: figure.savefig(file, format="png"))


def _draw_losses(axis: Axes, curves: Curves) -> None:
    for name, (its, values) in curves.losses.items():
        axis.plot(its, values, label=name, **LOSS_STYLES.get(name, {}))
    if spans_decades(list(curves.losses.values()), 2):
        axis.set_yscale("log")
    axis.set_ylabel("loss")
    axis.legend(loc="best", fontsize="small")


def _draw_lr(axis: Axes, curves: Curves) -> None:
    axis.plot(*curves.lr, drawstyle="steps-post")
    if spans_decades([curves.lr], 1):
        axis.set_yscale("log")
    axis.set_ylabel("learning rate")


def _draw_ap(axis: Axes, curves: Curves) -> None:
    for name, (its, values) in curves.ap.items():
        axis.plot(its, values, label=name, marker="o")
    axis.set_ylim(bottom=0)
    axis.set_ylabel("validation AP")
    axis.legend(loc="best", fontsize="small")




# matplotlib is a dependency: this is said only where an environment lost it
NO_MATPLOTLIB = ("the run report needs matplotlib, a dependency this environment lacks: pip "
                 "install matplotlib (metrics.jsonl holds every value; {plot} draws it later)")
EVALUATION_PICTURES = ("pr_curves.png", "per_class_ap.png", "confusion_matrix.png")


def write_run_report(folder: Path, evaluated: Path | None, log: Callable[[str], None]
                     ) -> list[Path]:
    """The report of a run in its snapshot `folder`: metrics.png (the curves of metrics.jsonl)
    and a copy of the last evaluation's pictures (from its results folder `evaluated`).
    Without matplotlib, one line; returns the pictures written."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log(NO_MATPLOTLIB.format(plot=hints.command("plot")))
        return []
    written: list[Path] = []
    try:
        records = read_lines(folder / "metrics.jsonl")
        if any(_is_number(r.get("loss")) for r in records):
            curves = select_curves(records, folder / "metrics.jsonl", log)
            plot(curves, folder / "metrics.png",
                 f"{folder.name}: iteration {curves.last_iteration}")
            written.append(folder / "metrics.png")
        for name in EVALUATION_PICTURES:
            if evaluated is not None and (evaluated / name).is_file():
                shutil.copyfile(evaluated / name, folder / name)
                written.append(folder / name)
    except Exception as err:  # noqa: BLE001 - a picture must not turn a run into a failure
        log(f"warning: the run report stopped ({type(err).__name__}: {err})")
    if written:
        log(f"wrote the run report to {folder}: {', '.join(p.name for p in written)}")
    return written
