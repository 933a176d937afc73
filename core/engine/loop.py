"""The training loop of one rank: one screen of plain `if`s over the run's parts (`run.Run`).

`cornernet train` (and train.py) hand `train` to `launch.launch`, which calls it in this process,
in spawned processes or under torchrun / srun, once per rank.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from typing import TYPE_CHECKING

from tqdm import tqdm

from ..errors import Stopped
from .build import build, data_only
from .metrics import Progress, display_line, progress_bar
from .schedule import due, learning_rate_at

if TYPE_CHECKING:
    import torch

    from ..config import SystemConfig
    from ..utils.peers import PeerWatch
    from .run import Run


def train(args: argparse.Namespace, system_config: SystemConfig, db_config: dict, rank: int,
          world: int, device: torch.device | str | None, distributed: bool,
          watch: PeerWatch | None = None, outcome: dict | None = None) -> int:
    """Build everything for this rank and run the loop; returns the exit status.

    `outcome` (the API's, in this process) receives what the run produced as it goes:
    "evaluations" (the metrics of each evaluation, with its "iteration"), and at the end "best"
    (the best record: {"iteration", "AP"} or None) and "iteration" (the last one done)."""
    log = functools.partial(tqdm.write, file=sys.stdout) if rank == 0 else (lambda *a, **k: None)
    if args.dry_run is not None:
        return data_only(args, system_config, db_config, rank, world, device, log)
    run = build(args, system_config, db_config, rank, world, device, distributed, log)
    if args.initialize:
        return run.write_initial()
    nnet, config = run.nnet, system_config
    with contextlib.ExitStack() as stack:
        evaluations = _told(outcome, run, stack)
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
                # the step: queued on the device, no host sync (a non-finite loss is skipped
                # there, and read with the next display, validation, evaluation or snapshot)
                result = run.step(run.take(train_data), it)
                run.iteration = it
                # host sync on display iterations: the steps since the last read (skipped
                # ones said), the loss and the gradient norm; nothing shown for a skipped step
                if due(it, config.display) and run.step.settle(it):
                    metrics.put(**run.display_values(result, lr))
                    log(display_line(it, metrics.pending) + progress.note(it))
                if val_data is not None and due(it, config.val_iter):
                    metrics.put(val_loss=run.validated(val_data, it))  # host sync
                    log(f"iteration {it}: validation loss {metrics.pending['val_loss']:.5f}")
                if run.evaluate.due(it):
                    metrics.put(**(found := run.evaluated(it)))
                    evaluations.append({"iteration": it, **found})
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


def _told(outcome: dict | None, run: Run, stack: contextlib.ExitStack) -> list[dict]:
    """The list the loop appends each evaluation to (`outcome["evaluations"]`, or a list nobody
    reads); when the run ends, its best record and last iteration are added to `outcome`."""
    if outcome is None:
        return []
    stack.callback(lambda: outcome.update(best=run.best.record, iteration=run.iteration))
    return outcome.setdefault("evaluations", [])
