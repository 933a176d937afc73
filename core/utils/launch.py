"""Start the training processes of one node and end them together.

`spawn(target, procs, args)` runs `target(local_rank, procs, args, say)` in `procs` spawned
processes. `say(text)` is how a rank reports its failure: the text comes here instead of being
printed, so that exactly one report is shown, the cause's, however many ranks fail after it.

- When a process fails (a non-zero exit other than a requested stop, or death by a signal),
  every other process is killed at once and the cause is printed: its first line names the rank
  and the exception, the traceback follows. The cause is a process that died by a signal, else
  the first report to arrive (ranks that fail because a peer went away report after it).
- SIGTERM and SIGHUP are forwarded to every process, which stop after the current iteration and
  write a snapshot; a stopped process exits with 128 + the signal and is waited for, not killed.
- Every process watches its launcher (its pid and start time, as prefetch workers watch their
  trainer) and leaves within a second of its death: a `kill -9` of the launcher leaves no rank
  training on as an orphan. torchrun's processes watch torchrun the same way (`watch_launcher`).
- Ctrl-C already reaches every process of the terminal's process group, so it is not forwarded
  (a forwarded copy would count there as a second Ctrl-C and skip the snapshot).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ..prefetch import is_alive, process_identity

STOP_CODES = {128 + signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGHUP}


# Called with the reason before a rank leaves because its launcher is gone: the PeerWatch's
# `report`, so that the ranks of other nodes learn it at once, not from a broken collective.
before_leaving: list[Callable[[str], None]] = []


def end_now(status: int) -> None:
    """End this process at once (`os._exit`: its main thread may be stuck in a collective),
    with its fork server: left alone, that one outlives the process by seconds."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    os._exit(status)


def watch_launcher(launcher: tuple[int, str], rank: str, poll_s: float = 0.5) -> None:
    """Leave (os._exit(1), saying so) within `poll_s` seconds of the death of the process
    `launcher` (a `process_identity`). This process's prefetch workers watch it in turn."""

    def run() -> None:
        while is_alive(launcher):
            time.sleep(poll_s)
        reason = f"its launcher (pid {launcher[0]}) is gone (killed?)"
        for tell in before_leaving:
            tell(reason)
        print(f"error: {rank} stopping: {reason}; the run ends here, resume it with --iter "
              f"latest", file=sys.stderr, flush=True)
        end_now(1)

    threading.Thread(target=run, daemon=True, name="launcher-watch").start()


def remove_dead_mp_folders(folder: Path | None = None) -> list[Path]:
    """Remove the `pymp-*` folders that multiprocessing left in the temp folder when a process
    of ours was killed (it removes them only at a clean exit); returns them.

    A folder is a dead process's when it is ours and holds only sockets that no live process
    has bound (/proc/net/unix lists the bound ones); an empty one may be a live process's,
    just created, and is left alone.
    """
    try:
        table = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    bound = {fields[-1] for fields in map(str.split, table) if len(fields) >= 8}
    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob("pymp-*"):
        try:
            entries = list(path.iterdir()) if path.stat().st_uid == os.getuid() else []
        except OSError:
            continue
        if entries and all(e.is_socket() and str(e) not in bound for e in entries):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _entry(target: Callable[..., int], local_rank: int, procs: int, args: Any,
           reports: Any, launcher: tuple[int, str], first_rank: int) -> None:
    watch_launcher(launcher, f"rank {first_rank + local_rank}")
    status = target(local_rank, procs, args, lambda text: reports.put((local_rank, text)))
    sys.stdout.flush()
    sys.exit(status)


def spawn(target: Callable[..., int], procs: int, args: Any, first_rank: int = 0) -> int:
    """Run `procs` processes of `target`; returns the exit status of the whole.

    `first_rank` is the global rank of local process 0 (node rank * procs), for the messages.
    """
    ctx = mp.get_context("spawn")
    reports = ctx.SimpleQueue()
    launcher = process_identity(os.getpid())
    processes = [ctx.Process(target=_entry, args=(target, rank, procs, args, reports, launcher,
                                                  first_rank),
                             name=f"rank-{rank}") for rank in range(procs)]
    for proc in processes:
        proc.start()

    def forward(signum: int, frame: object) -> None:
        for proc in processes:
            if proc.is_alive():
                os.kill(proc.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    received: list[tuple[int, str]] = []
    try:
        while True:
            # `running` is read before `failed`: a process that ends in between is seen as
            # failed on the next pass, never missed by a loop that has already ended.
            running = any(proc.exitcode is None for proc in processes)
            if running:
                multiprocessing.connection.wait(
                    [p.sentinel for p in processes] + [reports._reader], timeout=1.0)
            while not reports.empty():
                received.append(reports.get())
            failed = [p for p in processes if p.exitcode not in (None, 0, *STOP_CODES)]
            if not failed and not running:
                break
            if failed:
                for proc in processes:
                    if proc.exitcode is None:
                        proc.kill()
                for proc in processes:
                    proc.join()
                while not reports.empty():
                    received.append(reports.get())
                print(flush=True)  # a killed rank 0 leaves its progress bar's line open
                print(_cause(processes, failed, received, first_rank), file=sys.stderr,
                      flush=True)
                code = failed[0].exitcode
                return code if code and code > 0 else 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return max((p.exitcode for p in processes), default=0)


def _cause(processes: list, failed: list, received: list[tuple[int, str]],
           first_rank: int) -> str:
    """The report of the process that failed first, as the lines to print: a process killed by a
    signal without a word, else the first report (a rank's own, if it reported and then died)."""
    reported = dict(reversed(received))  # local rank -> its first report
    for proc in failed:
        if proc.exitcode < 0 and processes.index(proc) in reported:
            received = [(processes.index(proc), reported[processes.index(proc)])]
            break  # it reported its error, then died tearing down: the report is the cause
        if proc.exitcode < 0:
            rank = first_rank + processes.index(proc)
            return (f"error: rank {rank} (pid {proc.pid}) was killed by "
                    f"{signal.Signals(-proc.exitcode).name}; every other process was stopped")
    if received:
        rank, text = received[0]
        return text if text.startswith("error:") else f"error: rank {first_rank + rank}: {text}"
    proc = failed[0]
    return (f"error: rank {first_rank + processes.index(proc)} (pid {proc.pid}) exited with status "
            f"{proc.exitcode} without a report")
