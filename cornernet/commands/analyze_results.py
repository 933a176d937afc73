"""What limits a snapshot's AP: the COCO error breakdown and a confusion matrix.

    cornernet analyze results <Cfg> [--testiter N|best] [--split S] [--suffix X]
                                    [--score-thresh T] [--iou-thresh U] [--set K=V ...]

Reads the results folder that `test.py <Cfg>` (or the evaluation during training) wrote,
results/<Cfg>/<iter>/<split>[/<suffix>]/, and writes into it:

- breakdown.json and a printed table: per category and overall, the AP as errors are forgiven
  one kind after another (C75, C50, Loc, Sim, Oth, BG, FN; see core/inference/error_analysis.py);
- a label control: the overall AP50 again against the same boxes with their category ids
  shuffled (each category moved to another; `shuffled_labels` in breakdown.json): a model that
  learnt the labels loses it, an AP reached without them stays;
- confusion.png (matplotlib, the `plot` extra) and confusion.json: true category against
  detected category for detections above --score-thresh at IoU --iou-thresh, with a background
  row (detections on nothing) and a "missed" column (objects nobody found).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from core.config import DEFAULT_SNAPSHOT, SystemConfig, load_config, lookup, snapshot_arg
from core.config.options import ConfigOptions, DebugOptions
from core.config.rules import unit_interval
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError
from core.utils import hints
from core.utils.files import write_file_atomic
from core.utils.options import option

from ..options import parse

SPLITS = {"training": "train_split", "validation": "val_split", "testing": "test_split"}


PROG = "cornernet analyze results"


DESCRIPTION = "Error breakdown and confusion matrix of a test.py results folder"


@dataclasses.dataclass(frozen=True, kw_only=True)
class AnalyzeResultsOptions(ConfigOptions, DebugOptions):
    """What `cornernet analyze results` takes. Its --testiter names a results folder, which
    test.py names by iteration or 'best' (never by a snapshot file)."""

    testiter: int | str | None = option(
        None, "--testiter", parse=snapshot_arg,
        help=f"snapshot iteration or 'best', as given to test.py ({DEFAULT_SNAPSHOT})")
    split: str = option("validation", "--split", choices=list(SPLITS))
    suffix: str | None = option(None, "--suffix", help="as given to test.py")
    score_thresh: float = option(0.3, "--score-thresh", parse=unit_interval,
                                 help="detections counted in the confusion matrix score above "
                                      "this")
    iou_thresh: float = option(0.5, "--iou-thresh", parse=unit_interval,
                               help="IoU at which a detection is on an object in the confusion "
                                    "matrix")


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> AnalyzeResultsOptions:
    return parse(AnalyzeResultsOptions, argv, prog or PROG, DESCRIPTION)


def plot_confusion(matrix: np.ndarray, names: list[str], out: Path, title: str) -> None:
    """Rows (true) normalised to 1, coloured; the categories that occur in neither the objects
    nor the detections are left out so that 80 classes stay readable."""
    from matplotlib import pyplot
    used = np.flatnonzero(matrix.sum(axis=0) + matrix.sum(axis=1))
    shown = matrix[np.ix_(used, used)]
    labels = [names[i] for i in used]
    rates = shown / np.maximum(shown.sum(axis=1, keepdims=True), 1)
    side = max(4.0, 0.28 * len(used) + 2.5)
    figure, axis = pyplot.subplots(figsize=(side, side), dpi=100)
    try:
        image = axis.imshow(rates, cmap="Blues", vmin=0, vmax=1)
        axis.set_xticks(range(len(used)), labels, rotation=90, fontsize="small")
        axis.set_yticks(range(len(used)), labels, fontsize="small")
        axis.set_xlabel("detected as")
        axis.set_ylabel("true category")
        axis.set_title(title, fontsize="small")
        if len(used) <= 25:
            for (row, col), count in np.ndenumerate(shown):
                if count:
                    axis.text(col, row, str(count), ha="center", va="center", fontsize="x-small",
                              color="white" if rates[row, col] > 0.5 else "black")
        figure.colorbar(image, ax=axis, fraction=0.046, label="share of the row")
        figure.tight_layout()
        write_file_atomic(out, lambda file: figure.savefig(file, format="png"))
    finally:
        pyplot.close(figure)


def missing_results(path: Path, options: AnalyzeResultsOptions, system_config: SystemConfig,
                    testiter: int | str) -> str:
    """The line for a results folder without `path`: the test command that writes it (with this
    --split and --suffix), and which splits and suffixes of this snapshot were evaluated."""
    command = hints.command("test", f"{options.cfg_file} --testiter {testiter} --split "
                            f"{options.split}"
                            + (f" --suffix {options.suffix}" if options.suffix else ""))
    roles = {getattr(system_config, key): role for role, key in reversed(SPLITS.items())}
    root, done = system_config.result_dir / str(testiter), []
    for found in sorted(root.rglob("metrics.json")) if root.is_dir() else []:
        split, *suffix = found.parent.relative_to(root).parts
        done.append(f"--split {roles.get(split, split)}"
                    + (f" --suffix {'/'.join(suffix)}" if suffix else ""))
    return (f"{path} does not exist: run {command} first"
            + (f" (this snapshot's results that exist: {', '.join(done)})" if done else ""))


def unscored(results_file: Path, split: str, has_boxes: bool, detections: int) -> str:
    """The line for a results folder where test wrote `detections` detections but no metrics:
    the split has no boxes to score against, or test ran with --backend none."""
    if not has_boxes:
        return (f"split '{split}' has no boxes (an image-info file): test wrote its "
                f"{detections} detections to {results_file} for an evaluation server, and "
                "there is nothing here to analyze them against")
    return (f"{results_file.parent} holds test's {detections} detections but no metrics.json: "
            "test ran with --backend none; run it again with a COCO backend to score them")


@keeps_process
def run(options: AnalyzeResultsOptions, log: Callable[[str], None] = print) -> dict:
    # core.inference (torch) and the datasets are imported here, not for --help.
    from core.dbs import datasets
    from core.inference.error_analysis import (
        breakdown,
        confusion_matrix,
        format_breakdown,
        read_json,
        read_run,
        shuffled_truth,
    )
    from core.inference.folders import results_folder
    from core.nnet.checkpoint import default_snapshot

    try:
        import matplotlib  # noqa: F401 - checked before the work
    except ImportError:
        raise UsageError("the confusion-matrix picture needs matplotlib, a dependency this "
                         "environment lacks: pip install matplotlib") from None
    system_config, db_config = load_config(options.cfg_file, options.config_dir,
                                           overrides=options.overrides)
    testiter = (default_snapshot(system_config, log) if options.testiter is None
                else options.testiter)
    split = getattr(system_config, SPLITS[options.split])
    folder = results_folder(system_config, testiter, split, options.suffix or None)
    summary_file, results_file = folder / "metrics.json", folder / "results.json"
    if results_file.is_file() and not summary_file.is_file():  # test ran and scored nothing
        db = lookup(datasets, system_config.dataset, "dataset")(db_config, split=split,
                                                                sys_config=system_config)
        raise UsageError(unscored(results_file, split, db.has_annotations,
                                  len(read_json(results_file, "the results file"))))
    for path in (summary_file, results_file):
        if not path.is_file():
            raise UsageError(missing_results(path, options, system_config, testiter))
    summary = read_json(summary_file, "the metrics file")
    if not (isinstance(summary, dict) and isinstance(summary.get("num_images"), int)
            and isinstance(summary.get("annotation_file"), str)):
        raise UsageError(f"{summary_file} lacks num_images or annotation_file (written by "
                         f"another version?); run "
                         f"{hints.command('test', f'{options.cfg_file} --testiter {testiter}')}"
                         " again")
    db = lookup(datasets, system_config.dataset, "dataset")(db_config, split=split,
                                                            sys_config=system_config)
    image_ids = [db.image_id(ind) for ind in db.db_inds[:summary["num_images"]]]
    truth, found, categories = read_run(Path(summary["annotation_file"]), results_file,
                                        image_ids)
    analysis = breakdown(truth, found, categories)
    log(format_breakdown(analysis))
    if len({int(c) for g in truth.values() for c in g.category}) > 1:
        shuffled = breakdown(shuffled_truth(truth, seed=0), found, categories)["overall"]
        analysis["shuffled_labels"] = shuffled
        log(f"label control: AP50 {analysis['overall']['C50']:.4f} against the annotations, "
            f"{shuffled['C50']:.4f} against the same boxes with their category ids shuffled "
            f"(every category moved to another)")
    (folder / "breakdown.json").write_text(json.dumps(analysis, indent=1))
    ids = [c["id"] for c in categories]
    matrix = confusion_matrix(truth, found, ids, options.score_thresh, options.iou_thresh)
    names = [c["name"] for c in categories]
    (folder / "confusion.json").write_text(json.dumps({
        "rows": [*names, "background"], "columns": [*names, "missed"],
        "score_thresh": options.score_thresh, "iou_thresh": options.iou_thresh,
        "counts": matrix.tolist()}))
    plot_confusion(matrix, [*names, "background / missed"], folder / "confusion.png",
                   f"{options.cfg_file} {testiter} {split}: score > {options.score_thresh}, "
                   f"IoU >= {options.iou_thresh}")
    log(f"wrote {folder / 'breakdown.json'}, {folder / 'confusion.json'} and "
        f"{folder / 'confusion.png'}")
    return analysis


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), argv=argv)


if __name__ == "__main__":
    sys.exit(main())
