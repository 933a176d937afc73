"""Runs that outlive their jobs: SLURM's requeue after the resume signal, snapshots by wall time.

A cluster job ends at its time limit or when a higher-priority job preempts it. SLURM can send a
signal some seconds before (`#SBATCH --signal=USR1@<s>`, caught by `core.engine.stop`): the loop
then stops at the end of the iteration on every rank together, writes a snapshot, and exits with
RESUME_STATUS; with `system.requeue` (or --requeue) rank 0 of a SLURM job then asks SLURM to
requeue the job, whose script continues with `--iter latest`. What a hard kill (no signal, a
node failure) can lose is bounded by `system.snapshot_minutes`: a snapshot whenever that much
wall time has passed since the last one.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from .stop import RESUME_STATUS


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
