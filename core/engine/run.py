"""One rank's training run: the parts the loop works with, each owning its state.

Like detectron2's checkpointables, every stateful part of the loop has `state_dict()` /
`load_state_dict()`: the network (`NetworkFactory`), the best-AP record (`snapshots.Best`), the
data counts (`DataCounts`), the skipped steps (`TrainStep`), the data position
(`DataPosition`) and the throughput clock (`Throughput`). `Run.state_dict()` composes the loop's
parts in the layout every snapshot has had since the first format: "best", "time", "counts"
(the data counts and the skipped steps in one record) and "data"; `Run.load_state_dict` hands
each part its own piece back. `Run` also owns the snapshot writer (`Saver`), the stop request
and its snapshot clock, the stopping rules, and the opening of the data streams.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..data.prefetch import Prefetcher
from . import preempt
from .agree import agree_all
from .curves import write_run_report
from .limits import Limits
from .metrics import EVAL_KEYS, Metrics, open_metrics, training_values
from .snapshots import Best, Saver, scored_note
from .steps import validate
from .stop import held_back
from .trackers import open_trackers, wanted

if TYPE_CHECKING:
    from ..config import SystemConfig
    from ..data.chunks import Deal
    from ..nnet.py_factory import NetworkFactory
    from .evaluation import Evaluator
    from .metrics import DataCounts, Throughput
    from .steps import TrainStep
    from .stop import StopRequest

Log = Callable[[str], None]


class DataPosition:
    """Where the training stream stands: the number of the next batch, and the batch this run
    deals (world size, global batch size, chunks). Its state is {"next_batch", "world_size",
    "batch_size", "chunks"}; loading takes the position only (the dealing is this run's) and
    says when the snapshot's chunks differ, since the data and the objective then differ from
    an uninterrupted run's."""

    def __init__(self, share: Deal, world: int, batch_size: int, log: Log,
                 next_batch: int = 0) -> None:
        self.share, self.world, self.batch_size, self.log = share, world, batch_size, log
        self.next_batch = next_batch

    def taken(self) -> None:
        """A batch was taken from the stream."""
        self.next_batch += 1

    def state_dict(self) -> dict:
        return {"next_batch": self.next_batch, "world_size": self.world,
                "batch_size": self.batch_size, "chunks": list(self.share.sizes)}

    def load_state_dict(self, state: dict) -> None:
        self.next_batch = int(state.get("next_batch", self.next_batch))
        before = state.get("chunks", list(self.share.sizes))
        if before != list(self.share.sizes):
            self.log(f"note: snapshot {self.next_batch} was trained with the chunks {before}, "
                     f"this run uses {list(self.share.sizes)}: the data and the objective "
                     f"after it differ from an uninterrupted run")


@dataclass
class Run:
    """What the training loop of one rank works with.

    `start` is the iteration resumed from (0: a fresh start), `iteration` the last one done;
    `probe` is one batch of this rank's share (None with --initialize), whose shapes size the
    prefetch ring.
    """

    system_config: SystemConfig
    nnet: NetworkFactory
    share: Deal
    rank: int
    distributed: bool
    start: int
    workers: int
    sample: Callable
    probe: dict | None
    make_train_db: Callable[[], Any]
    make_val_db: Callable[[], Any]
    best: Best
    evaluate: Evaluator
    step: TrainStep
    counts: DataCounts
    speed: Throughput
    position: DataPosition
    stop: StopRequest
    log: Log
    shared_images: int = 0  # validation images that are training images too (AP is inflated)
    iteration: int = field(init=False)
    saver: Saver = field(init=False)
    limits: Limits | None = field(init=False, default=None)
    clock: preempt.SnapshotClock | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.iteration = self.start
        self.saver = Saver(self.nnet, self, self.best, self.system_config, self.rank,
                           self.distributed, self.log, scored_note(self.shared_images))

    # ------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """The loop's state a snapshot stores beside the network's, in the snapshot layout."""
        return {"best": self.best.state_dict()["record"],
                "time": self.speed.state_dict()["elapsed"],
                "counts": {**self.counts.state_dict(), **self.step.state_dict()},
                "data": self.position.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Each part takes its piece of a snapshot back (a piece it lacks: a fresh part's)."""
        self.best.load_state_dict({"record": state.get("best")})
        self.speed.load_state_dict({"elapsed": state.get("time", 0.0)})
        self.counts.load_state_dict(state.get("counts", {}))
        self.step.load_state_dict(state.get("counts", {}))
        self.position.load_state_dict(state.get("data", {}))

    def write_initial(self) -> int:
        """--initialize: rank 0 writes the iteration-0 snapshot."""
        if self.rank == 0:
            self.log(f"initial parameters written to {self.saver.write(0)}")
        return 0

    # ---------------------------------------------------------------------- opening
    def open_data(self, stack: contextlib.ExitStack) -> tuple[Prefetcher, Prefetcher | None]:
        """The training and validation streams (None without system.val_iter), from where the
        run stands; the stopping rules and the snapshot clock start counting now."""
        config, every_val = self.system_config, self.system_config.val_iter
        common = {"share": self.share, "device": self.nnet.device, "sample": self.sample,
                  "probe": self.probe, "seed": config.seed, "prefetch_size": config.prefetch_size}
        with held_back(self.stop.resume_signal):  # SLURM signals the workers too
            train_data = stack.enter_context(Prefetcher(
                self.make_train_db, workers=self.workers, data_aug=True, stream="train",
                start=self.position.next_batch, **common))
            val_data = stack.enter_context(Prefetcher(
                self.make_val_db, workers=1, data_aug=False, stream="val",
                start=self.start // every_val, **common)) if every_val else None
        self.limits = Limits(config.patience, config.eval_iter, config.max_minutes)
        self.clock = preempt.SnapshotClock(config.snapshot_minutes)
        return train_data, val_data

    def open_metrics(self, stack: contextlib.ExitStack, bar: Any, db_config: dict) -> Metrics:
        """The metrics writers and experiment trackers (rank 0's), closed with `stack`, and on
        rank 0 the run's report at the end, also of a stopped run."""
        folder, mine = self.system_config.snapshot_dir, self.rank == 0
        metrics = open_metrics(folder, self.start, bar, self.log, mine, open_trackers(
            self.system_config.full, db_config, folder, self.start, self.log, enabled=mine),
            tensorboard="tensorboard" in wanted(self.system_config.full),
            events=self.system_config.tensorboard)
        stack.callback(metrics.close)
        if mine and self.system_config.run_report:
            stack.callback(lambda: metrics.artifacts(
                write_run_report(folder, self.evaluate.last_results, self.log)))
        return metrics

    # ------------------------------------------------------------------------- the loop
    def wait_stop(self) -> bool:
        """Whether a wait for data ends in a stop. Under DDP the ranks stop together, at the
        end of an iteration (`agree`): a rank stopped inside a wait would leave the others in
        a collective. The first iteration is never cut short: a stop asked during start-up
        ends with a snapshot, not with nothing."""
        return not self.distributed and self.iteration > self.start and self.stop()

    def take(self, data: Prefetcher) -> dict:
        """The next training batch; the wait for it is timed and its data counts added."""
        t0 = time.perf_counter()
        batch, meta = data.get(self.wait_stop)
        self.speed.add(self.share.batch_size, time.perf_counter() - t0)
        self.counts.add(meta)
        self.position.taken()
        return batch

    def display_values(self, result: tuple, lr: float) -> dict:
        """The metrics of a display iteration (reads the loss and gradient norm: a host sync)."""
        return training_values(*result, lr, self.nnet.grad_norm, self.nnet.device, self.speed,
                               self.counts, self.step.skipped)

    def validated(self, data: Prefetcher, iteration: int) -> float:
        """The validation loss of the next batch, once the steps so far are read."""
        self.step.settle(iteration)
        return validate(self.nnet, data, self.wait_stop)

    def evaluated(self, iteration: int) -> dict:
        """Evaluate now (the steps so far read first); on rank 0 the best record and snapshot
        follow, and the metrics of it are returned ({} on the other ranks)."""
        self.step.settle(iteration)
        found = self.evaluate(self.nnet, iteration)
        if found is None:
            return {}
        self.saver.evaluated(iteration, found["AP"])
        return {**{k: found[k] for k in EVAL_KEYS}, **self.best.values(),
                "eval_weights": self.evaluate.weights}

    def agree(self, iteration: int) -> list[bool]:
        """(stop, a snapshot by the clock, patience spent, the deadline near), the same on
        every rank: one all-reduce. Some rank's resume signal sets `stop.resume`."""
        evaluated = self.evaluate.due(iteration)
        stopping, self.stop.resume, timed, patience, deadline = agree_all(
            [self.stop(), self.stop.resuming, self.clock.due(),
             self.limits.patience_spent(iteration, evaluated, self.best.record),
             self.limits.deadline_near(evaluated, self.evaluate.due(iteration + 1))],
            self.distributed, self.nnet.device)
        return [stopping, timed, patience, deadline]

    def save(self, iteration: int) -> None:
        """A snapshot of `iteration`, once its steps are read: never one of a run that the
        non-finite-loss policy stops."""
        self.step.settle(iteration)
        self.saver.save(iteration)
        self.clock.saved()

    def limited(self, iteration: int, patience: bool) -> int:
        """Say why a stopping rule ended the run; its exit status."""
        line, status = self.limits.reason(iteration, patience, self.best.record)
        self.log(f"{line}; snapshot {self.system_config.snapshot_file(iteration)}")
        return status

    def stopped(self) -> int:
        """After a stop request: the snapshot of the last iteration done (every rank is here:
        they stopped together), said; the exit status."""
        if self.iteration > self.start:
            self.step.settle(self.iteration)
            with self.stop.finishing():
                self.saver.save(self.iteration)
            self.log(f"stopped by signal after iteration {self.iteration}; snapshot "
                     f"{self.system_config.snapshot_file(self.iteration)}")
        return self.stop.exit_status

    def summary(self) -> str:
        """The last line of a run that ran to its end (its last steps read first)."""
        self.step.settle(self.iteration)
        skipped, best = self.step.skipped, self.best.record
        return (f"done: {self.system_config.max_iter} iterations, waiting for data "
                f"{self.speed.overall_wait():.1%} of the time"
                + (f", {skipped} non-finite steps skipped" if skipped else "")
                + (f"; best AP {best['AP']:.4f} at iteration {best['iteration']}"
                   f"{self.saver.scored}" if best is not None else ""))
