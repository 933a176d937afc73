"""Start the training processes of one node, run each, and end them together.

`launch(options, train)` is `cornernet train`'s work: given the run's frozen `TrainOptions`
(core/engine/options.py), it checks the run before any process starts (`preflight`), then runs
`train` in this process, under torchrun, or in `--procs-per-node` spawned processes.
`run_rank` is one process: it joins the process group, watches its peers, trains and turns a
failure into one report (`core.engine.exits`).

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
  training on as an orphan. torchrun's processes watch torchrun the same way.
- Ctrl-C already reaches every process of the terminal's process group, so it is not forwarded
  (a forwarded copy would count there as a second Ctrl-C and skip the snapshot).
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from ..config import load_config
from ..errors import ConfigError
from ..utils import dist as dist_utils
from ..utils import lock
from ..utils import procs as lifetime
from ..utils.device import configure, distributed_kind, rank_device, resolve_device
from ..utils.env import check_environment
from ..utils.peers import broken_collective
from ..utils.procs import process_identity
from . import cluster, preempt, stop
from .agree import check_same_config
from .exits import USER_MISTAKES, describe, report, with_trace
from .options import TrainOptions
from .preflight import check_args, preflight, tidy_temp
from .stop import RESUME_STATUS

# train(options, system_config, db_config, rank, world, device, distributed, watch) -> exit status
Train = Callable[..., int]

STOP_CODES = {128 + signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGHUP}


def _entry(target: Callable[..., int], local_rank: int, procs: int, args: Any,
           reports: Any, launcher: tuple[int, str], first_rank: int) -> None:
    lifetime.watch_launcher(launcher, f"rank {first_rank + local_rank}")
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
    previous = _forward_signals(processes)
    try:
        return _supervise(processes, reports, first_rank)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _forward_signals(processes: list) -> dict:
    """Forward SIGTERM and SIGHUP to the live processes and ignore SIGINT here (the terminal
    sends it to every process already); returns the handlers to put back. Off the main thread
    nothing is installed (`stop.signals_here`)."""
    if not stop.signals_here():
        return {}

    def forward(signum: int, frame: object) -> None:
        for proc in processes:
            if proc.is_alive():
                os.kill(proc.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    return previous


def _supervise(processes: list, reports: Any, first_rank: int) -> int:
    """Wait for the processes; on the first failure stop the others and print its cause."""
    received: list[tuple[int, str]] = []
    while True:
        # `running` is read before `failed`: a process that ends in between is seen as
        # failed on the next pass, never missed by a loop that has already ended.
        # The sentinels of those still running only: an ended process's is ready for good,
        # and waiting on it spun this loop on a CPU the last ranks were finishing on.
        running = [proc.sentinel for proc in processes if proc.exitcode is None]
        # A rank that failed since the last pass no longer has its sentinel in `running`:
        # no wait then, or its failure would be seen only at the timeout.
        ended_badly = any(p.exitcode not in (None, 0, *STOP_CODES) for p in processes)
        if running and not ended_badly:
            multiprocessing.connection.wait(running + [reports._reader], timeout=1.0)
        _drain(reports, received)
        failed = [p for p in processes if p.exitcode not in (None, 0, *STOP_CODES)]
        if failed:
            return _stop_all(processes, failed, reports, received, first_rank)
        if not running:
            return max((p.exitcode for p in processes), default=0)


def _drain(reports: Any, received: list[tuple[int, str]]) -> None:
    while not reports.empty():
        received.append(reports.get())


def _stop_all(processes: list, failed: list, reports: Any, received: list[tuple[int, str]],
              first_rank: int) -> int:
    """Kill every process still running, print the cause of the failure; its exit status."""
    for proc in processes:
        if proc.exitcode is None:
            proc.kill()
    for proc in processes:
        proc.join()
    _drain(reports, received)
    print(flush=True)  # a killed rank 0 leaves its progress bar's line open
    print(_cause(processes, failed, received, first_rank), file=sys.stderr, flush=True)
    code = failed[0].exitcode
    if code == lifetime.REIMPORTED_MAIN:
        return 2  # the user's mistake: the main script calls the command at its top level
    return code if code and code > 0 else 1


def _cause(processes: list, failed: list, received: list[tuple[int, str]],
           first_rank: int) -> str:
    """The report of the process that failed first, as the lines to print: a process killed by a
    signal without a word, else the first report (a rank's own, if it reported and then died)."""
    reported = dict(reversed(received))  # local rank -> its first report
    for proc in failed:
        if proc.exitcode == lifetime.REIMPORTED_MAIN:
            rank = first_rank + processes.index(proc)
            return f"error: {lifetime.UnguardedMain(f'rank {rank} (pid {proc.pid})')}"
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


def run_rank(train: Train, local_rank: int, procs: int, options: TrainOptions,
             say: Callable[[str], None] | None = None) -> int:
    """One training process: join the group if distributed, train, report a failure.

    `say` receives the failure report (the launcher shows one report for the whole run);
    without it the report is printed.
    """
    say = say or functools.partial(tqdm.write, file=sys.stderr)  # below the bar, not on it
    rank, world, distributed, watch, written = 0, 1, options.distributed, None, []
    try:
        check_environment()  # again here: torchrun's processes start without launch's checks
        check_args(options)
        system_config, db_config = load_config(options.cfg_file, options.config_dir,
                                               overrides=options.overrides,
                                               weights=options.weights)
        device = resolve_device(options.device) if not distributed else None
        if distributed:
            rank, world, local_rank, url = cluster.placement(options, local_rank, procs)
            device = rank_device(distributed_kind(options.device), local_rank)
            dist_utils.init(options.dist_backend, url, world, rank, device,
                            world // max(options.world_size, 1))
            watch = dist_utils.watch_peers(url, rank, world, say)
            if watch is not None:
                lifetime.before_leaving.append(watch.report)
            shared = check_same_config(system_config.full, db_config, options, rank, world)
            if rank == 0:
                print(f"config {shared} identical on {world} ranks", flush=True)
        written = [system_config.snapshot_dir, system_config.result_dir] if rank == 0 else []
        configure(device, system_config.deterministic, fixed_sizes=True)
        status = train(options, system_config, db_config, rank, world, device, distributed, watch)
        status = preempt.requeue(status, options, system_config, rank, functools.partial(
            print, flush=True))
        if rank and status in STOP_CODES | {RESUME_STATUS} and cluster.in_job_step():
            # Rank 0 speaks for a stopped job step: a non-zero exit here would make srun
            # (--kill-on-bad-exit) end rank 0 while it writes the snapshot and requeues.
            return 0
        return status
    except KeyboardInterrupt:  # a second Ctrl-C: stop now, quietly
        return 128 + signal.SIGINT
    except Exception as err:  # noqa: BLE001 - every failure becomes one report
        status, text = describe(err)
        text = with_trace(err, text)
        cause = watch.cause() if watch is not None and broken_collective(err) else ""
        if cause:  # a peer failed first and said why: that is the story, not the broken pipe
            text = f"stopping because {cause}"
        say(f"error: rank {rank}: {text}" if distributed else f"error: {text}")
        if watch is not None:
            watch.report(text)
        if status == 2:  # a mistake found at start: nothing was written, no folder is left
            lock.release_all(thread=threading.get_ident())
            lock.remove_empty(*written)
        return status
    finally:
        lock.release_all(thread=threading.get_ident())  # this run's: another thread's stay
        if watch is not None:
            watch.close()
        dist_utils.cleanup()


def _rendezvous(options: TrainOptions) -> TrainOptions:
    """The nodes of a `--distributed` run checked, and the rendezvous address (a free local
    port for a one-node run without --dist-url)."""
    if options.world_size < 1:
        raise ConfigError("--distributed needs --world-size (the number of nodes)")
    if not 0 <= options.rank < options.world_size:
        raise ConfigError(f"--rank {options.rank} is outside --world-size "
                          f"{options.world_size}: node ranks are 0 to {options.world_size - 1}")
    if options.dist_url is not None:
        return options
    if options.world_size > 1:
        raise ConfigError("--dist-url tcp://<node 0>:<port> is needed with more than one node")
    return dataclasses.replace(options, dist_url=f"tcp://127.0.0.1:{dist_utils.free_port()}")


def launch(options: TrainOptions, train: Train, log: Callable[[str], None] = print) -> int:
    """Check the run, then train in this process, under torchrun or srun, or in spawned
    processes. `train` is given `options` with what launch settled (the device, the
    rendezvous); `log` hears what the checks before training tidied."""
    stop.catch_early()  # again (train.py did it first): launch may be called from Python
    if dist_utils.launched_by_torchrun():
        # torchrun's processes are one run, never independent copies
        options = dataclasses.replace(options, distributed=True)
        lifetime.watch_launcher(process_identity(os.getppid()), f"rank {os.environ['RANK']}")
        return run_rank(train, 0, 1, options)
    try:
        if options.data is not None:  # never silently trained on the config's own data instead
            raise ConfigError("launch takes the run's name: --data is resolved into the run's "
                              "config by `cornernet train` (its data_run) first")
        check_environment()  # CORNERNET_* values, before any process or watch thread reads one
        check_args(options)
        if options.distributed and cluster.in_job_step():  # srun started this process as rank
            options = cluster.adopt(options, cluster.slurm_task())
            preflight(options, 1, log, data=options.rank == 0)
            return run_rank(train, 0, 1, options)
        if not options.distributed:  # the run itself reads the data next, in one line on error
            # once, here: cuda -> cuda:<current>
            options = dataclasses.replace(options, device=str(resolve_device(options.device)))
            preflight(options, 1, log, data=False)
            tidy_temp(log)
            return run_rank(train, 0, 1, options)
        options = _rendezvous(options)
        procs = dist_utils.procs_per_node(options.procs_per_node,
                                          gpus=distributed_kind(options.device) == "cuda")
        preflight(options, procs, log)
        tidy_temp(log)
    except KeyboardInterrupt:  # a second Ctrl-C during the checks: stop now, quietly
        return 128 + signal.SIGINT
    except USER_MISTAKES as err:
        if os.environ.get("SLURM_PROCID", "0") != "0" and cluster.in_job_step():
            return 2  # every task finds the same mistake: task 0 says it
        return report(err)
    return spawn(functools.partial(run_rank, train), procs, options,
                 first_rank=options.rank * procs)
