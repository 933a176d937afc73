"""The training step alone on a GPU: what it costs, where its time goes, whether it compiles and
whether it waits for the host. gpu_check's profile, compile and sync-check groups run it.

    python bench/bench_step.py profile [--config CornerNet_Squeeze] [--batch 55]
    python bench/bench_step.py compile
    python bench/bench_step.py sync

The step is `NetworkFactory.train` under `TrainStep`, as train.py runs it, on synthetic compact
batches already on the host (bench/_batches.py): no data loading, so images/s is the step's own.

- profile: images/s in bf16 with one forward over the batch, with the config's shipped chunks,
  and with channels_last; the step split into its parts (the device synchronised between them);
  one step under torch.profiler: the top kernels, the GPU's busy share of the step's wall time
  and the kernel count.
- compile: the compiled step's first-call seconds (the compile) apart from its images/s; where
  compiling fails, the whole traceback (`--modes reduce-overhead`: with CUDA graphs).
- sync: `torch.cuda.set_sync_debug_mode` over non-display steps: the count of syncs and where
  they come from (on a CPU: the host reads counted by core/utils/host_reads.py instead).

Each result is one line `row<TAB>name<TAB>status<TAB>detail` (gpu_check makes it a table row);
lines `log<TAB>text` go to gpu_check's log as they are. `--tiny` runs CornerNet_Tiny at CPU sizes
(what gpu_check's rehearsal runs).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench._batches import compact_batch, small_config
from bench.bench_syncs import training_reads
from core.config import load_config
from core.data.chunks import deal
from core.engine.steps import TrainStep
from core.nnet.parallel import split_batch
from core.nnet.py_factory import NetworkFactory
from core.utils.device import configure, resolve_device


def row(name: str, status: str, detail: str) -> None:
    print(f"row\t{name}\t{status}\t{detail}", flush=True)


def log(text: str) -> None:
    for line in text.splitlines():
        print(f"log\t{line}", flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclasses.dataclass
class Bench:
    """A config's step on a device at a batch, built per setting."""

    config: str
    batch: int
    device: torch.device
    side: int | None  # a small input side (--tiny), else the config's

    def build(self, **system: object) -> tuple[TrainStep, list[dict]]:
        """(the step with the `system` settings, two batches on the host): the config's
        shipped chunks (two halves at --tiny sizes), whether run in one forward or one each."""
        if self.side:
            system_config, db = small_config(self.config, self.side)
            chunks = [self.batch - self.batch // 2, self.batch // 2]
        else:
            system_config, db = load_config(self.config)
            chunks = system_config.chunk_sizes
        if not chunks or sum(chunks) != self.batch:
            chunks = None
        system_config = system_config.replace(batch_size=self.batch, chunk_sizes=chunks,
                                              **system)
        torch.manual_seed(0)
        nnet = NetworkFactory(system_config, SimpleNamespace(configs=db), device=self.device,
                              share=deal(self.batch, chunks, 0, 1), log=log)
        nnet.train_mode()
        saccade = system_config.sampling_function != "cornernet"
        batches = [compact_batch(db, self.batch, seed=i, saccade=saccade) for i in range(2)]
        if self.device.type == "cuda":
            batches = [{k: v.pin_memory() for k, v in b.items()} for b in batches]
        return TrainStep(nnet, system_config.nonfinite_loss, log), batches


def run_steps(step: TrainStep, batches: list[dict], count: int, first: int = 1) -> float:
    """Seconds of `count` steps from iteration `first`, the device synchronised at both ends."""
    sync(step.nnet.device)
    t0 = time.perf_counter()
    for it in range(first, first + count):
        step(batches[it % len(batches)], it)
    sync(step.nnet.device)
    return time.perf_counter() - t0


def speed(bench: Bench, name: str, warmup: int, iters: int,
          **system: object) -> tuple[TrainStep, list[dict]] | None:
    """Row `name`: images/s after `warmup` steps (the first one's seconds apart)."""
    try:
        step, batches = bench.build(**system)
        first = run_steps(step, batches, 1)
        run_steps(step, batches, max(warmup - 1, 0), first=2)
        wall = run_steps(step, batches, iters, first=warmup + 1)
        step.settle(warmup + iters)
    except torch.OutOfMemoryError:
        row(name, "out of memory", f"batch {bench.batch}")
        torch.cuda.empty_cache()
        return None
    peak = f", peak {torch.cuda.max_memory_allocated(bench.device) / 2 ** 30:.1f} GiB" \
        if bench.device.type == "cuda" else ""
    row(name, "ok", f"{iters * bench.batch / wall:.1f} images/s ({step.nnet.path.describe()}; "
                    f"first step {first:.1f} s{peak})")
    return step, batches


def breakdown(step: TrainStep, batch: dict, reps: int = 3) -> str:
    """Milliseconds of each part of the step, the device synchronised between parts."""
    nnet, parts = step.nnet, {}

    @contextlib.contextmanager
    def timed(key: str) -> Iterator[None]:
        sync(nnet.device)
        t0 = time.perf_counter()
        yield
        sync(nnet.device)
        parts[key] = parts.get(key, 0.0) + 1000 * (time.perf_counter() - t0) / reps

    for _ in range(reps):
        nnet.optimizer.zero_grad(set_to_none=True)
        with timed("host-to-device"):
            local = nnet._to_device(batch)
            chunks = split_batch(local, nnet.share)
        with timed("render+normalise"):
            targets = [nnet._targets(chunk) for chunk in chunks]
            images = [nnet._image(local)] if nnet.one_forward else \
                [nnet._image(chunk) for chunk in chunks]
        with timed("forward+loss"):
            if nnet.one_forward:
                losses = nnet.step_fn(images[0], targets, [len(c["image"]) for c in chunks])
            else:
                losses = [nnet.step_fn(image, [t], [len(c["image"])])[0]
                          for image, t, c in zip(images, targets, chunks)]
        with timed("backward"):
            sum(loss for loss, _ in losses).backward()
        with timed("optimizer"):
            nnet._clip_gradients()
            nnet._optimizer_step(torch.zeros((), dtype=torch.bool, device=nnet.device))
    total = sum(parts.values())
    return ", ".join(f"{key} {ms:.1f} ms ({100 * ms / total:.0f}%)" for key, ms in parts.items())


def profiled(step: TrainStep, batch: dict, iteration: int) -> None:
    """One step under torch.profiler: the top kernels, the GPU's busy share, the kernel count."""
    from torch.profiler import ProfilerActivity, profile

    device = step.nnet.device
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda"
                                           else [])
    sync(device)
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        step(batch, iteration)
        sync(device)
        wall = time.perf_counter() - t0
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    busy, end = 0.0, float("-inf")
    for start, stop in spans:  # the union of the kernels' intervals, in microseconds
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    share = busy / 1e6 / wall if wall else 0.0
    row("profile: one step", "ok", f"{wall * 1000:.1f} ms wall, GPU busy {share:.0%}, "
                                   f"{len(kernels)} kernels")
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=60)
    log(table)


def profile_group(bench: Bench, args: argparse.Namespace) -> None:
    built = speed(bench, f"{bench.config} bf16, one forward, batch {bench.batch}",
                  args.warmup, args.iters, amp="bf16", one_forward=True, compile=False)
    speed(bench, f"{bench.config} bf16, a forward per shipped chunk, batch {bench.batch}",
          args.warmup, args.iters, amp="bf16", one_forward=False, compile=False)
    speed(bench, f"{bench.config} bf16+channels_last, one forward, batch {bench.batch}",
          args.warmup, args.iters, amp="bf16", one_forward=True, channels_last=True,
          compile=False)
    if built is None:
        return
    step, batches = built
    row("profile: step breakdown", "ok", breakdown(step, batches[0]))
    profiled(step, batches[1], 10 ** 6)


def compile_group(bench: Bench, args: argparse.Namespace) -> None:
    # The defaults of a GPU run (amp, compile and one_forward "auto"), compiled whatever the
    # device; the first step's seconds are the compile's.
    for mode in args.modes:
        name = f"{bench.config} at the defaults, compiled ({mode}), batch {bench.batch}"
        built = speed(bench, name, args.warmup, args.iters, compile=True, compile_mode=mode)
        failure = built[0].nnet.step_fn.failure if built else None
        if failure:
            row(f"compile ({mode})", "FAIL", failure.strip().splitlines()[-1][:150])
            log(failure)


def is_sync(message: str) -> bool:
    """Whether a warning of sync debug mode reports a sync. Turning the mode on warns once that
    it is a prototype ("does not yet detect all synchronizing operations"): not a sync."""
    return "synchroniz" in message and "prototype" not in message


def sync_group(bench: Bench, args: argparse.Namespace) -> None:
    if bench.device.type != "cuda":  # the GPU's step built on the CPU, its host reads counted
        quiet = training_reads(bench.config, bench.batch, args.iters, bench.side)[0]
        row("sync check (CPU: host reads of the GPU's step)",
            "ok" if quiet.per_step == 0 else "FAIL",
            f"host reads per non-display step: {quiet.per_step:g}"
            + (f" ({dict(quiet.reads)})" if quiet.per_step else ""))
        return
    step, batches = bench.build(compile=False)  # eager: every op of the step on its own
    run_steps(step, batches, 2)
    step.settle(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run_steps(step, batches, args.iters, first=3)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if is_sync(str(w.message))]
    places = sorted({f"{Path(w.filename).name}:{w.lineno}" for w in syncs})
    row("sync check", "ok" if not syncs else "FAIL",
        f"syncs per non-display step: {len(syncs) / args.iters:g} ({step.nnet.path.describe()})"
        + (f"; at {', '.join(places[:6])}" if places else ""))
    for w in syncs[:20]:
        log(f"{w.filename}:{w.lineno}: {w.message}")


GROUPS = {"profile": profile_group, "compile": compile_group, "sync": sync_group}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("group", choices=list(GROUPS))
    parser.add_argument("--config", default="CornerNet_Squeeze")
    parser.add_argument("--batch", type=int, default=55, help="images per step (the shipped "
                        "CornerNet_Squeeze batch)")
    parser.add_argument("--iters", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["default"],
                        choices=["default", "reduce-overhead"],
                        help="compile: torch.compile's modes (reduce-overhead: CUDA graphs)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: the GPU)")
    parser.add_argument("--tiny", action="store_true",
                        help="CornerNet_Tiny at input 64, batch 2, 2 steps: CPU sizes")
    args = parser.parse_args(argv)
    side = None
    if args.tiny:
        args.config, args.batch, args.iters, args.warmup, side = "CornerNet_Tiny", 2, 2, 1, 64
    device = resolve_device(args.device)
    configure(device, deterministic=False, fixed_sizes=True)
    print(f"device {device}, torch {torch.__version__}; {args.config} batch {args.batch}",
          flush=True)
    GROUPS[args.group](Bench(args.config, args.batch, device, side), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
