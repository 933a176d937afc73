#!/usr/bin/env python
"""Train a corner detector: python train.py <Cfg> [--iter N] [--workers W] [--initialize] ...

Iterations start+1 .. max_iter; the learning rate is a pure function of the iteration; rank 0
writes snapshots cache/nnet/<Cfg>/<Cfg>_<iter>.pkl from which `--iter N` continues exactly.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import pprint
import signal
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from core import snapshots
from core.chunks import deal, rank_config
from core.config import CONFIG_DIR, ConfigError, load_config, lookup
from core.config_rules import check_model_fit
from core.dbs import DatasetError, datasets
from core.dry_run import dry_run
from core.engine import cluster, preempt
from core.evaluation import Evaluator
from core.inference.coco_eval import MissingEvaluator, require_backend
from core.metrics import (
    EVAL_KEYS,
    DataCounts,
    Throughput,
    display_line,
    due,
    open_metrics,
    training_values,
)
from core.nnet.py_factory import NetworkFactory, NonFiniteLoss, check_runtime, default_device
from core.prefetch import Prefetcher, Stopped, WorkerError
from core.sample import data_sampling_func
from core.schedule import learning_rate_at
from core.steps import TrainStep, validate
from core.stop import agree_all
from core.utils import dist as dist_utils
from core.utils import launch
from core.utils.files import (
    DiskFull,
    StorageError,
    check_free_disk,
    check_shm,
    probe_writable,
    remove_stale_temp_files,
    shm_need,
    snapshot_bytes,
)
from core.utils.images import ImageReadError


def iteration_arg(text: str) -> str:
    """--iter: a snapshot iteration (>= 0) or 'latest'."""
    if text != "latest" and not (text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected an iteration number or 'latest', got {text!r}")
    return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train CornerNet, CornerNet-Squeeze, "
                                     "CornerNet-Saccade or CornerNet-Tiny")
    parser.add_argument("cfg_file", help="config name: configs/<cfg_file>.json")
    parser.add_argument("--iter", dest="start_iter", default="0", type=iteration_arg,
                        help="continue from the snapshot of this iteration; 'latest': from the "
                             "newest snapshot that loads (from scratch when there is none)")
    parser.add_argument("--workers", default=4, type=int, help="prefetch processes per rank")
    parser.add_argument("--initialize", action="store_true",
                        help="write the iteration-0 snapshot and exit")
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--world-size", default=-1, type=int,
                        help="number of nodes of distributed training")
    parser.add_argument("--rank", default=0, type=int, help="node rank")
    parser.add_argument("--dist-url", default=None, type=str,
                        help="rendezvous, e.g. tcp://host:port (default: a local port)")
    parser.add_argument("--dist-backend", default=None, type=str,
                        help="nccl with GPUs, gloo without (the default follows the machine)")
    parser.add_argument("--procs-per-node", default=None, type=int,
                        help="training processes per node (default: one per GPU, or 1 without "
                             "GPUs)")
    parser.add_argument("--dry-run", default=0, type=int, metavar="N",
                        help="only take N batches through the data path, print its figures "
                             "(images/s, bytes per image, reading/augmenting/queueing) and exit")
    parser.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: automatic)")
    parser.add_argument("--stop-signal", default=None, choices=("USR1", "USR2", "TERM", "HUP"),
                        help="the signal that means: snapshot, exit 75, resume me later "
                             "(default: system.stop_signal, USR1)")
    parser.add_argument("--requeue", action="store_true",
                        help="after that signal, requeue the SLURM job (system.requeue)")
    parser.add_argument("--config-dir", default=str(CONFIG_DIR), type=Path,
                        help="folder of the <cfg_file>.json files")
    return parser.parse_args(argv)


def data_only(args, system_config, db_config: dict, rank: int, world: int, device,
              log: Callable[[str], None]) -> int:
    """--dry-run N: N batches through the prefetch path and its figures; no model, no files."""
    dataset = lookup(datasets, system_config.dataset, "dataset")
    sample = lookup(data_sampling_func, system_config.sampling_function, "sampling function")
    make_db = functools.partial(dataset, db_config, split=system_config.train_split,
                                sys_config=system_config)
    where = torch.device(device) if device else default_device()
    log(dry_run(system_config, make_db, sample, deal(system_config, rank, world), args.workers,
                args.dry_run, device=where).report())
    return 0


def build(args, system_config, db_config: dict, rank: int, world: int, device,
          distributed: bool, log: Callable[[str], None]) -> SimpleNamespace:
    """This rank's share of the batch, its network (resumed or pretrained), the data sources
    and one batch built here, which sizes the shared ring and surfaces data errors before
    forking."""
    dataset = lookup(datasets, system_config.dataset, "dataset")
    make_db = functools.partial(dataset, db_config, sys_config=system_config)
    if rank == 0:  # an unwritable or full cache is found now, not at the first snapshot
        probe_writable(system_config.snapshot_dir, "system.cache_dir")
        if system_config.eval_iter:  # nor a missing evaluator at the first evaluation
            require_backend("faster")
            probe_writable(system_config.result_dir, "system.result_dir")
        for path in remove_stale_temp_files(system_config.snapshot_dir):
            log(f"removed {path.name}, left by an interrupted snapshot write")
    training_db = make_db(split=system_config.train_split)
    share = deal(system_config, rank, world)
    torch.manual_seed(system_config.seed)
    nnet = NetworkFactory(system_config, training_db, device=device, distributed=distributed,
                          share=share)
    if rank == 0:
        params = sum(p.numel() for p in nnet.model.parameters())
        check_free_disk(system_config.snapshot_dir, 2 * snapshot_bytes(params, True))
    log("system config:\n" + pprint.pformat(system_config.full))
    log("db config:\n" + pprint.pformat(training_db.configs))
    log(f"training images: {len(training_db.db_inds)}, device: {nnet.device}, "
        f"processes: {world}, global batch {share.batch_size} in chunks {list(share.sizes)}, "
        f"rank 0 runs {share.mine}")
    if share.note:
        log(f"note: {share.note}")
    if nnet.frozen:
        log(f"frozen: {len(nnet.frozen)} parameter tensors under {system_config.freeze}")
    start = int(args.start_iter) if args.start_iter != "latest" else dist_utils.from_rank0(
        snapshots.latest(system_config, log) if rank == 0 else None, distributed)
    resumed = {}
    if start:
        resumed = nnet.load_params(start)
        before = resumed.get("data", {}).get("chunks", list(share.sizes))
        if before != list(share.sizes):
            log(f"note: snapshot {start} was trained with the chunks {before}, this run uses "
                f"{list(share.sizes)}: the data and the objective after it differ from an "
                f"uninterrupted run")
        log(f"continuing from snapshot {start}")
    elif system_config.pretrain and not args.initialize:
        nnet.load_pretrained_params(system_config.resolve(system_config.pretrain))
    if rank == 0:
        snapshots.drop_later_best(system_config.snapshot_file("best"), start, log)
    sample = lookup(data_sampling_func, system_config.sampling_function, "sampling function")
    training_db.set_rng(np.random.default_rng(system_config.seed))
    probe, _ = (None, None) if args.initialize else \
        sample(rank_config(system_config, share), training_db, 0, data_aug=True)
    return SimpleNamespace(
        nnet=nnet, share=share, start=start, sample=sample, probe=probe,
        make_train_db=functools.partial(make_db, split=system_config.train_split),
        make_val_db=functools.partial(make_db, split=system_config.val_split),
        best=snapshots.Best(system_config.snapshot_file("best"), resumed.get("best")),
        counts=resumed.get("counts", {}), elapsed=resumed.get("time", 0.0))


def train(args, system_config, db_config: dict, rank: int, world: int, device,
          distributed: bool, watch=None) -> int:
    """Build everything for this rank and run the loop; returns the exit status."""
    log = functools.partial(tqdm.write, file=sys.stdout) if rank == 0 else (lambda *a, **k: None)
    if args.dry_run:
        return data_only(args, system_config, db_config, rank, world, device, log)
    stop = preempt.stop_request(args, system_config)
    job = build(args, system_config, db_config, rank, world, device, distributed, log)
    nnet, share, start, best = job.nnet, job.share, job.start, job.best

    def state(iteration: int) -> dict:
        return {"best": best.record, "time": speed.elapsed(),
                "counts": {**counts.values(), "skipped_steps": step.skipped},
                "data": {"next_batch": iteration, "world_size": world,
                         "batch_size": system_config.batch_size, "chunks": list(share.sizes)}}

    step = TrainStep(nnet, system_config.nonfinite_loss, log, job.counts.get("skipped_steps", 0))
    speed, counts = Throughput(job.elapsed), DataCounts(log, job.counts)
    if args.initialize:
        if rank == 0:
            log(f"initial parameters written to {nnet.save_params(0, state(0))}")
        return 0
    saver = snapshots.Saver(nnet, system_config, rank, distributed, state, log)
    clock = preempt.SnapshotClock(system_config.snapshot_minutes)
    evaluate = Evaluator(system_config, job.make_val_db, rank, world, distributed)
    # A rank that stopped inside a wait would leave the others in a collective: under DDP the
    # ranks stop together, at the end of an iteration, through `agree`.
    wait_stop = (lambda: False) if distributed else stop
    every = {"display": system_config.display, "val": system_config.val_iter}
    common = {"share": share, "device": nnet.device, "sample": job.sample,
              "system_config": system_config, "probe": job.probe}
    iteration = start
    with contextlib.ExitStack() as stack:
        with preempt.held_back(stop.resume_signal):  # SLURM signals the workers too
            train_data = stack.enter_context(Prefetcher(
                job.make_train_db, workers=args.workers, data_aug=True, stream="train",
                start=start, **common))
            val_data = stack.enter_context(Prefetcher(
                job.make_val_db, workers=1, data_aug=False, stream="val",
                start=start // every["val"], **common)) if every["val"] else None
        bar = stack.enter_context(tqdm(range(start + 1, system_config.max_iter + 1),
                                       disable=rank != 0, dynamic_ncols=True, file=sys.stdout))
        metrics = open_metrics(system_config.snapshot_dir, start, bar, log, rank == 0)
        stack.callback(metrics.close)
        nnet.train_mode()
        try:
            for it in bar:
                lr = learning_rate_at(it, system_config)
                nnet.set_lr(lr)
                t0 = time.perf_counter()
                batch, meta = train_data.get(wait_stop)
                speed.add(share.batch_size, time.perf_counter() - t0)
                counts.add(meta)
                result = step(batch, it)
                iteration = it
                if result is not None and due(it, every["display"]):
                    metrics.put(**training_values(*result, lr, nnet.grad_norm, nnet.device, speed,
                                                  counts, step.skipped))
                    log(display_line(it, metrics.pending))
                if val_data is not None and due(it, every["val"]):
                    metrics.put(val_loss=validate(nnet, val_data, wait_stop))
                    log(f"iteration {it}: validation loss {metrics.pending['val_loss']:.5f}")
                if evaluate.due(it):
                    found = evaluate(nnet, it)
                    if found is not None:
                        metrics.put(**{k: found[k] for k in EVAL_KEYS})
                        saver.evaluated(it, found["AP"], best)
                metrics.write(it)
                # one all-reduce: stop?, by the resume signal?, a snapshot by the clock?
                stopping, stop.resume, timed = agree_all(
                    [stop(), stop.resuming, clock.due()], distributed, nnet.device)
                if saver.due(it) or (timed and not stopping):
                    saver.save(it)
                    clock.saved()
                if stopping:
                    raise Stopped()
        except Stopped:
            metrics.write(iteration)  # what a stop inside the iteration left unwritten
            bar.close()
            if iteration > start:  # every rank is here: they stopped together through agree
                saver.save(iteration)
                log(f"stopped by signal after iteration {iteration}; snapshot "
                    f"{system_config.snapshot_file(iteration)}")
            return stop.exit_status
        finally:
            if watch is not None:
                watch.close()
    log(f"done: {system_config.max_iter} iterations, waiting for data "
        f"{speed.overall_wait():.1%} of the time" +
        (f", {step.skipped} non-finite steps skipped" if step.skipped else ""))
    return 0


def describe(err: BaseException) -> tuple[int, str]:
    """(exit status, message) for an error that ended a training process.

    A user's mistake is one line (status 2); a failure at run time names the exception, and
    where it is not self-explanatory the traceback follows (status 1).
    """
    if isinstance(err, (ConfigError, DatasetError, FileNotFoundError, ImageReadError,
                        MissingEvaluator)):
        return 2, str(err)
    if isinstance(err, StorageError):  # a full disk mid-run is a failure; the rest is set-up
        return (1 if isinstance(err, DiskFull) else 2), str(err)
    if isinstance(err, NonFiniteLoss) and hasattr(err, "skipped"):
        bad, recent = err.skipped
        return 1, (f"iteration {err.iteration}: {bad} of the last {recent} steps had a non-finite "
                   f"loss ({err}); the run is diverging, stopping. Lower system.learning_rate "
                   f"or resume from an earlier snapshot.")
    if isinstance(err, NonFiniteLoss):
        return 1, (f"iteration {getattr(err, 'iteration', '?')}: the loss is not finite ({err}); "
                   f"stopping. Lower system.learning_rate, check the data, or set "
                   f"system.nonfinite_loss to \"skip\".")
    if isinstance(err, WorkerError):
        return 1, f"training stopped: {err}"
    trace = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    if isinstance(err, dist.DistError):
        return 1, (f"lost contact with another process of the run (it failed or was killed): "
                   f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}\n"
                   f"{trace}")
    return 1, f"{type(err).__name__}: {err}\n{trace}"


def run(local_rank: int, procs: int, args, say: Callable[[str], None] | None = None) -> int:
    """One training process: join the group if distributed, train, report a failure.

    `say` receives the failure report (the launcher shows one report for the whole run);
    without it the report is printed.
    """
    say = say or functools.partial(tqdm.write, file=sys.stderr)  # below the bar, not on it
    rank, world, distributed, watch = 0, 1, args.distributed, None
    try:
        system_config, db_config = load_config(args.cfg_file, args.config_dir)
        device = args.device
        if distributed:
            rank, world, local_rank, url = cluster.placement(args, local_rank, procs)
            device = dist_utils.init(args.dist_backend, url, world, rank, local_rank)
            watch = dist_utils.watch_peers(url, rank, world, say)
        status = train(args, system_config, db_config, rank, world, device, distributed, watch)
        return preempt.requeue(status, args, system_config, rank, functools.partial(
            print, flush=True))
    except KeyboardInterrupt:  # a second Ctrl-C: stop now, quietly
        return 128 + signal.SIGINT
    except Exception as err:  # noqa: BLE001 - every failure becomes one report
        status, text = describe(err)
        if os.environ.get("CORNERNET_DEBUG") and "Traceback" not in text:
            text += "\n" + "".join(traceback.format_exception(type(err), err, err.__traceback__))
        cause = watch.posted() if watch is not None and isinstance(err, dist.DistError) else ""
        if cause:  # a peer failed first and said why: that is the story, not the broken pipe
            text = f"stopping because {cause}"
        say(f"error: rank {rank}: {text}" if distributed else f"error: {text}")
        if watch is not None:
            watch.report(text)
        return status
    finally:
        if watch is not None:
            watch.close()
        dist_utils.cleanup()


def preflight(args, procs: int, data: bool = True) -> None:
    """Find mistakes before any process starts: the settings, the deal of the batch to every
    process, what the device can run, sizes the model cannot take, /dev/shm for the prefetch
    rings of this node and (with `data`) the training split."""
    system_config, db_config = load_config(args.cfg_file, args.config_dir)
    world = max(args.world_size, 1) * procs
    shares = [deal(system_config, rank, world) for rank in range(world)]
    check_runtime(system_config, torch.device(args.device) if args.device else default_device())
    check_model_fit(system_config.model or system_config.snapshot_name, db_config)
    node = shares[args.rank * procs:(args.rank + 1) * procs]
    check_shm(shm_need(system_config, db_config, args.workers,
                       batch_size=sum(share.local_batch for share in node)))
    if data:
        dataset = lookup(datasets, system_config.dataset, "dataset")
        dataset(db_config, split=system_config.train_split, sys_config=system_config)


def main(argv: list[str] | None = None) -> int:
    preempt.catch_early()
    args = parse_args(argv)
    if dist_utils.launched_by_torchrun():
        args.distributed = True  # torchrun's processes are one run, never independent copies
        return run(0, 1, args)
    try:
        if args.distributed and cluster.in_job_step():  # srun started this process as a rank
            cluster.adopt(args, cluster.slurm_task())
            preflight(args, 1, data=args.rank == 0)
            return run(0, 1, args)
        if not args.distributed:  # the run itself reads the data next, in one line on error
            preflight(args, 1, data=False)
            return run(0, 1, args)
        if args.world_size < 1:
            raise ConfigError("--distributed needs --world-size (the number of nodes)")
        procs = dist_utils.procs_per_node(args.procs_per_node)
        if args.dist_url is None:
            if args.world_size > 1:
                raise ConfigError("--dist-url tcp://<node 0>:<port> is needed with more than "
                                  "one node")
            args.dist_url = f"tcp://127.0.0.1:{dist_utils.free_port()}"
        preflight(args, procs)
    except (ConfigError, DatasetError, StorageError) as err:
        if os.environ.get("SLURM_PROCID", "0") != "0" and cluster.in_job_step():
            return 2  # every task finds the same mistake: task 0 says it
        print(f"error: {err}", file=sys.stderr)
        if os.environ.get("CORNERNET_DEBUG"):
            traceback.print_exc()
        return 2
    return launch.spawn(run, procs, args, first_rank=args.rank * procs)


if __name__ == "__main__":
    sys.exit(main())
