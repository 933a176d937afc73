"""COCO AP during training: the test path of test.py on the validation split, split over ranks.

Every `system.eval_iter` iterations (and at the last one) each rank detects on its share of the
validation images (`system.eval_images` limits them), rank 0 gathers the detections and scores
them with the COCO evaluator, exactly as `test.py <Cfg> --testiter <it>` would, and its results
land where test.py puts them. It runs test.py's network too: an `InferenceNetwork` loaded with
the factory's current weights (their average with system.ema_decay), built for the evaluation
and dropped after it, so the training model (DDP, SyncBatchNorm, channels_last, compile) is never
what is evaluated, and training holds no second copy of the weights between evaluations.

The ranks do the same amount of work and meet in one gather, so none waits in a collective
while another evaluates; only rank 0's scoring (seconds) is waited on, inside the next
iteration's first collective.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..config.rules import check_decode_settings
from ..dbs import DatasetError
from ..deploy.network import InferenceNetwork
from ..inference.coco_eval import score
from ..inference.folders import results_folder
from ..inference.loop import DetectionRun, detect
from ..nnet.checkpoint import SNAPSHOT_FORMAT
from .schedule import due

if TYPE_CHECKING:
    from ..config import SystemConfig
    from ..dbs.detection import DETECTION
    from ..nnet.py_factory import NetworkFactory


def inference_network(nnet: NetworkFactory, raw_weights: bool = False) -> InferenceNetwork:
    """The factory's current weights (their average when it has one of at least one step,
    unless `raw_weights`) in an InferenceNetwork on its device: what test.py would run on a
    snapshot written now, without the file. The factory's RNG state is left as it was."""
    with torch.random.fork_rng(devices=[]):  # the fresh model's initialisation draws from it
        network = InferenceNetwork(nnet.system_config, nnet.db_configs, nnet.device)
    return network.load({"format": SNAPSHOT_FORMAT, **nnet.state_dict()},
                        "the weights in training", raw_weights)


class Evaluator:
    """Runs the evaluation of one rank.

    Args:
        system_config: the run's config (eval_iter, eval_images, max_iter, result_dir, ...).
        make_db: builds the validation split's dataset (once, on first use).
        rank, world, distributed: this process in the run.
        log: where rank 0's scoring says what it found (the COCO summary and where it wrote).
    """

    def __init__(self, system_config: SystemConfig, make_db: Callable[[], Any], rank: int,
                 world: int, distributed: bool, log: Callable[[str], None]) -> None:
        self.system_config = system_config
        self.log = log
        self.make_db = make_db
        self.rank, self.world, self.distributed = rank, world, distributed
        self._db = None
        self.last_results: Path | None = None  # the results folder of the last evaluation
        self.weights = "raw"  # which weights the last evaluation ran: "ema" or "raw"

    def check(self, training_db: DETECTION) -> None:
        """Load the validation split now, before training, and refuse one that cannot be scored
        against this model's classes: a missing or malformed file, another class count or
        other category ids (detections would be scored against the wrong classes), no
        annotations or no images. Without this, each surfaced at the first evaluation, hours in.
        """
        split = self.system_config.val_split
        try:
            db = self._db = self.make_db()  # names the file when missing or malformed
        except (DatasetError, FileNotFoundError) as err:
            raise DatasetError(f"validation split '{split}' (system.eval_iter is set): "
                               f"{err}") from None
        where = db.annotation_file
        if list(db.class_ids) != list(training_db.class_ids):
            differ = sorted(set(db.class_ids) ^ set(training_db.class_ids))
            raise DatasetError(
                f"{where}: the category ids of the validation split '{split}' differ from the "
                f"training split's ({training_db.annotation_file}) in {differ[:5]}: detections "
                f"would be scored against the wrong classes; use annotation files with the same "
                f"categories, or set system.eval_iter to 0")
        if not db.has_annotations:
            raise DatasetError(f"{where}: no 'annotations' list, so the validation split "
                               f"'{split}' cannot be scored; use an instances file with "
                               f"annotations, or set system.eval_iter to 0")
        if not len(db.db_inds[:self.system_config.eval_images]):
            raise DatasetError(f"{where}: the validation split '{split}' has no images, so AP "
                               f"cannot be measured; list its images, or set system.eval_iter "
                               f"to 0")
        check_decode_settings(db.configs)

    def due(self, iteration: int) -> bool:
        return due(iteration, self.system_config.eval_iter, self.system_config.max_iter)

    def __call__(self, nnet: NetworkFactory, iteration: int) -> dict[str, float] | None:
        """The COCO metrics of the current weights (their average with system.ema_decay) on
        rank 0 (None on the other ranks)."""
        if self._db is None:
            self._db = self.make_db()
        db = self._db
        inds = db.db_inds[:self.system_config.eval_images]
        network = inference_network(nnet)
        self.weights = network.evaluated_weights
        # Test images differ in size: cuDNN would time its algorithms again for each new shape.
        benchmark, torch.backends.cudnn.benchmark = torch.backends.cudnn.benchmark, False
        try:
            mine = detect(db, network, self.system_config, inds[self.rank::self.world],
                          batch_size=self.system_config.test_batch_size)
        finally:
            torch.backends.cudnn.benchmark = benchmark
        parts = [mine]
        if self.distributed:
            parts = [None] * self.world
            dist.all_gather_object(parts, mine)
        if self.rank != 0:
            return None
        found = DetectionRun.merge(parts)
        out_dir = results_folder(self.system_config, iteration, self.system_config.val_split)
        self.last_results = out_dir
        # Results in the split's order, as test.py writes them: COCO breaks score ties by it.
        return score(db, found.detections, out_dir, image_ids=[db.image_id(i) for i in inds],
                     unreadable=found.unreadable, weights=self.weights, log=self.log)
