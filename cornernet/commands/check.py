"""Look at a config's data before training: counts, problems, and what the network is shown.

    cornernet check <Cfg> [--splits train val] [--out DIR] [--batch-images 4]
                          [--data PATH [--name NAME] [--no-fit]] [--set KEY=VALUE ...]

For each split (by default the config's train_split and val_split) it prints and writes to
<out>/report.json (default <result_dir>/<Cfg>/check/): images, objects, objects per class and
the classes missing, objects per image, box sizes (COCO small/medium/large by box area) and
aspect ratios, boxes the loader clipped or dropped and why, unreadable images, images without
labels, duplicate images (by content), the share of objects the training crops cut off
(sampled), and for the training split the settings that fit its image and box sizes as a
`--set` line with the crop loss before and after; across splits: classes found in one split
only and images found in two. It draws
<out>/train_batch0.jpg: augmented training images exactly as the sampler builds them with their
boxes and, beside each, the rendered top-left and bottom-right heatmaps (all classes, max) with
the offset arrows (and the attention maps for Saccade); and <out>/labels.png (class histogram,
box centres, box sizes).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from core.config import load_config, lookup
from core.config.options import ConfigOptions, DataOptions, DebugOptions
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError
from core.utils.options import option

from ..options import parse

PROG = "cornernet check"


DESCRIPTION = "Check a config's data before training"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckOptions(DataOptions, ConfigOptions, DebugOptions):
    """What `cornernet check` takes. --data, --name and --no-fit are train's (`DataOptions`,
    declared once): the config as `cornernet train --data` resolves it, not written."""

    splits: tuple[str, ...] | None = option(
        None, "--splits", nargs="+",
        help="split keys (default: the config's train_split and val_split)")
    out: Path | None = option(None, "--out", parse=Path,
                              help="the folder for report.json and the pictures")
    batch_images: int = option(4, "--batch-images", parse=int)
    crop_samples: int = option(64, "--crop-samples", parse=int,
                               help="training images that get one augmented view each to "
                                    "measure the crop cut-offs")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.data is None and (self.name is not None or self.no_fit):
            raise UsageError("--name and --no-fit go with --data PATH")


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> CheckOptions:
    return parse(CheckOptions, argv, prog or PROG, DESCRIPTION)


def draw_labels(path: Path, reports: dict, points: dict) -> str:
    """labels.png: objects per class by split, box centres and box sizes (normalised)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "labels.png skipped: it needs matplotlib (pip install matplotlib)"
    figure, axes = plt.subplots(1, 3, figsize=(18, 5))
    first = next(iter(reports.values()))
    names = list(first["objects_per_class"])
    width = 0.8 / len(reports)
    for k, (split, report) in enumerate(reports.items()):
        axes[0].bar(np.arange(len(names)) + k * width, list(report["objects_per_class"].values()),
                    width, label=split)
    axes[0].set_xticks(np.arange(len(names)), names, rotation=90, fontsize=6)
    axes[0].set_title("objects per class")
    axes[0].legend()
    for split, xy in points.items():
        axes[1].scatter(xy[:, 0], xy[:, 1], s=2, alpha=0.4, label=split)
        axes[2].scatter(xy[:, 2], xy[:, 3], s=2, alpha=0.4, label=split)
    axes[1].set(title="box centres", xlabel="x / width", ylabel="y / height", xlim=(0, 1),
                ylim=(1, 0))
    axes[2].set(title="box sizes", xlabel="width / image width",
                ylabel="height / image height", xlim=(0, 1), ylim=(0, 1))
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return f"wrote {path}"


def summary(split: str, report: dict) -> str:
    from core.data.check import class_lines, conflict_lines

    crops = report["training_crops"]
    lines = [
        (f"{split}: {report['images']} images, {report['objects']} objects "
        f"({report['crowd_regions']} crowd/difficult regions), objects per image "
        f"{report['objects_per_image']['min']}-{report['objects_per_image']['max']} "
        f"(mean {report['objects_per_image']['mean']:.1f})"),
        (f"  images without labels {report['images_without_labels']['count']}, unreadable "
        f"{report['unreadable_images']['count']}, duplicate groups "
        f"{report['duplicate_images']['groups']}, over max_objects "
        f"{report['over_max_objects']['images']}"),
        "  sizes " + ", ".join(f"{k} {v}" for k, v in report["box_sizes"].items()) +
        "; aspect w:h " + ", ".join(f"{k} {v}" for k, v in report["aspect_ratios"].items()),
        f"  classes missing: {len(report['classes_missing'])}"
        + (f" ({', '.join(report['classes_missing'][:8])}"
           f"{', ...' if len(report['classes_missing']) > 8 else ''})"
           if report["classes_missing"] else ""),
        f"  training crops ({crops['sampled_objects']} objects of {crops['sampled_images']} "
        f"images): removed {crops['removed']:.1%}, under half left {crops['mostly_cut']:.1%}, "
        f"partly cut {crops['partly_cut']:.1%} {crops['note']}".rstrip(),
    ]
    lines[1:1] = class_lines(report)
    lines += conflict_lines(report)
    lines += [f"  loader: {message}" for message in report["loader"]]
    return "\n".join(lines)


@keeps_process
def run(options: CheckOptions, log: Callable[[str], None] = print) -> dict:
    # The data, the sampler and torch are imported here, not for --help.
    from core.data.advice import advice_lines, settings_advice
    from core.data.check import across_splits, save_batch_picture, split_report, unnamed_images
    from core.dbs import datasets
    from core.sample import sampler

    if options.data is not None:  # the config as `train --data` would resolve it (not written)
        from core.data.from_data import data_config

        system_config, db_config, _ = data_config(
            options.cfg_file, options.data, options.name, options.overrides,
            fit=not options.no_fit, config_dir=options.config_dir, log=log, write=False)
    else:
        system_config, db_config = load_config(options.cfg_file, options.config_dir,
                                               overrides=options.overrides)
    dataset = lookup(datasets, system_config.dataset, "dataset")
    splits = options.splits or list(dict.fromkeys([system_config.train_split,
                                                system_config.val_split]))
    out = options.out or system_config.result_dir / "check"
    out.mkdir(parents=True, exist_ok=True)
    reports, hashes, points, dbs = {}, {}, {}, []
    for split in splits:
        db = dataset(db_config, split=split, sys_config=system_config)
        dbs.append(db)
        samples = options.crop_samples if split == system_config.train_split else 0
        reports[split], hashes[split], points[split] = split_report(
            db, system_config.sampling_function, samples, system_config.seed)
        log(summary(split, reports[split]))
        if split == system_config.train_split:
            reports[split]["settings"] = settings_advice(db, system_config.sampling_function,
                                                         options.crop_samples, system_config.seed)
            log("\n".join(advice_lines(reports[split]["settings"])))
    both = across_splits(reports, hashes)
    for key, names in both["classes_in_one_split_only"].items():
        log(f"classes of {key}: {', '.join(names)}")
    log(f"images found in two splits: {both['images_in_two_splits']['count']}")
    both["images_in_no_split"] = unnamed_images(dbs)
    if both["images_in_no_split"]["count"]:
        log(f"images in the splits' folders that no annotation names (in no split): "
            f"{both['images_in_no_split']['count']}, e.g. "
            f"{both['images_in_no_split']['examples'][0]}")
    report = {"config": options.cfg_file, "splits": reports, "across_splits": both}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    log(f"wrote {out / 'report.json'}")

    picture = out / "train_batch0.jpg"
    sample = sampler(system_config.sampling_function, system_config.strict_images)
    save_batch_picture(sample, dataset(db_config, split=system_config.train_split,
                                       sys_config=system_config), picture, options.batch_images)
    log(f"wrote {picture}: the crop with its boxes, then the top-left and bottom-right "
        f"heatmaps with offset arrows, one row per image")
    log(draw_labels(out / "labels.png", reports, points))
    return report


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), argv=argv)


if __name__ == "__main__":
    sys.exit(main())
