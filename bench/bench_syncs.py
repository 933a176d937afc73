"""Host reads per step, counted on the CPU: what would make a GPU wait for the host.

    python bench/bench_syncs.py [--models CornerNet_Tiny CornerNet_Squeeze] [--batch 2]

A GPU runs ahead of the host until the host reads a value back (`.item()`, `bool(t)`, a copy
to the CPU) or an op's output shape depends on the data (`nonzero`, a boolean mask index):
then it idles while the host catches up. A GPU is rarely at hand, so the GPU's own training
path is built here, on the CPU (`step_path.resolve(config, "cuda")`: bf16 autocast, a fused
optimizer, static target rendering, one forward over the local batch; with an average of the
weights, whose update is part of the step), eagerly, so that every op is dispatched and
counted by `core.utils.host_reads.counting_host_reads`. Printed per measurement, one line:

    CornerNet_Tiny training: host reads per non-display step: 0
    CornerNet_Squeeze test: host reads per decode batch: 0

and, when it is not 0, the reads by op. Each measurement is one function of MEASUREMENTS: the
training step, and a test batch's decode on the GPU's path (bench/bench_decode_syncs.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench._batches import compact_batch, small_config
from core.engine.steps import TrainStep
from core.nnet import step_path
from core.nnet.py_factory import NetworkFactory
from core.utils.host_reads import counting_host_reads

MODELS = ("CornerNet_Tiny", "CornerNet_Squeeze")


@dataclasses.dataclass
class Counted:
    """One measurement: `label`, host reads per step (or per `per`), and the reads by op."""

    label: str
    per_step: float
    reads: Counter
    per: str = "non-display step"


def gpu_step(name: str, batch: int, side: int | None = None) -> tuple[TrainStep, dict]:
    """The GPU's training step of config `name` built on the CPU (two chunks in one forward,
    eager, with an average of the weights), and a batch for it."""
    system_config, db = small_config(name, side, batch_size=batch,
                                     chunk_sizes=[batch - batch // 2, batch // 2],
                                     ema_decay=0.9998)
    path = dataclasses.replace(step_path.resolve(system_config, "cuda", bf16=True),
                               compile=False)
    torch.manual_seed(0)
    nnet = NetworkFactory(system_config, SimpleNamespace(configs=db), device="cpu",
                          path=path)
    nnet.train_mode()
    step = TrainStep(nnet, system_config.nonfinite_loss, lambda line: None)
    return step, compact_batch(db, batch)


def training_reads(name: str, batch: int, steps: int = 2,
                   side: int | None = None) -> list[Counted]:
    """Reads of `steps` non-display training steps (after one that creates the optimizer's
    state), and of one display step (its settle and display values: read on purpose)."""
    step, data = gpu_step(name, batch, side)
    step(data, 1)
    step.settle(1)
    with counting_host_reads() as quiet:
        for it in range(2, 2 + steps):
            step(data, it)
    with counting_host_reads() as shown:
        loss, terms = step(data, 2 + steps)
        step.settle(2 + steps)
        [float(v) for v in (loss, *terms.values(), step.nnet.grad_norm)]
    return [Counted(f"{name} training", quiet.total / steps, quiet.reads),
            Counted(f"{name} training, display step", shown.total, shown.reads)]


def decode_rows(models: list[str], batch: int) -> list[Counted]:
    """Reads of one test batch's decode per model, on the GPU's path."""
    from bench.bench_decode_syncs import decode_reads

    rows = []
    for name in models:
        reads = decode_reads(name, batch)
        rows.append(Counted(f"{name} test", sum(reads.values()), reads, "decode batch"))
    return rows


# The measurements, each a function of the parsed arguments returning its Counted rows.
MEASUREMENTS: list[Callable[[argparse.Namespace], list[Counted]]] = [
    lambda args: [row for name in args.models
                  for row in training_reads(name, args.batch, args.steps)[:1]],
    lambda args: decode_rows(args.models, args.decode_batch),
]


def line(counted: Counted) -> str:
    """`<label>: host reads per non-display step: N` (or `per decode batch`)."""
    return f"{counted.label}: host reads per {counted.per}: {counted.per_step:g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--batch", type=int, default=2, help="images per step (two chunks)")
    parser.add_argument("--steps", type=int, default=2, help="non-display steps counted")
    parser.add_argument("--decode-batch", type=int, default=8, help="images per decode batch")
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    for measure in MEASUREMENTS:
        for counted in measure(args):
            print(line(counted), flush=True)
            if counted.per_step:
                print("  by op: " + ", ".join(f"{op} {n}" for op, n in
                                              counted.reads.most_common()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
