"""The process contract: what a command gives back to the process that called it, and what it
leaves to the caller.

A command runs in its caller's process: `cornernet.train()` in a notebook, `evaluate()` on a
web server's thread. `KEPT` is the one list of what a command may change for the whole process
and puts back when its `run` returns or raises (`process_kept`, which every command's `run` and
`main` go through, and which tests/_inproc.py wraps around each script it runs in-process, so
that the test process is after it as a fresh process would have left it); `CALLER_OWNS` is what
it leaves as it is, and why.

- What belongs to the whole process and may change under a command from another thread (the
  working folder, sys.argv, the root logger) is put back only when the command ran on the main
  thread: a command on a worker thread never undoes what the main thread did meanwhile.
- Signal handlers belong to the main thread: Python runs them there, and only there may they be
  installed. On any other thread a command installs none (core/engine/stop.py), so Ctrl-C and
  SIGTERM do not stop it and act on the main thread as before; it says so once per process.
- A command reached while this process is a child still importing its parent's main script
  (a script without `if __name__ == "__main__":`) leaves at once (`core.utils.procs`).

This module imports no torch, numpy or random: an entry reads its module only where the process
has imported it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..utils import lock
from ..utils.procs import leave_if_reimported
from ..utils.threads import torch_own_threads
from .stop import signals_here

# The signals whose handlers a command installs (the stop and resume signals).
KEPT_SIGNALS = tuple(getattr(signal, name) for name in
                     ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2") if hasattr(signal, name))


@dataclass(frozen=True)
class Kept:
    """One thing a command gives back: `read()` its state now, `put_back(state)` restores the
    state read before (and does nothing where nothing changed: some setters cost seconds)."""

    what: str
    read: Callable[[], Any]
    put_back: Callable[[Any], None]
    main_thread_only: bool = False  # process-wide, shared with threads the command does not own


def _module(name: str) -> Any:
    return sys.modules.get(name)


def _handlers() -> dict | None:
    return {sig: signal.getsignal(sig) for sig in KEPT_SIGNALS} if signals_here() else None


def _put_handlers(saved: dict | None) -> None:
    for sig, handler in (saved or {}).items():
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _mask() -> set:
    return signal.pthread_sigmask(signal.SIG_BLOCK, [])


def _put_environ(saved: dict[str, str]) -> None:
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


def _put_cwd(saved: str) -> None:
    if os.getcwd() != saved:
        os.chdir(saved)


def _put_argv(saved: list[str]) -> None:
    if sys.argv != saved:
        sys.argv[:] = saved


def _logging() -> tuple[list, int]:
    root = logging.getLogger()
    return list(root.handlers), root.level


def _put_logging(saved: tuple[list, int]) -> None:
    root = logging.getLogger()
    handlers, level = saved
    if root.handlers != handlers:
        root.handlers[:] = handlers
    if root.level != level:
        root.setLevel(level)


def _threads() -> int | None:
    torch = _module("torch")
    return None if torch is None else torch.get_num_threads()


def _put_threads(saved: int | None) -> None:
    """The count read before, or, where torch was imported during the command, the count torch
    had chosen itself before the command set one (what the caller's own import would give)."""
    torch = _module("torch")
    wanted = saved if saved is not None else torch_own_threads()
    if torch is not None and wanted is not None and torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)


def _determinism() -> tuple | None:
    torch = _module("torch")
    if torch is None:
        return None
    return (torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)


def _put_determinism(saved: tuple | None) -> None:
    torch = _module("torch")
    if saved is None or torch is None or _determinism() == saved:
        return
    enabled, warn_only, cudnn_deterministic, cudnn_benchmark = saved
    if (torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled()) != (enabled, warn_only):
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
    torch.backends.cudnn.deterministic = cudnn_deterministic
    torch.backends.cudnn.benchmark = cudnn_benchmark


def _torch_random() -> tuple | None:
    torch = _module("torch")
    if torch is None:
        return None
    gpus = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), gpus


def _put_torch_random(saved: tuple | None) -> None:
    torch = _module("torch")
    if saved is None or torch is None:
        return
    cpu, gpus = saved
    torch.set_rng_state(cpu)
    if gpus is not None:
        torch.cuda.set_rng_state_all(gpus)


def _numpy_random() -> Any:
    numpy = _module("numpy")
    return None if numpy is None else numpy.random.get_state()


def _put_numpy_random(saved: Any) -> None:
    if saved is not None:
        _module("numpy").random.set_state(saved)


def _python_random() -> Any:
    random = _module("random")
    return None if random is None else random.getstate()


def _put_python_random(saved: Any) -> None:
    if saved is not None:
        _module("random").setstate(saved)


KEPT: tuple[Kept, ...] = (
    Kept("the handlers of SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 (on the main thread)",
         _handlers, _put_handlers),
    Kept("the calling thread's signal mask", _mask,
         lambda saved: signal.pthread_sigmask(signal.SIG_SETMASK, saved)),
    Kept("the environment (os.environ)", lambda: dict(os.environ), _put_environ),
    Kept("the working folder (on the main thread)", os.getcwd, _put_cwd, main_thread_only=True),
    Kept("sys.argv (on the main thread)", lambda: list(sys.argv), _put_argv,
         main_thread_only=True),
    Kept("the root logger's handlers and level (on the main thread)", _logging, _put_logging,
         main_thread_only=True),
    Kept("the locks of snapshot and results folders (those the command's thread took are "
         "released)", lock.held,
         lambda saved: lock.release_all(keep=saved, thread=threading.get_ident())),
    Kept("torch's thread count (torch's own where the command imported torch)", _threads,
         _put_threads),
    Kept("torch's deterministic algorithms and their warn_only; cuDNN's deterministic and "
         "benchmark", _determinism, _put_determinism),
    Kept("torch's random state (the CPU's; each GPU's where CUDA is initialised)", _torch_random,
         _put_torch_random),
    Kept("numpy's global random state", _numpy_random, _put_numpy_random),
    Kept("Python's random state", _python_random, _put_python_random),
)

# What a command leaves as it is, and why.
CALLER_OWNS: tuple[str, ...] = (
    "torch's inter-op thread count: no command sets it (torch allows it once per process)",
    "the random state of a GPU whose CUDA the command initialised: the caller had none yet",
    "imported modules and the prefetch workers' fork server, kept for the next command",
    ("the warning filters: a module the command imports adds its own at import, for good, as "
     "in a fresh process; a command's own filters are scoped (warnings.catch_warnings)"),
    ("the working folder, sys.argv and the root logger when the command ran on another thread "
     "than the main one: the main thread may change them meanwhile"),
    "a Detector's threads= (set when it is made, as asked)",
)

_said_off_main: list[str] = []  # the thread named in the one note of this process


_SKIPPED = object()  # an entry left alone on this thread


def _here(kept: Kept) -> bool:
    return not kept.main_thread_only or threading.current_thread() is threading.main_thread()


def read_kept() -> list[Any]:
    """The state of every entry of KEPT this thread puts back, in order."""
    return [kept.read() if _here(kept) else _SKIPPED for kept in KEPT]


def put_back(saved: list[Any]) -> None:
    """Restore what `read_kept` read (the handlers before the mask lets a pending signal in).
    Every entry is tried; the first error is raised after the rest are put back."""
    failed: BaseException | None = None
    for kept, state in zip(KEPT, saved):
        if state is _SKIPPED:
            continue
        try:
            kept.put_back(state)
        except Exception as err:  # noqa: BLE001 - the others are still put back
            failed = failed or err
    if failed is not None:
        raise failed


def _say_off_main() -> None:
    if signals_here() or _said_off_main:
        return
    name = threading.current_thread().name
    _said_off_main.append(name)
    print(f"note: a cornernet command runs on thread {name!r}, not the main thread: it installs "
          f"no signal handlers there, so Ctrl-C and SIGTERM do not stop it (said once)",
          file=sys.stderr)


@contextlib.contextmanager
def process_kept() -> Iterator[None]:
    """A block after which everything KEPT is as it was before, whether it returns or raises."""
    leave_if_reimported()  # a child importing an unguarded main script: leave before any work
    _say_off_main()
    saved = read_kept()
    try:
        yield
    finally:
        put_back(saved)


def keeps_process(run: Callable[..., Any]) -> Callable[..., Any]:
    """`run` made to leave the process as it found it (`process_kept`), returns or raises."""

    @functools.wraps(run)
    def kept(*args: Any, **kwargs: Any) -> Any:
        with process_kept():
            return run(*args, **kwargs)

    return kept
