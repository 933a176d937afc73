"""Mistakes found before any training process starts, each in one line (exit 2).

The settings, the deal of the batch to every process, what the device can run and the process-group
backend it can use, sizes the model cannot take, /dev/shm for the prefetch rings of this node and
(with `data`) the training split.
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import load_config
from ..data.chunks import deal
from ..data.ring import shm_need
from ..dbs import datasets
from ..errors import ConfigError, lookup
from ..models.fit import check_model_fit
from ..utils.device import check_runtime, distributed_kind, resolve_device
from ..utils.dist import check_backend
from ..utils.files import check_shm
from ..utils.procs import remove_dead_mp_folders
from ..utils.threads import training_share
from .options import TrainOptions


def preflight(options: TrainOptions, procs: int, log: Callable[[str], None],
              data: bool = True) -> None:
    """Raise the first mistake of the run `options` would start with `procs` processes a node.
    With `data`, the training split is loaded, saying what it finds to `log`."""
    system_config, db_config = load_config(options.cfg_file, options.config_dir,
                                           overrides=options.overrides,
                                           weights=options.weights)
    world = max(options.world_size, 1) * procs
    shares = [deal(system_config.batch_size, system_config.chunk_sizes, rank, world)
              for rank in range(world)]
    asked = options.device
    device = resolve_device(distributed_kind(asked) if options.distributed else asked)
    check_runtime(system_config.amp, system_config.sync_bn, device)
    if options.distributed:
        check_backend(options.dist_backend, device.type)
    check_model_fit(system_config.model_name, db_config)
    node = shares[options.rank * procs:(options.rank + 1) * procs]
    check_shm(shm_need(db_config, system_config.sampling_function,
                       sum(share.local_batch for share in node),
                       training_share(options.workers, procs).workers,
                       prefetch_size=system_config.prefetch_size,
                       validation=bool(system_config.val_iter)))
    if data:
        dataset = lookup(datasets, system_config.dataset, "dataset")
        dataset(db_config, split=system_config.train_split,
                settings=system_config.dataset_settings(), log=log)


def check_args(options: TrainOptions) -> None:
    """Counts that cannot be right (given on the command line or by the API), before anything
    starts."""
    if options.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (prefetch processes per rank), got "
                          f"{options.workers}")
    if options.dry_run is not None and options.dry_run < 1:
        raise ConfigError(f"--dry-run must be at least 1 (batches to time), got "
                          f"{options.dry_run}")


def tidy_temp(log: Callable[[str], None] = print) -> None:
    """Remove the temp folders multiprocessing left behind when a process of ours was killed,
    saying so to `log`."""
    left = remove_dead_mp_folders()
    if left:
        log(f"removed {len(left)} temp folder(s) of killed processes ({left[0].parent}/pymp-*)")
