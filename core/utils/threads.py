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
is still chosen here. Beside busy processes a parallel region still waits for the thread the
scheduler left out: predict's frames follow the CPUs others leave free (`ThreadGovernor`),
test.py computes several images at once, one thread each (core/inference/loop.py), and
training's workers and threads stay within the CPUs (`training_share`).

This module imports torch only where it sets torch's count, so that `before_torch` runs first.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

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
    of at least 1, else the usable CPUs (`cpus`, default `usable_cpus()`); never more than
    those CPUs (`threads_note` says when it was capped)."""
    return _threads(asked, environ, cpus)[0]


def threads_note(asked: int | None = None, environ: MutableMapping[str, str] = os.environ,
                 cpus: int | None = None) -> str | None:
    """What `choose_threads` capped, in one line ("--threads 999 is more than the 2 usable
    CPUs: 2 threads"), or None: threads beyond the CPUs only wait for each other (predict
    on 2 CPUs ran 20 times slower on 999)."""
    return _threads(asked, environ, cpus)[1]


def _threads(asked: int | None, environ: MutableMapping[str, str],
             cpus: int | None) -> tuple[int, str | None]:
    cpus = usable_cpus() if cpus is None else cpus
    if asked is not None:
        if isinstance(asked, bool) or not isinstance(asked, int):
            raise UsageError(f"threads (--threads) {asked!r}: expected a whole number of at "
                             f"least 1, got {type(asked).__name__}")
        if asked < 1:
            raise UsageError(f"--threads must be at least 1, got {asked}")
        given, what = asked, f"--threads {asked}"
    else:
        given = env_threads(environ)
        if given is None:
            return cpus, None
        what = f"{NUM_THREADS}={given}"
    if given <= cpus:
        return given, None
    return cpus, f"{what} is more than the {cpus} usable CPUs: {cpus} threads"


def env_threads(environ: MutableMapping[str, str] = os.environ) -> int | None:
    """OMP_NUM_THREADS when it is a whole number of at least 1, else None."""
    value = environ.get(NUM_THREADS, "").strip()
    return int(value) if value.isdigit() and int(value) >= 1 else None


@dataclass(frozen=True)
class CpuShare:
    """What a training process computes with: `workers` prefetch processes (one thread each)
    and `threads` trainer threads; `note` says why fewer workers than asked, else None."""

    workers: int
    threads: int
    note: str | None = None


def training_share(workers: int, ranks: int = 1, cpus: int | None = None,
                   environ: MutableMapping[str, str] = os.environ) -> CpuShare:
    """A training process's prefetch workers and trainer threads within its share of the usable
    CPUs (`cpus`) among the `ranks` processes of this machine: at most the share less one
    workers (the trainer keeps a CPU; at least one worker), and the trainer the CPUs they leave
    (at least 1), unless the user set OMP_NUM_THREADS. The batches are the same with any number
    of workers (batch n is built from n alone), so fewer workers change the speed, not the run:
    on 2 CPUs one worker builds 1800 images/s of CornerNet_Tiny's batches, 27 times what the
    trainer takes (`train.py CornerNet_Tiny --workers 1 --dry-run 100`; bench/README.md)."""
    cpus = usable_cpus() if cpus is None else cpus
    per_rank = max(1, cpus // max(1, ranks))
    fits = max(1, per_rank - 1)
    note = None
    if workers > fits:
        whose = f"{per_rank} of this machine's {cpus} usable CPUs for each of {ranks} " \
            "processes" if ranks > 1 else f"{cpus} usable CPUs"
        note = (f"--workers {workers} would ask for {workers + 1} CPUs with the trainer, on "
                f"{whose}: {fits} prefetch worker(s) (the batches are the same with any "
                "number)")
        workers = fits
    fixed = env_threads(environ)
    if fixed is not None and fixed > per_rank:
        capped = (f"{NUM_THREADS}={fixed} is more than the {per_rank} usable CPUs: {per_rank} "
                  "trainer threads")
        note = capped if note is None else f"{note}; {capped}"
    threads = max(1, per_rank - workers) if fixed is None else min(fixed, per_rank)
    return CpuShare(workers, threads, note)


# torch's own thread count, read before this package first changed it (empty until then).
_torch_own: list[int] = []


def set_torch_threads(threads: int) -> None:
    """Set torch's thread count: every change of ours goes through here, so that the count torch
    chose itself is known (`torch_own_threads`) and a command that imported torch can give a
    caller who had not imported it torch's own count back (core/engine/process.py)."""
    import torch

    if not _torch_own:
        _torch_own.append(torch.get_num_threads())
    torch.set_num_threads(threads)


def one_thread() -> None:
    """One thread for a process that must not import torch for it (a prefetch worker): OpenMP is
    told before anything starts it, and torch, where other code already imported it, is set."""
    os.environ[NUM_THREADS] = "1"
    if "torch" in sys.modules:
        set_torch_threads(1)


def torch_own_threads() -> int | None:
    """torch's thread count before this package first set it; None if it never did."""
    return _torch_own[0] if _torch_own else None


def use_threads(asked: int | None = None) -> int:
    """Set torch's thread count as `choose_threads` decides; returns it."""
    threads = choose_threads(asked)
    set_torch_threads(threads)
    return threads


def threads_line(threads: int) -> str:
    """One line for a command's log: the threads, the usable CPUs and how the threads wait."""
    policy = (os.environ.get(WAIT_POLICY, "").strip() or "as OpenMP's default").lower()
    return f"threads: {threads} of {usable_cpus()} usable CPUs, waiting {policy}"


@dataclass(frozen=True)
class CpuSample:
    """CPU time so far, in clock ticks: `busy` of the usable CPUs by anyone (steal included),
    `total` of the usable CPUs (busy and idle), `own` of this process (all its threads)."""

    busy: int
    total: int
    own: int


def sample_cpu(cpus: set[int] | None = None, proc: Path = Path("/proc")) -> CpuSample | None:
    """Linux's counters for the CPUs in `cpus` (default: this process's affinity), or None
    where /proc has none (macOS, Windows)."""
    if cpus is None:
        try:
            cpus = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return None
    busy = total = 0
    try:
        for line in (proc / "stat").read_text().splitlines():
            name, _, rest = line.partition(" ")
            if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
                continue
            # user nice system idle iowait irq softirq steal (guest is inside user)
            ticks = [int(value) for value in rest.split()[:8]]
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - ticks[4]
        # utime and stime: fields 14 and 15, counted after the command name's parenthesis
        fields = (proc / "self" / "stat").read_text().rpartition(")")[2].split()
        own = int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return None
    return CpuSample(busy, total, own) if total else None


def others_busy(before: CpuSample, after: CpuSample, cpus: int) -> float:
    """How many of `cpus` CPUs other processes kept busy between two samples (0 to `cpus`)."""
    elapsed = (after.total - before.total) / cpus  # ticks of one CPU
    if elapsed <= 0:
        return 0.0
    others = (after.busy - before.busy) - (after.own - before.own)
    return min(float(cpus), max(0.0, others / elapsed))


class ThreadGovernor:
    """Torch's thread count while predict's frame loop runs: the CPUs other processes leave free.

    Threads that wait passively avoid the worst beside other work, but a parallel region still
    waits for its slowest thread, and a thread that shares its core with a busy process is slow:
    on 2 cores beside 2 busy processes test.py took 55 ms per image on 2 threads and 49 on 1
    (36 alone; bench/bench_threads.py). So `tick` measures how many of the usable CPUs the other
    processes kept busy, `first` seconds after the start and then every `interval` seconds, and
    computes on the rest, rounded, from 1 to `most`. Only where the count is ours to choose:
    `governor()` gives one that keeps its count (`adjust` False) when the user set --threads or
    OMP_NUM_THREADS, on one CPU, or where Linux's counters are missing. (test.py computes
    several images at once instead, each on one thread: `core.inference.loop.cpu_workers`.)
    """

    def __init__(self, most: int, interval: float = 1.0, first: float = 0.25,
                 sample: Callable[[], CpuSample | None] = sample_cpu,
                 clock: Callable[[], float] = time.monotonic,
                 set_threads: Callable[[int], None] | None = None,
                 adjust: bool = True) -> None:
        self.most, self.interval, self.adjust = max(1, most), interval, adjust
        self._wait = min(first, interval)  # the first count soon: a run may be short
        self._sample, self._clock = sample, clock
        self._set = set_threads or set_torch_threads
        self.threads = self.most
        self.changes: list[tuple[int, int, float]] = []  # (tick, threads, others' CPUs)
        self._ticks = 0
        self._last, self._at = (sample() if adjust else None), clock()

    def tick(self) -> int:
        """Called before each batch: the thread count now (changed at most every `interval`)."""
        self._ticks += 1
        now = self._clock()
        if self._last is None or now - self._at < self._wait:
            return self.threads
        current = self._sample()
        if current is None:
            return self.threads
        others = others_busy(self._last, current, self.most)
        self._last, self._at, self._wait = current, now, self.interval
        wanted = max(1, min(self.most, int(self.most - others + 0.5)))
        if wanted != self.threads:
            self._set(wanted)
            self.threads = wanted
            self.changes.append((self._ticks, wanted, others))
        return self.threads

    def summary(self) -> str:
        """One line for the log: how the count changed, or that it did not ("" when the count
        was not ours to change)."""
        if not self.adjust:
            return ""
        if not self.changes:
            return f"threads: {self.most} throughout (other processes left the CPUs free)"
        steps = ", ".join(f"{threads} at batch {tick} (others busy on {others:.1f} CPUs)"
                          for tick, threads, others in self.changes[:6])
        more = f", and {len(self.changes) - 6} more changes" if len(self.changes) > 6 else ""
        return f"threads: {self.most} at the start, then {steps}{more}"


def governor(asked: int | None = None, threads: int = 1,
             environ: MutableMapping[str, str] = os.environ) -> ThreadGovernor:
    """A `ThreadGovernor` over the usable CPUs when the thread count is ours to choose; one that
    keeps `threads` when --threads (`asked`) or OMP_NUM_THREADS fixed it, on one CPU, or
    without Linux's counters."""
    most = usable_cpus()
    if asked is not None or env_threads(environ) is not None or most < 2 or sample_cpu() is None:
        return ThreadGovernor(threads, adjust=False)
    return ThreadGovernor(most)
