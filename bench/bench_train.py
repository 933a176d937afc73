"""Training throughput through the real trainer step: images/s, data wait, peak memory, and where
the step time goes.

    python bench/bench_train.py                       # GPU: CornerNet_Squeeze and CornerNet
    python bench/bench_train.py --tiny                # CPU: small inputs, few iterations

For each config, precision mode (fp32, bf16, bf16+cl = bf16 with channels_last, bf16+cl+compile,
fp32+det = fp32 with system.deterministic, auto = the config's defaults) and prefetch worker
count, a NetworkFactory trains on ../shared/data/coco128 (the COCO dataset class, real
augmentation) fed by core.data.prefetch
exactly as train.py feeds it, one process, the config's per-process batch cut into its chunks.
Printed per row: images/s after warm-up, the share of wall time spent waiting for the next batch,
peak GPU memory of the row's own network, optimizer and activations (a row that runs out of memory
says so and the next row runs). Then, for the fastest mode, one batch's step split into
host-to-device copy, target rendering + image normalisation, forward + loss, backward and optimizer
step (each timed with the device synchronised), which says what limits the trainer when data wait is
near zero.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._coco128 import COCO128, MISSING, coco128_run
from core.config import SystemConfig, load_config
from core.data.chunks import deal
from core.data.prefetch import Prefetcher
from core.data.ring import probe_batch
from core.dbs import DETECTION
from core.nnet.parallel import split_batch
from core.nnet.py_factory import NetworkFactory
from core.sample import sampler
from core.sample.render import render_targets
from core.utils.device import configure, resolve_device

# Each mode pins what it names (eager unless it says compile); "auto" is the config's defaults:
# on a GPU bf16, compiled, one forward (core/nnet/step_path.py), on the CPU the fp32 step.
_EAGER = {"compile": False}
MODES = {"fp32": {"amp": "fp32", **_EAGER}, "bf16": {"amp": "bf16", **_EAGER},
         "bf16+cl": {"amp": "bf16", "channels_last": True, **_EAGER},
         "bf16+cl+compile": {"amp": "bf16", "channels_last": True, "compile": True},
         "fp32+det": {"amp": "fp32", "deterministic": True, **_EAGER},
         "auto": {}}


def setup(name: str, batch: int, chunks: int, mode: str, input_size: int | None
          ) -> tuple[SystemConfig, Callable[[], DETECTION]]:
    """The config of one bench row on coco128, and the dataset factory."""
    sizes = [batch // chunks + (i < batch % chunks) for i in range(chunks)]
    db = {"categories": 80}
    if input_size:  # --tiny: a smaller input at the config's stride
        db_config = load_config(name)[1]
        stride = (db_config["input_size"][0] + 1) // db_config["output_sizes"][0][0]
        db.update(input_size=[input_size, input_size],
                  output_sizes=[[(input_size + 1) // stride] * 2])
    return coco128_run(name, db=db, batch_size=batch, prefetch_size=8,
                       chunk_sizes=sizes if chunks > 1 else None, **MODES[mode])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_row(name: str, mode: str, workers: int, args: argparse.Namespace,
            device: torch.device) -> dict:
    """Train warm-up + timed iterations; images/s, data-wait share, peak memory."""
    system_config, make_db = setup(name, args.batch, args.chunks, mode, args.input_size)
    share = deal(system_config.batch_size, system_config.chunk_sizes, 0, 1)
    db = make_db()
    db.set_rng(np.random.default_rng(0))
    sample = sampler(system_config.sampling_function, system_config.strict_images)
    probe = probe_batch(db, sample, share)
    configure(device, system_config.deterministic, fixed_sizes=True)
    base = 0
    if device.type == "cuda":  # this row's own peak: less what earlier rows still hold
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(0)
    nnet = NetworkFactory(system_config, db, device=device, share=share)
    nnet.train_mode()
    with Prefetcher(make_db, sample, probe, share=share, workers=workers, data_aug=True,
                    stream="train", seed=system_config.seed,
                    prefetch_size=system_config.prefetch_size, device=device) as data:
        for _ in range(args.warmup):
            nnet.train(data.get()[0])
        sync(device)
        waited, start = 0.0, time.perf_counter()
        for _ in range(args.iters):
            t0 = time.perf_counter()
            batch, _ = data.get()
            waited += time.perf_counter() - t0
            nnet.train(batch)
        sync(device)
        wall = time.perf_counter() - start
        last = batch
    peak = (torch.cuda.max_memory_allocated(device) - base) / 2 ** 30 \
        if device.type == "cuda" else 0.0
    return {"images/s": args.iters * args.batch / wall, "wait": waited / wall, "peak": peak,
            "nnet": nnet, "batch": last}


def breakdown(nnet: NetworkFactory, batch: dict, reps: int) -> dict[str, float]:
    """Milliseconds per step of each part, the device synchronised between parts."""
    device, parts = nnet.device, {}

    @contextlib.contextmanager
    def timed(key: str) -> Iterator[None]:
        sync(device)
        t0 = time.perf_counter()
        yield
        sync(device)
        parts[key] = parts.get(key, 0.0) + 1000 * (time.perf_counter() - t0) / reps

    pinned = {k: v.pin_memory() for k, v in batch.items()} if device.type == "cuda" else batch
    for _ in range(reps):
        nnet.optimizer.zero_grad(set_to_none=True)
        with timed("host-to-device"):
            chunks = split_batch(nnet._to_device(pinned), nnet.share)
        with timed("render+normalise"):
            inputs = [(nnet._image(c), render_targets(c, nnet.db_configs, nnet.categories))
                      for c in chunks]
        with timed("forward+loss"), nnet._autocast():
            loss = sum(nnet.loss(nnet.network(image), targets)[0]
                       for image, targets in inputs) / len(chunks)
        with timed("backward"):
            loss.backward()
        with timed("optimizer"):
            nnet.optimizer.step()
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["CornerNet_Squeeze", "CornerNet"])
    parser.add_argument("--modes", nargs="+", default=list(MODES)[:4], choices=list(MODES))
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--batch", type=int, default=32, help="per-process batch")
    parser.add_argument("--chunks", type=int, default=1, help="chunks the batch is cut into")
    parser.add_argument("--iters", type=int, default=None, help="timed iterations (default 30, "
                        "--tiny 3)")
    parser.add_argument("--warmup", type=int, default=None, help="default 10, --tiny 1")
    parser.add_argument("--breakdown-reps", type=int, default=3,
                        help="steps the breakdown's parts are averaged over")
    parser.add_argument("--input-size", type=int, default=None,
                        help="square input side instead of the config's (e.g. 255)")
    parser.add_argument("--no-breakdown", action="store_true",
                        help="only the rows, not the step of the fastest mode split into parts")
    parser.add_argument("--tiny", action="store_true",
                        help="CPU settings: input 127, batch 2, 3 iterations, workers 1 2")
    parser.add_argument("--device", default=None,
                        help="cuda, cuda:1 or cpu (default: the current GPU, else cpu)")
    args = parser.parse_args()
    if args.tiny:  # an --iters or --warmup given on the command line is kept
        args.input_size, args.batch = 127, 2
        args.iters = 3 if args.iters is None else args.iters
        args.warmup = 1 if args.warmup is None else args.warmup
        args.workers = [w for w in args.workers if w <= 2]
    args.iters = 30 if args.iters is None else args.iters
    args.warmup = 10 if args.warmup is None else args.warmup
    if not COCO128.is_dir():
        sys.exit(MISSING)
    device = resolve_device(args.device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none"
    print(f"device {device} ({gpu}), torch {torch.__version__}, {torch.get_num_threads()} "
          f"threads, {os.cpu_count()} CPUs; batch {args.batch} in {args.chunks} chunk(s), "
          f"{args.iters} timed iterations after {args.warmup}")
    print(f"{'config':18s} {'mode':16s} {'workers':>7s} {'images/s':>9s} {'data wait':>9s} "
          f"{'peak GiB':>8s}")
    for name in args.configs:
        best = None
        for mode in args.modes:
            if mode.endswith("compile") and device.type == "cpu" and not args.tiny:
                continue
            for workers in args.workers:
                try:
                    row = run_row(name, mode, workers, args, device)
                except torch.OutOfMemoryError:
                    print(f"{name:18s} {mode:16s} {workers:7d} out of memory at batch "
                          f"{args.batch}", flush=True)
                    torch.cuda.empty_cache()
                    continue
                print(f"{name:18s} {mode:16s} {workers:7d} {row['images/s']:9.1f} "
                      f"{100 * row['wait']:8.1f}% {row['peak']:8.2f}", flush=True)
                if not args.no_breakdown and (best is None
                                              or row["images/s"] > best[1]["images/s"]):
                    best = (mode, row)  # its network is kept for the breakdown
                del row
        if best is None or args.no_breakdown:
            continue
        mode, row = best
        parts = breakdown(row["nnet"], row["batch"], reps=args.breakdown_reps)
        total = sum(parts.values())
        print(f"{name} {mode}, one step of {args.batch} images: " + ", ".join(
            f"{key} {ms:.1f} ms ({100 * ms / total:.0f}%)" for key, ms in parts.items()))


if __name__ == "__main__":
    main()
