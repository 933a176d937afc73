"""Mistakes found before any training process starts, each in one line (exit 2).

The settings, the deal of the batch to every process, what the device can run and the process-group
backend it can use, sizes the model cannot take, /dev/shm for the prefetch rings of this node and
(with `data`) the training split.
"""

from __future__ import annotations

import argparse
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


def preflight(args: argparse.Namespace, procs: int, log: Callable[[str], None],
              data: bool = True) -> None:
    """Raise the first mistake of the run `args` would start with `procs` processes a node.
    With `data`, the training split is loaded, saying what it finds to `log`."""
    system_config, db_config = load_config(args.cfg_file, args.config_dir,
                                           overrides=getattr(args, "overrides", None),
                                           weights=getattr(args, "weights", None))
    world = max(args.world_size, 1) * procs
    shares = [deal(system_config.batch_size, system_config.chunk_sizes, rank, world)
              for rank in range(world)]
    device = resolve_device(distributed_kind(args.device) if args.distributed else args.device)
    check_runtime(system_config.amp, system_config.sync_bn, device)
    if args.distributed:
        check_backend(args.dist_backend, device.type)
    check_model_fit(system_config.model_name, db_config)
    node = shares[args.rank * procs:(args.rank + 1) * procs]
    check_shm(shm_need(db_config, system_config.sampling_function,
                       sum(share.local_batch for share in node),
                       training_share(args.workers, procs).workers,
                       prefetch_size=system_config.prefetch_size,
                       validation=bool(system_config.val_iter)))
    if data:
        dataset = lookup(datasets, system_config.dataset, "dataset")
        dataset(db_config, split=system_config.train_split,
                settings=system_config.dataset_settings(), log=log)


def check_args(args: argparse.Namespace) -> None:
    """Counts on the command line that cannot be right, before anything starts."""
    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (prefetch processes per rank), got "
                          f"{args.workers}")
    if args.dry_run is not None and args.dry_run < 1:
        raise ConfigError(f"--dry-run must be at least 1 (batches to time), got {args.dry_run}")


def tidy_temp(log: Callable[[str], None] = print) -> None:
    """Remove the temp folders multiprocessing left behind when a process of ours was killed,
    saying so to `log`."""
    left = remove_dead_mp_folders()
    if left:
        log(f"removed {len(left)} temp folder(s) of killed processes ({left[0].parent}/pymp-*)")
