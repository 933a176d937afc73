"""Stop requests: every signal that asks a script to stop, from the first second of its life.

One module for train.py, test.py and demo.py, with one rule for each signal:

- SIGTERM, SIGHUP, a first Ctrl-C, or the resume signal (system.stop_signal, SIGUSR1 by default:
  what `#SBATCH --signal=USR1@<s>` sends before a time limit) ask to stop. The training loop
  stops at the end of the iteration and writes a snapshot (`StopRequest`); test.py and demo.py,
  which have nothing to save mid-image, stop at once (`StopRequest(at_once=True)` raises
  Stopped).
- A second Ctrl-C asks to hurry: KeyboardInterrupt at once (the script exits 130 without a
  word), except inside `finishing()`: the stop snapshot's write is not cut short.
- After the resume signal the run exits with RESUME_STATUS, which says "the run is not finished:
  continue it with --iter latest".
- `catch_early()` (train.py calls it before its heavy imports) remembers these signals from the
  first moments of a run, when their default action would end it without a word; the loop's
  StopRequest takes the remembered request over, so the run stops after its first iteration
  with a snapshot.
- Handlers are the main thread's alone (Python runs them there, and only it may install them):
  on another thread (`signals_here()` false) neither installs any, and a StopRequest is then
  never set by a signal (core/engine/process.py says so once).

This module imports no torch: the early catch must cost nothing before the heavy imports.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError, Stopped

# EX_TEMPFAIL of sysexits.h: "a temporary failure; the user is invited to retry".
RESUME_STATUS = 75
STOPS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# Signals that may be the resume signal (system.stop_signal also allows TERM and HUP).
CANDIDATES = (signal.SIGUSR1, signal.SIGUSR2)
_early: list[int] = []  # the signals caught before a StopRequest took over, in order


def signals_here() -> bool:
    """Whether this thread may install signal handlers: the main thread only."""
    return threading.current_thread() is threading.main_thread()


def _hurry(signum: int, before: int, finishing: bool = False) -> bool:
    """The one rule for a repeated signal: a second Ctrl-C ends the script now."""
    return signum == before == signal.SIGINT and not finishing


def _remember(signum: int, frame: object) -> None:
    if _hurry(signum, _early[-1] if _early else 0):
        raise KeyboardInterrupt
    _early.append(signum)


def catch_early() -> None:
    """Remember stop and resume signals instead of dying of them until a StopRequest takes
    over: SLURM or a user may signal while the run still starts (imports, data, the process
    group), and the default action of SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 is to end the
    process without a snapshot or a word. A launcher that must not lose a signal sent before
    this interpreter runs any code (its own start-up takes 40 ms idle, 0.4 s on a loaded
    machine) can block them before exec: they wait pending, and arrive here. Only on the
    main thread (`signals_here`)."""
    if not signals_here():
        return
    for signum in (*STOPS, *CANDIDATES):
        signal.signal(signum, _remember)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {*STOPS, *CANDIDATES})


class StopRequest:
    """The stop request of a script; `stop()` is true once a signal asked to stop.

    Args:
        resume_signal: the signal that means "snapshot, exit RESUME_STATUS, resume me later".
        at_once: raise Stopped in the handler (test.py, demo.py), instead of waiting for the
            loop to ask.

    Off the main thread (`signals_here()` false) it installs no handler, and no signal sets it.
    """

    def __init__(self, resume_signal: int | None = None, at_once: bool = False) -> None:
        self.signum = 0
        self._finishing = False
        self.at_once = at_once
        self.resume_signal = resume_signal
        self.resume = False  # set by the loop: some rank got the resume signal
        if not signals_here():
            return
        for signum in {*STOPS, resume_signal} - {None}:
            signal.signal(signum, self._handle)
        for signum in set(CANDIDATES) - {resume_signal}:
            signal.signal(signum, signal.SIG_DFL)
        counted = [signum for signum in _early if signum in (*STOPS, resume_signal)]
        _early.clear()
        if counted:  # asked during start-up: the last request counts, as in `_handle`
            self.signum = counted[-1]

    def _handle(self, signum: int, frame: object) -> None:
        if _hurry(signum, self.signum, self._finishing):
            raise KeyboardInterrupt
        first = not self.signum
        self.signum = signum
        if self.at_once and first and not self._finishing:
            raise Stopped(signum)

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


def resume_signal(args: Any, system_config: Any) -> int:
    """The signal number of the resume signal: --stop-signal, else system.stop_signal."""
    name = (getattr(args, "stop_signal", None) or system_config.stop_signal).upper()
    try:
        return int(getattr(signal, "SIG" + name.removeprefix("SIG")))
    except (AttributeError, TypeError) as err:
        raise ConfigError(f"--stop-signal {name}: not a signal; use USR1, USR2, TERM or HUP"
                          ) from err


def stop_request(args: Any, system_config: Any) -> StopRequest:
    """The training loop's StopRequest, with the resume signal of --stop-signal /
    system.stop_signal; a request caught early is a stop request already."""
    return StopRequest(resume_signal(args, system_config))


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
