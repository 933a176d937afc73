"""`cornernet test` (test.py): evaluate a snapshot.

    cornernet test <Cfg> [--testiter N|best|FILE] [--split S] [--suffix X] [--vis N]

Runs the inference of `system.sampling_function` on every image of the split, writes
results/<Cfg>/<iter>/<split>[/<suffix>]/results.json and, where the split has boxes, the 12 COCO
metrics to metrics.json in the same folder. Detections are journalled as they are made: an
interrupted run continues where it stopped when run again with the same settings.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.config import (
    CONFIG_DIR,
    DEFAULT_SNAPSHOT,
    ConfigError,
    SystemConfig,
    add_set_arg,
    config_path,
    load_config,
    lookup,
    snapshot_or_file_arg,
)
from core.config.rules import unit_interval
from core.deploy.options import RuntimeOptions
from core.deploy.runtimes import open_network, runtime
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError
from core.inference.coco_eval import BACKENDS, require_backend, score
from core.inference.folders import results_folder
from core.utils import lock
from core.utils.threads import threads_line, threads_note
from cornernet.options import parser_for

# torch, the datasets and the test loop are imported by the functions that use them, so that
# --help imports none of them (cornernet/commands/__init__.py).
if TYPE_CHECKING:
    from core.inference.journal import Done, Journal
    from core.inference.loop import ImageResult

# --split: the config's roles, and COCO's test-dev as users download it.
SPLITS = ("training", "validation", "testing", "testdev")
JOURNAL = "partial.jsonl"
# Official test-dev files: image-info json and the test2017 images, and the results name the
# COCO server takes.
TESTDEV_INFO = "image_info_test-dev2017.json"
TESTDEV_IMAGES = ("testdev2017", "test2017")
TESTDEV_RESULTS = "detections_test-dev2017_{}_results.json"
WEIGHTS = {"ema": "the average of the weights (system.ema_decay; --raw-weights for the others)",
           "raw": "the trained weights"}


PROG = "cornernet test"
Log = Callable[[str], None]


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog or PROG,
                                     description="Evaluate a CornerNet-Lite snapshot")
    parser.add_argument("cfg_file", help="config name in configs/, e.g. CornerNet_Squeeze")
    parser.add_argument("--testiter", type=snapshot_or_file_arg, default=None,
                        help="snapshot iteration, 'best' for the snapshot with the highest "
                             "validation AP during training, or a snapshot file of the config "
                             f"(<Cfg>_<iter>.pkl; {DEFAULT_SNAPSHOT})")
    parser.add_argument("--split", choices=SPLITS, default="validation",
                        help="a split of the config (training, validation, testing) or COCO's "
                             "testdev (image_info_test-dev2017.json accepted as it comes)")
    parser.add_argument("--suffix", default=None,
                        help="test-time settings from configs/<Cfg>-<suffix>.json (or the config "
                             "named <suffix>), e.g. multi_scale; the snapshots stay <Cfg>'s")
    parser.add_argument("--images", type=int, default=None, help="evaluate the first N images")
    parser.add_argument("--vis", type=int, default=0, metavar="N",
                        help="draw the detections and ground truth of the first N images")
    parser.add_argument("--vis-thresh", type=unit_interval, default=0.3,
                        help="draw detections scoring above this")
    parser.add_argument("--batch", type=int, default=None,
                        help="images per network call, those of one canvas bucket in one forward "
                             "(default: system.test_batch_size or 1)")
    parser.add_argument("--sync-timing", action="store_true",
                        help="on a GPU, time the network and the decoding apart (waits for the "
                             "GPU after every batch; without it the decoding's time is the "
                             "network's)")
    parser.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                        help="continue an interrupted run of the same settings (default)")
    parser.add_argument("--debug", action="store_true",
                        help="the first --debug-images images with pictures, and tracebacks")
    parser.add_argument("--debug-images", type=int, default=20)
    parser.add_argument("--device", default=None,
                        help="cuda, cuda:1 or cpu (default: the current GPU, else cpu)")
    parser.add_argument("--backend", choices=(*BACKENDS, "none"), default="faster",
                        help="COCO evaluator (pycocotools is the reference); none: write the "
                             "detections without scoring them")
    parser.add_argument("--raw-weights", action="store_true",
                        help="evaluate the trained weights, not their average (system.ema_decay)")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    parser.add_argument("--data", type=Path, default=None, metavar="PATH",
                        help="evaluate on this export's split (a data.yaml, a COCO json or a "
                             "folder, as `train --data` takes it) with the run's classes; "
                             "results under <iter>/<split>/data-<folder>")
    add_set_arg(parser)
    parser_for(RuntimeOptions, parser.prog, parser=parser)  # --runtime, --onnx, ...
    args = parser.parse_args(argv)
    for name in ("images", "batch", "debug_images"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.vis < 0:
        parser.error(f"--vis must be 0 or more, got {args.vis}")
    if args.debug:
        args.images = args.debug_images
        args.vis = max(args.vis, args.debug_images)
    return args


def settings_name(args: argparse.Namespace) -> str:
    """The config file to read: <Cfg>, <Cfg>-<suffix>, or the config named <suffix>."""
    if args.suffix is None:
        return args.cfg_file
    for name in (f"{args.cfg_file}-{args.suffix}", args.suffix):
        try:
            config_path(name, args.config_dir)
            return name
        except ConfigError:
            continue
    raise UsageError(f"--suffix {args.suffix}: neither {args.cfg_file}-{args.suffix}.json nor "
                     f"{args.suffix}.json is in {args.config_dir}")


def split_key(args: argparse.Namespace, system_config: SystemConfig) -> str:
    return {"training": system_config.train_split, "validation": system_config.val_split,
            "testing": system_config.test_split, "testdev": "testdev"}[args.split]


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


def check_writable(folder: Path) -> None:
    """Create `folder` and a probe file in it, or say in one line why that is impossible."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{time.time_ns()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"cannot write results to {folder}: {err.strerror or err}; make it "
                         "writable or set system.result_dir") from None


def on_data(args: argparse.Namespace, system_config: SystemConfig, db_config: dict,
            log: Log) -> tuple[SystemConfig, dict, str]:
    """The config reading `--data` (its dataset, splits, a held-out share of a lone split) with
    the network's own settings, and the results folder's suffix; the data's classes must be
    as many as the network's."""
    from core.data.from_data import run_name, use_data

    folder = run_name("data", args.data)
    system, db, found = use_data(system_config, db_config, args.data,
                                 system_config.result_dir / folder, log)
    if db["categories"] != db_config["categories"]:
        raise UsageError(f"--data {args.data}: {db['categories']} classes "
                         f"({', '.join(found['names'])}) but {args.cfg_file} detects "
                         f"{db_config['categories']}; test on data of the same classes")
    return system, db, (f"{args.suffix}-" if args.suffix else "") + folder


@keeps_process
def run(args: argparse.Namespace, log: Log = print) -> dict | None:
    """Evaluate as the options say; returns the COCO metrics written to metrics.json (None for
    a split without boxes or with --backend none)."""
    from core.data.check import warn_split_overlap
    from core.dbs import datasets
    from core.nnet.checkpoint import default_snapshot, snapshot_label

    system_config, db_config = load_config(settings_name(args), args.config_dir,
                                           overrides=args.overrides)
    # A suffix config holds other test settings for the same network and snapshots.
    if settings_name(args) != args.cfg_file:
        system_config = system_config.replace(snapshot_name=load_config(
            args.cfg_file, args.config_dir)[0].snapshot_name)
    if system_config.model is None:
        system_config = system_config.replace(model=args.cfg_file)
    suffix = args.suffix
    if getattr(args, "data", None) is not None:
        system_config, db_config, suffix = on_data(args, system_config, db_config, log)
    split = split_key(args, system_config)
    testiter = snapshot_label(system_config, default_snapshot(system_config, log)
                              if args.testiter is None else args.testiter)
    if split == "testdev" and system_config.dataset == "COCO":
        db_config = official_testdev(system_config, db_config)

    # Everything that can fail is checked before the network is built and the long part starts,
    # the cheap first: the snapshot exists before the dataset is read (or generated).
    runtime(args.runtime).file_of(system_config, testiter, args.onnx)
    db = lookup(datasets, system_config.dataset, "dataset")(db_config, split=split,
                                                            sys_config=system_config)
    warn_split_overlap(system_config, db_config, db, split, log)
    out_dir = results_folder(system_config, testiter, split, suffix)
    check_writable(out_dir)
    # Two runs on one results folder would interleave their journals: one at a time.
    lock.acquire(out_dir, log, "use another --suffix or system.result_dir")
    try:
        return evaluate(args, system_config, db, out_dir, testiter, split, log)
    finally:
        lock.release_all()


def evaluate(args: argparse.Namespace, system_config: SystemConfig, db: Any, out_dir: Path,
             testiter: int | str, split: str, log: Log = print) -> dict | None:
    """Detect on the split's images (continuing a journal), then score and write results."""
    import torch

    from core.inference.loop import cpu_workers, detect
    from core.inference.pictures import Pictures

    if db.has_annotations and args.backend != "none":
        require_backend(args.backend)
    batch_size = args.batch or system_config.test_batch_size
    inds = [int(ind) for ind in db.db_inds[:args.images]]
    if not inds:
        raise UsageError(f"split '{split}' has no images ({db.annotation_file})")
    image_ids = [db.image_id(ind) for ind in inds]
    nnet, journal, done = open_run(args, system_config, db, testiter, split, out_dir,
                                   image_ids, batch_size, log)
    pictures = Pictures(db, inds[:args.vis], out_dir / "vis", args.vis_thresh)

    def record(result: ImageResult) -> None:
        journal.record(result)
        pictures.on_result(result)

    workers = cpu_workers(nnet, args.threads)
    if workers > 1:
        each = max(1, torch.get_num_threads() // workers)
        log(f"{workers} images at once, each on {each} thread{'s' if each > 1 else ''} "
            "(--threads sets how many)")
    start = time.perf_counter()
    run = detect(db, nnet, system_config, inds[done.restart_at(image_ids, batch_size):],
                 progress=True, batch_size=batch_size, on_image=record, workers=workers,
                 sync_timing=args.sync_timing)
    seconds = time.perf_counter() - start
    pictures.from_journal(done, set(run.image_ids), log)
    journal.close()
    detections, unreadable = done.with_run(run)

    start = time.perf_counter()
    results_name = (TESTDEV_RESULTS.format(args.cfg_file) if split == "testdev"
                    else "results.json")
    metrics = score(db, detections, out_dir, args.backend, image_ids=image_ids,
                    unreadable=unreadable, results_name=results_name,
                    weights=nnet.evaluated_weights, class_table=True, log=log)
    log(run.summary(seconds, nnet.device, time.perf_counter() - start))
    journal.remove()
    return metrics


def open_run(args: argparse.Namespace, system_config: SystemConfig, db: Any,
             testiter: int | str, split: str, out_dir: Path, image_ids: list[int],
             batch_size: int, log: Log = print) -> tuple[Any, Journal, Done]:
    """The network, and the journal of these settings with what it already holds."""
    import torch

    from core.inference.journal import Journal, snapshot_identity

    nnet, model_file = open_network(args.runtime, system_config, db, testiter, args.device,
                                    args.onnx, raw_weights=args.raw_weights,
                                    precision=args.precision, threads=args.threads)
    # A precision changes the results: a journal of another precision is not resumed.
    label = runtime(args.runtime).label(nnet)
    log(f"loading {model_file} ({label}); {threads_line(torch.get_num_threads())}")
    if note := threads_note(args.threads):
        log(f"note: {note}")
    log(f"weights: {WEIGHTS[nnet.evaluated_weights]}")
    fingerprint = {"config": {"system": system_config.full, "db": db.configs},
                   "snapshot": snapshot_identity(model_file), "runtime": label,
                   "split": split, "images": image_ids, "batch_size": batch_size,
                   "device": str(nnet.device), "torch": torch.__version__,
                   "weights": nnet.evaluated_weights}
    journal, done, note = Journal.open(out_dir / JOURNAL, fingerprint, db.num_classes,
                                       args.resume)
    if note:
        log(note)
    return nnet, journal, done


ON_STOP = "the detections made so far are kept; run the same command again to continue"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), on_stop=lambda _: ON_STOP, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
