#!/usr/bin/env python
"""Train a corner detector: python train.py <Cfg> [--iter N] [--workers W] [--initialize] ...

Iterations start+1 .. max_iter; the learning rate is a pure function of the iteration; rank 0
writes snapshots cache/nnet/<Cfg>/<Cfg>_<iter>.pkl from which `--iter N` continues exactly.
"""

from __future__ import annotations

from core.engine.stop import catch_early

# First, before the heavy imports below (seconds of torch and cv2): from here on a stop or resume
# signal is remembered, and the run stops after its first iteration with a snapshot. (Imported,
# train.py changes no handler: `launch` catches them then.)
if __name__ == "__main__":
    catch_early()

import argparse
import contextlib
import functools
import sys
import time
from pathlib import Path

from tqdm import tqdm

from core.config import CONFIG_DIR, SystemConfig, add_set_arg
from core.data.check import save_batch_picture
from core.data.prefetch import Prefetcher
from core.engine import preempt
from core.engine.agree import agree_all
from core.engine.build import build, data_only
from core.engine.curves import write_run_report
from core.engine.launch import launch
from core.engine.limits import Limits
from core.engine.metrics import EVAL_KEYS, display_line, open_metrics, training_values
from core.engine.schedule import due, learning_rate_at
from core.engine.snapshots import Saver
from core.engine.steps import validate
from core.engine.stop import held_back, stop_request
from core.engine.trackers import open_trackers
from core.errors import Stopped
from core.utils.peers import PeerWatch


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
    parser.add_argument("--dry-run", default=None, type=int, metavar="N",
                        help="only take N batches through the data path, print its figures "
                             "(images/s, bytes per image, reading/augmenting/queueing) and exit")
    parser.add_argument("--device", default=None,
                        help="cuda, cuda:1 or cpu (default: the current GPU, else cpu); under "
                             "--distributed only cuda or cpu: rank r takes cuda:<local rank r>")
    parser.add_argument("--stop-signal", default=None, choices=("USR1", "USR2", "TERM", "HUP"),
                        help="the signal that means: snapshot, exit 75, resume me later "
                             "(default: system.stop_signal, USR1)")
    parser.add_argument("--requeue", action="store_true",
                        help="after that signal, requeue the SLURM job (system.requeue)")
    parser.add_argument("--config-dir", default=str(CONFIG_DIR), type=Path,
                        help="folder of the <cfg_file>.json files")
    add_set_arg(parser)
    return parser.parse_args(argv)


def train(args: argparse.Namespace, system_config: SystemConfig, db_config: dict, rank: int,
          world: int, device, distributed: bool, watch: PeerWatch | None = None) -> int:
    """Build everything for this rank and run the loop; returns the exit status."""
    log = functools.partial(tqdm.write, file=sys.stdout) if rank == 0 else (lambda *a, **k: None)
    if args.dry_run is not None:
        return data_only(args, system_config, db_config, rank, world, device, log)
    stop = stop_request(args, system_config)
    job = build(args, system_config, db_config, rank, world, device, distributed, log)
    nnet, share, start, step, counts = job.nnet, job.share, job.start, job.step, job.counts
    if args.initialize:
        if rank == 0:
            log(f"initial parameters written to {nnet.save_params(0, job.state(0))}")
        return 0
    saver = Saver(nnet, system_config, rank, distributed, job.state, log)
    if rank == 0 and start == 0 and system_config.batch_pictures:
        picture = system_config.snapshot_dir / "train_batch0.jpg"
        save_batch_picture(job.sample, job.make_train_db(), picture)
        log(f"wrote {picture}: what the network is shown (system.batch_pictures)")
    evaluate = job.evaluate
    limits = Limits(system_config.patience, system_config.eval_iter, system_config.max_minutes)
    speed, clock = job.speed, preempt.SnapshotClock(system_config.snapshot_minutes)
    # A rank that stopped inside a wait would leave the others in a collective: under DDP the
    # ranks stop together, at the end of an iteration, through `agree_all`. The first iteration
    # is never cut short: a stop asked during start-up ends with a snapshot, not with nothing.
    wait_stop = (lambda: False) if distributed else (lambda: iteration > start and stop())
    every = {"display": system_config.display, "val": system_config.val_iter}
    common = {"share": share, "device": nnet.device, "sample": job.sample, "probe": job.probe,
              "seed": system_config.seed, "prefetch_size": system_config.prefetch_size}
    iteration = start
    with contextlib.ExitStack() as stack:
        with held_back(stop.resume_signal):  # SLURM signals the workers too
            train_data = stack.enter_context(Prefetcher(
                job.make_train_db, workers=args.workers, data_aug=True, stream="train",
                start=start, **common))
            val_data = stack.enter_context(Prefetcher(
                job.make_val_db, workers=1, data_aug=False, stream="val",
                start=start // every["val"], **common)) if every["val"] else None
        bar = stack.enter_context(tqdm(range(start + 1, system_config.max_iter + 1),
                                       disable=rank != 0, dynamic_ncols=True, file=sys.stdout))
        folder = system_config.snapshot_dir
        metrics = open_metrics(folder, start, bar, log, rank == 0, open_trackers(
            system_config.full, db_config, folder, start, log, enabled=rank == 0))
        stack.callback(metrics.close)
        if rank == 0:  # the report at the end, also of a stopped run: pictures, and to trackers
            stack.callback(lambda: metrics.artifacts(
                write_run_report(folder, evaluate.last_results, log)))
        if watch is not None:
            stack.callback(watch.close)
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
                        saver.evaluated(it, found["AP"], job.best)
                        metrics.put(**{k: found[k] for k in EVAL_KEYS}, **job.best.values(),
                                    eval_weights=nnet.evaluated_weights)
                metrics.write(it)
                # one all-reduce: stop?, by the resume signal?, a snapshot by the clock?, and
                # the stopping rules: AP not improving, the deadline near
                stopping, stop.resume, timed, patience, deadline = agree_all(
                    [stop(), stop.resuming, clock.due(),
                     limits.patience_spent(it, evaluate.due(it), job.best.record),
                     limits.deadline_near(evaluate.due(it), evaluate.due(it + 1))],
                    distributed, nnet.device)
                if stopping:  # its snapshot is written below, once
                    raise Stopped(stop.signum)
                if saver.due(it) or timed or patience or deadline:
                    saver.save(it)
                    clock.saved()
                if (patience or deadline) and it < system_config.max_iter:
                    line, status = limits.reason(it, patience, job.best.record)
                    log(f"{line}; snapshot {system_config.snapshot_file(it)}")
                    return status
        except Stopped:
            metrics.write(iteration)  # what a stop inside the iteration left unwritten
            bar.close()
            if iteration > start:  # every rank is here: they stopped together through agree
                with stop.finishing():
                    saver.save(iteration)
                log(f"stopped by signal after iteration {iteration}; snapshot "
                    f"{system_config.snapshot_file(iteration)}")
            return stop.exit_status
    log(f"done: {system_config.max_iter} iterations, waiting for data "
        f"{speed.overall_wait():.1%} of the time" +
        (f", {step.skipped} non-finite steps skipped" if step.skipped else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    return launch(parse_args(argv), train)


if __name__ == "__main__":
    sys.exit(main())
