"""`cornernet test` (test.py): evaluate a snapshot.

    cornernet test <Cfg> [--testiter N|best|FILE] [--split S] [--suffix X] [--vis N]

Runs the inference of `system.sampling_function` on every image of the split, writes
results/<Cfg>/<iter>/<split>[/<suffix>]/results.json and, where the split has boxes, the 12 COCO
metrics to metrics.json in the same folder. Detections are journalled as they are made: an
interrupted run continues where it stopped when run again with the same settings.

The command resolves its options (`TestOptions`, which `cornernet.evaluate` builds too) into a
config, a dataset and a results folder; the evaluation itself (the folder's check and lock, the
journal, detection, scoring) is core's `evaluate_split`, whose report the command prints.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import ConfigError, SystemConfig, config_path, load_config, lookup
from core.config.options import ConfigOptions, DebugOptions, DeviceOptions, SnapshotOptions
from core.config.overrides import snapshot_or_file_arg
from core.config.rules import unit_interval
from core.deploy.options import RuntimeOptions
from core.deploy.runtimes import open_network, runtime
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError
from core.inference.coco_eval import BACKENDS
from core.inference.evaluate import EvaluationReport, evaluate_split
from core.inference.folders import results_folder
from core.utils.options import option
from cornernet.options import parse

# torch, the datasets and the test loop are imported by the functions that use them, so that
# --help imports none of them (cornernet/commands/__init__.py).

# --split: the config's roles, and COCO's test-dev as users download it.
SPLITS = ("training", "validation", "testing", "testdev")
# Official test-dev files: image-info json and the test2017 images, and the results name the
# COCO server takes.
TESTDEV_INFO = "image_info_test-dev2017.json"
TESTDEV_IMAGES = ("testdev2017", "test2017")
TESTDEV_RESULTS = "detections_test-dev2017_{}_results.json"

PROG = "cornernet test"
DESCRIPTION = "Evaluate a CornerNet-Lite snapshot"
Log = Callable[[str], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TestOptions(RuntimeOptions, DebugOptions, DeviceOptions, SnapshotOptions, ConfigOptions):
    """What `cornernet test` and `cornernet.evaluate` evaluate, and how. `--debug` reads as
    `image_limit` and `vis_limit` say; the fields stay as given."""

    __test__ = False  # a value, not a pytest test class

    split: str = option("validation", "--split", choices=SPLITS,
                        help="a split of the config (training, validation, testing) or COCO's "
                             "testdev (image_info_test-dev2017.json accepted as it comes)")
    suffix: str | None = option(None, "--suffix",
                                help="test-time settings from configs/<Cfg>-<suffix>.json (or "
                                     "the config named <suffix>), e.g. multi_scale; the "
                                     "snapshots stay <Cfg>'s")
    images: int | None = option(None, "--images", parse=int, help="evaluate the first N images")
    vis: int = option(0, "--vis", parse=int, metavar="N",
                      help="draw the detections and ground truth of the first N images")
    vis_thresh: float = option(0.3, "--vis-thresh", parse=unit_interval,
                               help="draw detections scoring above this")
    batch: int | None = option(None, "--batch", parse=int,
                               help="images per network call, those of one canvas bucket in "
                                    "one forward (default: system.test_batch_size or 1)")
    sync_timing: bool = option(False, "--sync-timing",
                               help="on a GPU, time the network and the decoding apart (waits "
                                    "for the GPU after every batch; without it the decoding's "
                                    "time is the network's)")
    resume: bool = option(True, "--resume", negatable=True,
                          help="continue an interrupted run of the same settings (default)")
    debug: bool = option(False, "--debug",
                         help="the first --debug-images images with pictures, and tracebacks")
    debug_images: int = option(20, "--debug-images", parse=int)
    backend: str = option("faster", "--backend", choices=(*BACKENDS, "none"),
                          help="COCO evaluator (pycocotools is the reference); none: write the "
                               "detections without scoring them")
    raw_weights: bool = option(False, "--raw-weights",
                               help="evaluate the trained weights, not their average "
                                    "(system.ema_decay)")
    data: Path | None = option(None, "--data", parse=Path, metavar="PATH",
                               help="evaluate on this export's split (a data.yaml, a COCO json "
                                    "or a folder, as `train --data` takes it) with the run's "
                                    "classes; results under <iter>/<split>/data-<folder>")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("images", "batch", "debug_images"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if self.vis < 0:
            raise UsageError(f"--vis must be 0 or more, got {self.vis}")
        if self.data is not None:
            object.__setattr__(self, "data", Path(self.data))
        if isinstance(self.testiter, str):  # the API's "12", "best" or "<Cfg>_12.pkl"
            try:
                object.__setattr__(self, "testiter", snapshot_or_file_arg(self.testiter))
            except ValueError as err:
                raise UsageError(f"--testiter {self.testiter}: {err}") from None

    @property
    def image_limit(self) -> int | None:
        """The images evaluated, the first N of the split (None: all): --debug-images with
        --debug."""
        return self.debug_images if self.debug else self.images

    @property
    def vis_limit(self) -> int:
        """The images drawn: --vis, at least --debug-images with --debug."""
        return max(self.vis, self.debug_images) if self.debug else self.vis


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> TestOptions:
    """The command line read into `TestOptions` (a usage error exits 2)."""
    return parse(TestOptions, argv, prog or PROG, DESCRIPTION)


def settings_name(options: TestOptions) -> str:
    """The config file to read: <Cfg>, <Cfg>-<suffix>, or the config named <suffix>."""
    if options.suffix is None:
        return options.cfg_file
    for name in (f"{options.cfg_file}-{options.suffix}", options.suffix):
        try:
            config_path(name, options.config_dir)
            return name
        except ConfigError:
            continue
    raise UsageError(f"--suffix {options.suffix}: neither {options.cfg_file}-{options.suffix}"
                     f".json nor {options.suffix}.json is in {options.config_dir}")


def split_key(options: TestOptions, system_config: SystemConfig) -> str:
    return {"training": system_config.train_split, "validation": system_config.val_split,
            "testing": system_config.test_split, "testdev": "testdev"}[options.split]


def official_testdev(system_config: SystemConfig, db_config: dict) -> dict:
    """Point COCO's default layout at the official test-dev files when the renamed ones
    (instances_testdev2017.json, images/testdev2017) are not there."""
    if db_config.get("image_dirs") is not None or db_config.get("annotation_files") is not None:
        return db_config
    coco_dir = system_config.data_dir / "coco"
    if (coco_dir / "annotations" / "instances_testdev2017.json").is_file():
        return db_config
    images = next((coco_dir / "images" / name for name in TESTDEV_IMAGES
                   if (coco_dir / "images" / name).is_dir()), coco_dir / "images" / "test2017")
    return {**db_config, "image_dirs": {"testdev": str(images)},
            "annotation_files": {"testdev": str(coco_dir / "annotations" / TESTDEV_INFO)}}


def on_data(options: TestOptions, system_config: SystemConfig, db_config: dict,
            log: Log) -> tuple[SystemConfig, dict, str]:
    """The config reading `--data` (its dataset, splits, a held-out share of a lone split) with
    the network's own settings, and the results folder's suffix; the data's classes must be
    as many as the network's."""
    from core.data.from_data import run_name, use_data

    folder = run_name("data", options.data)
    system, db, found = use_data(system_config, db_config, options.data,
                                 system_config.result_dir / folder, log)
    if db["categories"] != db_config["categories"]:
        raise UsageError(f"--data {options.data}: {db['categories']} classes "
                         f"({', '.join(found['names'])}) but {options.cfg_file} detects "
                         f"{db_config['categories']}; test on data of the same classes")
    return system, db, (f"{options.suffix}-" if options.suffix else "") + folder


def config_of(options: TestOptions, log: Log = print) -> tuple[SystemConfig, dict, str | None]:
    """The config the options evaluate with (the suffix's test settings, --data's dataset,
    --set), and the results folder's suffix."""
    name = settings_name(options)
    system_config, db_config = load_config(name, options.config_dir,
                                           overrides=options.overrides)
    # A suffix config holds other test settings for the same network and snapshots.
    if name != options.cfg_file:
        system_config = system_config.replace(snapshot_name=load_config(
            options.cfg_file, options.config_dir)[0].snapshot_name)
    if system_config.model is None:
        system_config = system_config.replace(model=options.cfg_file)
    if options.data is not None:
        return on_data(options, system_config, db_config, log)
    return system_config, db_config, options.suffix


def evaluate(options: TestOptions, log: Log = print) -> EvaluationReport:
    """The evaluation the options name: their config, snapshot, split and results folder,
    evaluated by core (`core.inference.evaluate.evaluate_split`)."""
    from core.data.check import warn_split_overlap
    from core.dbs import datasets
    from core.nnet.checkpoint import default_snapshot, snapshot_label

    system_config, db_config, suffix = config_of(options, log)
    split = split_key(options, system_config)
    testiter = snapshot_label(system_config, default_snapshot(system_config, log)
                              if options.testiter is None else options.testiter)
    if split == "testdev" and system_config.dataset == "COCO":
        db_config = official_testdev(system_config, db_config)

    # The cheap checks first: the snapshot exists before the dataset is read (or generated).
    runtime(options.runtime).file_of(system_config, testiter, options.onnx)
    db = lookup(datasets, system_config.dataset, "dataset")(db_config, split=split,
                                                            sys_config=system_config)
    warn_split_overlap(system_config, db_config, db, split, log)

    def network() -> tuple[Any, Path, str]:
        nnet, model_file = open_network(options.runtime, system_config, db, testiter,
                                        options.device, options.onnx,
                                        raw_weights=options.raw_weights,
                                        precision=options.precision, threads=options.threads)
        return nnet, model_file, runtime(options.runtime).label(nnet)

    return evaluate_split(
        db, system_config, results_folder(system_config, testiter, split, suffix), split,
        network, images=options.image_limit, batch_size=options.batch, vis=options.vis_limit,
        vis_thresh=options.vis_thresh, backend=options.backend, resume=options.resume,
        sync_timing=options.sync_timing, threads=options.threads,
        results_name=(TESTDEV_RESULTS.format(options.cfg_file) if split == "testdev"
                      else "results.json"), log=log)


@keeps_process
def run(options: TestOptions, log: Log = print) -> dict | None:
    """Evaluate as the options say and print the report's summary; returns the COCO metrics
    written to metrics.json (None for a split without boxes or with --backend none)."""
    report = evaluate(options, log)
    log(report.summary)
    return report.metrics


ON_STOP = "the detections made so far are kept; run the same command again to continue"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), on_stop=lambda _: ON_STOP, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
