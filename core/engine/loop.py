"""The training loop of one rank: one screen of plain `if`s over the run's parts (`run.Run`).

`cornernet train` (and train.py) hand `train` to `launch.launch`, which calls it in this process,
in spawned processes or under torchrun / srun, once per rank.
"""

from __future__ import annotations

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
    from .options import TrainOptions


def train(options: TrainOptions, system_config: SystemConfig, db_config: dict, rank: int,
          world: int, device: torch.device | str | None, distributed: bool,
          watch: PeerWatch | None = None) -> int:
    """Build everything for this rank and run the loop; returns the exit status. What the run
    did is in the files rank 0 writes (snapshots, metrics.jsonl: core/engine/records.py reads
    them back)."""
    log = functools.partial(tqdm.write, file=sys.stdout) if rank == 0 else (lambda *a, **k: None)
    if options.dry_run is not None:
        return data_only(options, system_config, db_config, rank, world, device, log)
    run = build(options, system_config, db_config, rank, world, device, distributed, log)
    if options.initialize:
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

