"""How many threads a process computes with, and how they wait: the one place that decides.

On a machine that runs other work (a browser, a second run, the data workers themselves),
OpenMP threads that spin while they wait for each other turn every busy core into a stall:
test.py on a 2-core machine with two busy processes beside it took 1232 ms per image with its
default threads, against 81 ms on one thread (bench/bench_threads.py). Threads that sleep while
they wait (`OMP_WAIT_POLICY=PASSIVE`) keep the speed of all cores when the machine is idle and
of one thread when it is not, so the commands set it before torch starts its OpenMP runtime
(`before_torch`, the first call of every entry point), and take as many threads as the CPUs
the process may use (its affinity, not the machine's count: a container or `taskset` gives
fewer). A process that is not ours (the Python API) keeps its own wait policy; its thread count
is still chosen here.

This module imports torch only inside `use_threads`, so that `before_torch` runs before it.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from ..errors import UsageError

WAIT_POLICY = "OMP_WAIT_POLICY"
NUM_THREADS = "OMP_NUM_THREADS"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)


def before_torch(environ: MutableMapping[str, str] = os.environ) -> None:
    """Make OpenMP's threads sleep while they wait, unless the user chose a wait policy.

    Only effective before torch is first imported (OpenMP reads it when it starts): the
    commands' entry points call it first."""
    environ.setdefault(WAIT_POLICY, "PASSIVE")


def choose_threads(asked: int | None = None, environ: MutableMapping[str, str] = os.environ,
                   cpus: int | None = None) -> int:
    """The thread count: `asked` (--threads), else OMP_NUM_THREADS when it is a whole number
    of at least 1, else the usable CPUs (`cpus`, default `usable_cpus()`)."""
    if asked is not None:
        if asked < 1:
            raise UsageError(f"--threads must be at least 1, got {asked}")
        return asked
    value = environ.get(NUM_THREADS, "").strip()
    if value.isdigit() and int(value) >= 1:
        return int(value)
    return usable_cpus() if cpus is None else cpus


def trainer_threads(workers: int, ranks: int = 1, cpus: int | None = None,
                    environ: MutableMapping[str, str] = os.environ) -> int:
    """A training process's threads: OMP_NUM_THREADS when the user set it, else its share of the
    usable CPUs (`cpus`) among the `ranks` processes of this machine, less one per prefetch
    worker (each computes on one thread), and at least 1."""
    cpus = usable_cpus() if cpus is None else cpus
    return choose_threads(None, environ, max(1, cpus // max(1, ranks) - workers))


def use_threads(asked: int | None = None) -> int:
    """Set torch's thread count as `choose_threads` decides; returns it."""
    import torch

    threads = choose_threads(asked)
    torch.set_num_threads(threads)
    return threads


def threads_line(threads: int) -> str:
    """One line for a command's log: the threads, the usable CPUs and how the threads wait."""
    policy = (os.environ.get(WAIT_POLICY, "").strip() or "as OpenMP's default").lower()
    return f"threads: {threads} of {usable_cpus()} usable CPUs, waiting {policy}"
