"""Building one rank's training run (`run.Run`): its share of the batch, its network (resumed,
pretrained or new), the data sources, the probe batch, and the parts the loop carries, each
loaded from the snapshot resumed.

`build` checks what it touches as it goes (an unwritable or full cache, a missing evaluator, a
snapshot of another config) so that these are found before the first iteration, not at the first
snapshot; `data_only` is `--dry-run`: the data path alone, no model.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..config import SystemConfig
from ..config.fine_tune import fine_tune_line
from ..data.check import save_batch_picture, warn_split_overlap
from ..data.chunks import Deal, deal
from ..data.dry_run import dry_run
from ..data.ring import probe_batch
from ..dbs import DatasetError, datasets
from ..dbs.detection import quiet, said_once
from ..errors import Stopped, lookup
from ..inference.coco_eval import require_backend
from ..nnet.checkpoint import RUN_CONFIG
from ..nnet.py_factory import NetworkFactory
from ..sample import sampler
from ..utils import dist as dist_utils
from ..utils import lock
from ..utils.device import resolve_device
from ..utils.files import (
    check_free_disk,
    probe_writable,
    remove_stale_temp_files,
    snapshot_bytes,
    write_file_atomic,
)
from ..utils.threads import CpuShare, set_torch_threads, training_share, usable_cpus
from . import snapshots
from .evaluation import Evaluator
from .metrics import DataCounts, Throughput
from .run import DataPosition, Run
from .steps import TrainStep
from .stop import StopRequest, stop_request

if TYPE_CHECKING:
    from ..dbs.detection import DETECTION
    from .options import TrainOptions

Log = Callable[[str], None]


def data_only(options: TrainOptions, system_config: SystemConfig, db_config: dict,
              rank: int, world: int, device: torch.device | str | None, log: Log) -> int:
    """--dry-run N: N batches through the prefetch path and its figures; no model, no files.
    A stop signal (also one caught during start-up) ends it at once: there is nothing to save."""
    stop = StopRequest(at_once=True)
    dataset = lookup(datasets, system_config.dataset, "dataset")
    sample = sampler(system_config.sampling_function, system_config.strict_images)
    # dry_run loads it once here, saying what it finds; the prefetch workers' copies say nothing.
    make_db = functools.partial(dataset, db_config, split=system_config.train_split,
                                settings=system_config.dataset_settings(), log=quiet)
    where = resolve_device(device)
    try:
        if stop():
            raise Stopped(stop.signum)
        share = deal(system_config.batch_size, system_config.chunk_sizes, rank, world)
        workers = cpu_share(options, world, log).workers
        log(dry_run(make_db, sample, share, workers, options.dry_run, seed=system_config.seed,
                    prefetch_size=system_config.prefetch_size, device=where,
                    log=log).report())
    except Stopped as stopped:
        log(f"stopped by {stopped}: a dry run has nothing to save")
        return stop.exit_status
    return 0


def _check_storage(system_config: SystemConfig, log: Log) -> None:
    """Rank 0: an unwritable cache, a missing evaluator or results folder now, not later."""
    probe_writable(system_config.snapshot_dir, "system.cache_dir")
    lock.acquire(system_config.snapshot_dir, log)
    if system_config.eval_iter:
        require_backend("faster")
        probe_writable(system_config.result_dir, "system.result_dir")
    for path in remove_stale_temp_files(system_config.snapshot_dir):
        log(f"removed {path.name}, left by an interrupted snapshot write")


def _check_val_split(make_val_db: Callable[[], DETECTION], split: str) -> None:
    """The split of the validation loss (system.val_iter) loads and has images: a missing or
    malformed file now, in one line, not at the first validation."""
    try:
        db = make_val_db()
    except (DatasetError, FileNotFoundError) as err:
        raise DatasetError(f"validation split '{split}' (system.val_iter is set): {err}; fix "
                           f"it, or set system.val_iter to 0") from None
    if not len(db.db_inds):
        raise DatasetError(f"{db.annotation_file}: the validation split '{split}' "
                           f"(system.val_iter is set) has no images; list its images, or set "
                           f"system.val_iter to 0")


def _check_objects(training_db: DETECTION, system_config: SystemConfig) -> None:
    """A training split without a single object has nothing to learn: one line, not a run
    that trains on background alone (the loader's lines above it say what it found)."""
    if not any(len(training_db.detections(ind)) for ind in range(len(training_db))):
        raise DatasetError(f"the training split '{system_config.train_split}' "
                           f"({system_config.dataset}) has no object in its {len(training_db)} "
                           f"images: nothing to learn; put its labels where the loader reads "
                           f"them (cornernet check {system_config.snapshot_name} says what it "
                           f"found)")


def write_config(nnet: NetworkFactory, folder: Path) -> Path:
    """The resolved config (as every snapshot records it) as `folder`/config.json, atomically."""
    path = folder / RUN_CONFIG
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(nnet.config_record(), indent=2) + "\n"
    write_file_atomic(path, lambda file: file.write(text.encode()))
    return path


def cpu_share(options: TrainOptions, world: int, log: Log) -> CpuShare:
    """This process's prefetch workers and trainer threads within its share of this machine's
    CPUs (core/utils/threads.py); says so when --workers asked for more."""
    cpus = training_share(options.workers, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    if cpus.note:
        log(f"note: {cpus.note}")
    return cpus


def _describe(system_config: SystemConfig, training_db: DETECTION, nnet: NetworkFactory,
              share: Deal, world: int, workers: int, threads: int, rank: int,
              log: Log) -> None:
    """The run in a few lines; the resolved config goes to a file (rank 0 writes it)."""
    if rank == 0:
        log(f"config: {write_config(nnet, system_config.snapshot_dir)} (the resolved settings, "
            "also recorded in every snapshot)")
    log(f"training images: {len(training_db.db_inds)}, device: {nnet.device}, "
        f"processes: {world}, global batch {share.batch_size} in chunks {list(share.sizes)}, "
        f"rank 0 runs {share.mine}; {threads} thread(s) and {workers} prefetch worker(s) "
        f"per process on {usable_cpus()} usable CPUs; step: {nnet.path.describe()}")
    if share.note:
        log(f"note: {share.note}")
    if nnet.frozen:
        log(f"frozen: {len(nnet.frozen)} parameter tensors under {system_config.freeze}")


def _resume(options: TrainOptions, system_config: SystemConfig, nnet: NetworkFactory,
            rank: int, distributed: bool, log: Log) -> tuple[int, dict]:
    """(the iteration resumed from, its snapshot), or (0, {}) for a fresh start, which loads
    `system.pretrain` when set. The network is loaded here; the loop's parts by `Run`."""
    latest = options.start_iter == "latest"
    start = int(options.start_iter) if not latest else dist_utils.from_rank0(
        snapshots.latest(system_config, log) if rank == 0 else None, distributed)
    resumed: dict = {}
    if start:
        resumed = nnet.load_params(start)
        log(f"continuing from snapshot {start}")
    elif system_config.pretrain and not options.initialize:
        if options.weights:
            log(fine_tune_line(system_config.pretrain, system_config.learning_rate,
                               system_config.warmup_iters, system_config.freeze))
        nnet.load_pretrained_params(system_config.resolve(system_config.pretrain), log)
    if rank == 0:
        snapshots.set_aside_later_best(system_config.snapshot_file("best"), start, log)
    return start, resumed


def build(options: TrainOptions, system_config: SystemConfig, db_config: dict, rank: int,
          world: int, device: torch.device | str | None, distributed: bool, log: Log) -> Run:
    """This rank's run, resumed from `options.start_iter` when it names a snapshot. Its stop
    request is made first: it takes over a stop asked during start-up."""
    stop = stop_request(options, system_config)
    dataset = lookup(datasets, system_config.dataset, "dataset")
    # This rank's own datasets say what their loader finds to its log, each line once however
    # often a split is loaded; the prefetch workers' copies of the same splits say nothing.
    make_db = functools.partial(dataset, db_config, settings=system_config.dataset_settings(),
                                log=quiet)
    say = said_once(log)
    make_here = functools.partial(make_db, log=say)
    if rank == 0:
        _check_storage(system_config, log)
    training_db = make_here(split=system_config.train_split)
    _check_objects(training_db, system_config)
    shared = 0
    if rank == 0 and not options.initialize:
        # The validation split's first loading in this run: its loader lines are said here.
        shared = warn_split_overlap(system_config, db_config, training_db, training_db.split,
                                    say, loading=True)
    evaluate = Evaluator(system_config, functools.partial(make_here, split=system_config.val_split),
                         rank, world, distributed, log)
    if system_config.eval_iter and not options.initialize:
        evaluate.check(training_db)  # a validation split that cannot be scored: now, not later
    if system_config.val_iter and not options.initialize:
        _check_val_split(functools.partial(make_here, split=system_config.val_split),
                         system_config.val_split)
    share = deal(system_config.batch_size, system_config.chunk_sizes, rank, world)
    torch.manual_seed(system_config.seed)
    nnet = NetworkFactory(system_config, training_db, device=device, distributed=distributed,
                          share=share, log=log)
    if rank == 0:
        params = sum(p.numel() for p in nnet.model.parameters())
        check_free_disk(system_config.snapshot_dir, 2 * snapshot_bytes(params, True))
    cpus = cpu_share(options, world, log)
    set_torch_threads(cpus.threads)
    _describe(system_config, training_db, nnet, share, world, cpus.workers, cpus.threads, rank,
              log)
    start, resumed = _resume(options, system_config, nnet, rank, distributed, log)
    sample = sampler(system_config.sampling_function, system_config.strict_images)
    training_db.set_rng(np.random.default_rng(system_config.seed))
    probe = None if options.initialize else probe_batch(training_db, sample, share)
    run = Run(
        system_config=system_config, nnet=nnet, share=share, rank=rank, distributed=distributed,
        start=start, workers=cpus.workers, sample=sample, probe=probe,
        make_train_db=functools.partial(make_db, split=system_config.train_split),
        make_val_db=functools.partial(make_db, split=system_config.val_split),
        best=snapshots.Best(system_config.snapshot_file("best")), evaluate=evaluate,
        step=TrainStep(nnet, system_config.nonfinite_loss, log), counts=DataCounts(log),
        speed=Throughput(), position=DataPosition(share, world, system_config.batch_size, log,
                                                  next_batch=start),
        stop=stop, log=log, shared_images=shared)
    run.load_state_dict(resumed)
    if rank == 0 and start == 0 and system_config.batch_pictures and not options.initialize:
        picture = system_config.snapshot_dir / "train_batch0.jpg"
        save_batch_picture(run.sample, make_here(split=system_config.train_split), picture)
        log(f"wrote {picture}: what the network is shown (system.batch_pictures)")
    return run
