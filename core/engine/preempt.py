"""Runs that outlive their jobs: the resume signal, SLURM's requeue, snapshots by wall time.

A cluster job ends at its time limit or when a higher-priority job preempts it. SLURM can send a
signal some seconds before (`#SBATCH --signal=USR1@<s>`): the loop then stops at the end of the
iteration on every rank together, writes a snapshot, and exits with RESUME_STATUS; with
`system.requeue` (or --requeue) rank 0 of a SLURM job then asks SLURM to requeue the job, whose
script continues with `--iter latest`. What a hard kill (no signal, a node failure) can lose is
bounded by `system.snapshot_minutes`: a snapshot whenever that much wall time has passed since
the last one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any, Callable

from ..errors import ConfigError
from .stop import RESUME_STATUS, StopRequest

# Signals that may be the resume signal, and those of them that came before the loop's
# StopRequest took over (see `catch_early`).
CANDIDATES = (signal.SIGUSR1, signal.SIGUSR2)
_early: set[int] = set()


def resume_signal(args: Any, system_config: Any) -> int:
    """The signal number of the resume signal: --stop-signal, else system.stop_signal."""
    name = (getattr(args, "stop_signal", None) or system_config.stop_signal).upper()
    try:
        return int(getattr(signal, "SIG" + name.removeprefix("SIG")))
    except (AttributeError, TypeError) as err:
        raise ConfigError(f"--stop-signal {name}: not a signal; use USR1, USR2, TERM or HUP"
                          ) from err


def catch_early() -> None:
    """Remember SIGUSR1/SIGUSR2 instead of dying of them until `stop_request` takes over: SLURM
    may send its signal while the run still starts (imports, data, the process group), and
    the default action of both is to end the process without a snapshot."""
    for signum in CANDIDATES:
        signal.signal(signum, lambda signum, frame: _early.add(signum))


def stop_request(args: Any, system_config: Any) -> StopRequest:
    """The loop's StopRequest, with the resume signal of --stop-signal / system.stop_signal;
    a resume signal caught early is a stop request already."""
    resume = resume_signal(args, system_config)
    stop = StopRequest(resume)
    for signum in set(CANDIDATES) - {resume}:
        signal.signal(signum, signal.SIG_DFL)
    if resume in _early:
        stop.signum = resume
    return stop


class SnapshotClock:
    """Whether `minutes` of wall time passed since the last snapshot of this rank.

    Each rank reads its own clock; the loop agrees the answer across ranks (one rank's yes is
    everyone's), so all ranks write the snapshot at the same iteration. None: never due.
    """

    def __init__(self, minutes: float | None, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.seconds = None if minutes is None else 60.0 * minutes
        self.clock = clock
        self.last = clock()

    def due(self) -> bool:
        return self.seconds is not None and self.clock() - self.last >= self.seconds

    def saved(self) -> None:
        """A snapshot was just written (by the clock, the period or a stop): count from now."""
        self.last = self.clock()


# JobStates of a job that is being ended: from the moment of a `scancel`, while its tasks still
# run, it is COMPLETING (CANCELLED once they are gone). A resume signal (`--signal`, `scancel
# --signal`, a preemption's warning) leaves it RUNNING.
ENDING = ("COMPLETING", "CANCELLED")


def job_state(job: str) -> str | None:
    """The JobState `scontrol show job` reports for `job`, or None when it cannot be asked."""
    try:
        done = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True,
                              text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    fields = dict(item.split("=", 1) for item in done.stdout.split() if "=" in item)
    return fields.get("JobState") if done.returncode == 0 else None


def requeue(status: int, args: Any, system_config: Any, rank: int,
            log: Callable[[str], None]) -> int:
    """After a stop by the resume signal, rank 0 of a SLURM job with requeue on runs `scontrol
    requeue $SLURM_JOB_ID`; SLURM ends this job and queues it again. A job being ended
    (`ENDING`: cancelled by `scancel`, whose SIGTERM is the resume signal under `stop_signal:
    "TERM"`) is never requeued: a cancel stays a cancel. Returns `status`."""
    wanted = getattr(args, "requeue", False) or system_config.requeue
    job = os.environ.get("SLURM_JOB_ID")
    if status != RESUME_STATUS or not wanted or rank != 0:
        return status
    if not job:
        log("note: requeue is on but this is not a SLURM job: resume it with --iter latest")
        return status
    state = job_state(job)
    if state in ENDING:  # scancel sends TERM, which may be the resume signal
        log(f"SLURM job {job} is {state} (cancelled by scancel, or its time is up): not "
            f"requeued; to continue, submit it again (--iter latest continues from this "
            f"snapshot)")
        return status
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        log(f"error: scontrol requeue {job} failed ({err}); resubmit the job with --iter latest")
        return status
    if done.returncode:
        log(f"error: scontrol requeue {job}: {done.stderr.strip() or done.returncode}; resubmit "
            f"the job with --iter latest (does the job allow requeue: #SBATCH --requeue?)")
    else:
        log(f"requeued SLURM job {job}: it continues from this snapshot with --iter latest")
    return status


@contextlib.contextmanager
def held_back(signum: int | None) -> Iterator[None]:
    """Block `signum` while the data processes start: the fork server started now, and every
    worker it forks later, inherit the block, so SLURM's signal to every process of the job
    step cannot kill them (only the trainer acts on it and stops them itself). The trainer
    receives a signal that came meanwhile as soon as the block is lifted."""
    if signum is None:
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signum})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
