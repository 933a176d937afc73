"""Stop requests: a signal asks the training loop to stop at the end of an iteration.

The resume signal (system.stop_signal, SIGUSR1 by default: what `#SBATCH --signal=USR1@<s>`
sends before a time limit) stops the same way but exits with RESUME_STATUS, which says "the run
is not finished: continue it with --iter latest".
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist

# EX_TEMPFAIL of sysexits.h: "a temporary failure; the user is invited to retry".
RESUME_STATUS = 75


class StopRequest:
    """SIGTERM, SIGHUP, a first Ctrl-C or `resume_signal` asks the loop to stop after the current
    iteration; a second Ctrl-C raises KeyboardInterrupt at once (the caller exits quietly), except
    inside `finishing()`: the stop snapshot's write is not cut short by the Ctrl-C that asks to
    hurry.
    """

    def __init__(self, resume_signal: int | None = None) -> None:
        self.signum = 0
        self._finishing = False
        self.resume_signal = resume_signal
        self.resume = False  # set by `agreed`: some rank got the resume signal
        for signum in {signal.SIGTERM, signal.SIGHUP, signal.SIGINT, resume_signal} - {None}:
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum == signal.SIGINT and signum == signal.SIGINT and not self._finishing:
            raise KeyboardInterrupt
        self.signum = signum

    @contextlib.contextmanager
    def finishing(self) -> Iterator[None]:
        """A block that a second Ctrl-C does not interrupt (the process ends right after)."""
        self._finishing = True
        try:
            yield
        finally:
            self._finishing = False

    def __call__(self) -> bool:
        return self.signum != 0

    @property
    def resuming(self) -> bool:
        """This rank got the resume signal."""
        return self.resume_signal is not None and self.signum == self.resume_signal

    @property
    def exit_status(self) -> int:
        """RESUME_STATUS after the resume signal (on any rank), else 128 + the signal, as a
        shell reports a process ended by it."""
        if self.resume or self.resuming:
            return RESUME_STATUS
        return 128 + (self.signum or signal.SIGTERM)


def agree_all(flags: Sequence[bool], distributed: bool, device: torch.device) -> list[bool]:
    """Each flag true on every rank when it is true on any, in one all-reduce: ranks must stop
    and snapshot at the same iteration."""
    if not distributed:
        return list(flags)
    value = torch.tensor([int(flag) for flag in flags], device=device)  # nccl: CUDA tensors only
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return [bool(v) for v in value.tolist()]

