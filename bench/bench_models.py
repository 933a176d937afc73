"""Model speed and size: python bench/bench_models.py [--threads 2] [--reps 3] [--models M ...]

Prints the parameter count of every model, CornerNet-Squeeze forward+backward seconds per
image at 511 x 511 on the CPU, CornerNet-Tiny forward+backward seconds per batch of 16 at
128 x 128, and on CUDA (when available) Squeeze training images/s in float32 and under bfloat16
autocast. The backward pass starts from the sum of the means of all outputs (a stand-in for the
loss, whose own cost is negligible next to the network's). Peak memory is the process's maximum
resident set size. Needs the package importable (`pip install -e .`).
"""
from __future__ import annotations

import argparse
import contextlib
import resource
import time

import _checkout  # noqa: F401 - the checkout's root on sys.path, before core
import torch

from core.models import MODELS, build_model


def build(name: str) -> torch.nn.Module:
    return build_model(name, categories=80)


def step_seconds(model: torch.nn.Module, image: torch.Tensor, reps: int,
                 bf16: bool = False) -> float:
    """Median seconds of one forward+backward, after one warm-up step."""
    device = image.device.type
    autocast = (torch.autocast(device, dtype=torch.bfloat16) if bf16
                else contextlib.nullcontext())
    times = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        with autocast:
            outs = model(image)
            total = sum(t.float().mean() for maps in outs for t in maps)
        model.zero_grad(set_to_none=True)
        total.backward()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times[1:])[len(times[1:]) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1, help="Squeeze batch on the CPU")
    parser.add_argument("--gpu-batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=511, help="Squeeze input side (511 as trained)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS),
                        help="the models to count and time (the timings are Squeeze's and Tiny's)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    for name in args.models:
        count = sum(p.numel() for p in build(name).parameters())
        print(f"{name:18s} parameters {count:>13,d}")

    if "CornerNet_Tiny" in args.models:
        tiny = build("CornerNet_Tiny").train()
        seconds = step_seconds(tiny, torch.randn(16, 3, 128, 128), max(args.reps, 5))
        print(f"CornerNet_Tiny     cpu fwd+bwd 128x128 batch 16, {args.threads} threads: "
              f"{seconds:.3f} s/batch")
    if "CornerNet_Squeeze" not in args.models:
        return
    squeeze = build("CornerNet_Squeeze").train()
    image = torch.randn(args.batch, 3, args.size, args.size)
    seconds = step_seconds(squeeze, image, args.reps)
    print(f"CornerNet_Squeeze  cpu fwd+bwd {args.size}x{args.size} batch {args.batch}, "
          f"{args.threads} threads: {seconds / args.batch:.2f} s/image")

    if torch.cuda.is_available():
        squeeze = squeeze.cuda()
        image = torch.randn(args.gpu_batch, 3, args.size, args.size, device="cuda")
        for label, bf16 in (("fp32", False), ("bf16 autocast", True)):
            seconds = step_seconds(squeeze, image, max(args.reps, 5), bf16=bf16)
            print(f"CornerNet_Squeeze  cuda {label} train batch {args.gpu_batch}: "
                  f"{args.gpu_batch / seconds:.1f} images/s")
        print(f"cuda peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")

    # ru_maxrss is in KiB on Linux.
    print(f"peak rss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
