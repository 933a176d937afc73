#!/usr/bin/env python
"""Train a corner detector: python train.py <Cfg> [--iter N] [--workers W] [--initialize] ...

Iterations start+1 .. max_iter; the learning rate is a pure function of the iteration; rank 0
writes snapshots cache/nnet/<Cfg>/<Cfg>_<iter>.pkl from which `--iter N` continues exactly.
"""

from __future__ import annotations

from core.engine.stop import catch_early
from core.utils.threads import before_torch

# First, before the heavy imports below (seconds of torch and cv2): from here on a stop or resume
# signal is remembered, and the run stops after its first iteration with a snapshot. (Imported,
# train.py changes no handler: `launch` catches them then.) OpenMP's threads will sleep while
# they wait (core/utils/threads.py).
if __name__ == "__main__":
    catch_early()
    before_torch()

import argparse
import contextlib
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from core.config import CONFIG_DIR, SystemConfig, add_set_arg
from core.engine.build import build, data_only
from core.engine.launch import launch
from core.engine.metrics import Progress, display_line, progress_bar
from core.engine.schedule import due, learning_rate_at
from core.engine.steps import validate
from core.errors import Stopped
from core.utils.peers import PeerWatch

if TYPE_CHECKING:
    import torch


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
          world: int, device: torch.device | str | None, distributed: bool,
          watch: PeerWatch | None = None) -> int:
    """Build everything for this rank and run the loop; returns the exit status."""
    log = functools.partial(tqdm.write, file=sys.stdout) if rank == 0 else (lambda *a, **k: None)
    if args.dry_run is not None:
        return data_only(args, system_config, db_config, rank, world, device, log)
    run = build(args, system_config, db_config, rank, world, device, distributed, log)
    if args.initialize:
        return run.write_initial()
    nnet, config = run.nnet, system_config
    with contextlib.ExitStack() as stack:
        train_data, val_data = run.open_data(stack)
        bar = stack.enter_context(progress_bar(range(run.start + 1, config.max_iter + 1),
                                               rank == 0))
        progress = Progress(run.start, config.max_iter, not bar.disable)
        metrics = run.open_metrics(stack, bar, db_config)
        if watch is not None:
            stack.callback(watch.close)
        nnet.train_mode()
        try:
            for it in bar:
                nnet.set_lr(lr := learning_rate_at(it, config))
                # the step: one host sync inside (is the loss finite?); None: a skipped step
                result = run.step(run.take(train_data), it)
                run.iteration = it
                # host sync on display iterations: the loss and the gradient norm are read
                if result is not None and due(it, config.display):
                    metrics.put(**run.display_values(result, lr))
                    log(display_line(it, metrics.pending) + progress.note(it))
                if val_data is not None and due(it, config.val_iter):
                    metrics.put(val_loss=validate(nnet, val_data, run.wait_stop))  # host sync
                    log(f"iteration {it}: validation loss {metrics.pending['val_loss']:.5f}")
                if run.evaluate.due(it):
                    metrics.put(**run.evaluated(it))
                metrics.write(it)
                # host sync every iteration: one all-reduce of the stop request, the resume
                # signal, the snapshot clock and the stopping rules (patience, deadline)
                stopping, timed, patience, deadline = run.agree(it)
                if stopping:  # its snapshot is written below, once
                    raise Stopped(run.stop.signum)
                if run.saver.due(it) or timed or patience or deadline:
                    run.save(it)
                if (patience or deadline) and it < config.max_iter:
                    return run.limited(it, patience)
        except Stopped:
            metrics.write(run.iteration)  # what a stop inside the iteration left unwritten
            bar.close()
            return run.stopped()
    log(run.summary())
    return 0


def main(argv: list[str] | None = None) -> int:
    return launch(parse_args(argv), train, log=print)


if __name__ == "__main__":
    sys.exit(main())
