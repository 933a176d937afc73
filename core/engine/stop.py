"""Stop requests: a signal asks the training loop to stop at the end of an iteration."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

import torch
import torch.distributed as dist


class StopRequest:
    """SIGTERM, SIGHUP or a first Ctrl-C asks the loop to stop after the current iteration; a
    second Ctrl-C raises KeyboardInterrupt at once (the caller exits quietly), except inside
    `finishing()`: the stop snapshot's write is not cut short by the Ctrl-C that asks to hurry.
    """

    def __init__(self) -> None:
        self.signum = 0
        self._finishing = False
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
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
    def exit_status(self) -> int:
        """128 + the signal, as a shell reports a process ended by it."""
        return 128 + (self.signum or signal.SIGTERM)


def agree(flag: bool, distributed: bool, device: torch.device) -> bool:
    """True on every rank when it is true on any: ranks must stop at the same iteration."""
    if not distributed:
        return flag
    value = torch.tensor([int(flag)], device=device)  # nccl reduces only CUDA tensors
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
