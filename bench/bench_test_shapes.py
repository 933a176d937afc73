"""What a new input shape and the input's memory layout cost at test time, on one device.

python bench/bench_test_shapes.py [--config CornerNet_Squeeze] [--device cuda] [--tiny]
    [--shapes 511x767 767x511 ...] [--batch 8] [--json rows.json]

For each input layout and each canvas shape (default: the GPU's buckets, core/inference/
buckets.py), a fresh canvas of that shape goes through the test path (`InferenceNetwork.test`:
network and decoding, the detections read back to the host, as test.py does) twice: the first
call's milliseconds hold whatever a new shape costs (cuDNN's plans for every convolution on a
GPU), the second's are the warm cost. Then the network alone (backbone and last stack's heads,
no decoding) at `--batch` images per call, warm, in milliseconds per image. The layouts:

    nchw       NCHW weights, NCHW input: what test.py feeds now (the input in the weights' layout)
    cl-input   NCHW weights, channels-last input: what test.py fed before on a GPU
    cl         channels-last weights and input

Random weights (seed 0): the cost does not depend on them. Every row is printed, and flushed, as
soon as it is measured, so a run cut short keeps its rows. `--tiny` rehearses on the CPU with
CornerNet_Tiny at small shapes (127 x 127 and 127 x 255, batch 2): seconds, not minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, run as a script

from core.config import load_config
from core.deploy.network import InferenceNetwork
from core.inference.buckets import GPU_BUCKETS
from core.inference.cornernet import decode_kwargs, network_input
from core.utils.device import resolve_device

LAYOUTS = ("nchw", "cl-input", "cl")
TINY_SHAPES = ((127, 127), (127, 255))


def shape_arg(text: str) -> tuple[int, int]:
    height, _, width = text.partition("x")
    return int(height), int(width)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None,
                        help="default CornerNet_Squeeze; --tiny: CornerNet_Tiny")
    parser.add_argument("--device", default=None, help="cuda, cpu (default: the GPU, else cpu)")
    parser.add_argument("--shapes", type=shape_arg, nargs="+", default=None,
                        help="canvas shapes HxW (default: the GPU buckets; --tiny: 127x127 "
                             "127x255)")
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--batch", type=int, default=None,
                        help="images per call of the network alone (default 8; --tiny 2)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="warm calls of the network alone, median taken (default 5; "
                             "--tiny 1)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="bf16: autocast, the test path and the network alone alike")
    parser.add_argument("--tiny", action="store_true", help="rehearse on the CPU at small shapes")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.tiny:
        args.device = args.device or "cpu"
    args.config = args.config or ("CornerNet_Tiny" if args.tiny else "CornerNet_Squeeze")
    args.shapes = args.shapes or list(TINY_SHAPES if args.tiny else GPU_BUCKETS)
    args.batch = args.batch or (2 if args.tiny else 8)
    args.repeats = args.repeats or (1 if args.tiny else 5)
    return args


def timed_ms(call: Callable[[], object], device: torch.device) -> float:
    """Milliseconds of `call`, the device's queue emptied before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return 1000 * (time.perf_counter() - start)


def layout_input(pixels: np.ndarray, db: dict, device: torch.device, layout: str
                 ) -> torch.Tensor:
    """(B, 3, H, W) float32 of uint8 canvases `pixels` (B, H, W, 3) in `layout`'s input format
    (the normalisation is test.py's)."""
    batch = network_input(pixels, np.array([0.408, 0.447, 0.470], np.float32),
                          np.array([0.290, 0.274, 0.278], np.float32), device)
    fmt = torch.contiguous_format if layout == "nchw" else torch.channels_last
    return batch.contiguous(memory_format=fmt)


def measure(args: argparse.Namespace, log: Callable[[str], None] = print) -> list[dict]:
    """The rows: per layout, per shape the first and second call's ms, and the network alone
    at `args.batch`, ms per image."""
    device = resolve_device(args.device)
    system, db = load_config(args.config)
    torch.manual_seed(0)
    nnet = InferenceNetwork(system, db, device).set_autocast(
        None if args.precision == "fp32" else args.precision)
    kwargs = decode_kwargs(db)
    where = f"{args.config} on {device}, {args.precision}"
    rng = np.random.default_rng(0)
    rows = []
    for layout in args.layouts:
        weights = torch.channels_last if layout == "cl" else torch.contiguous_format
        nnet.model.to(memory_format=weights)
        for height, width in args.shapes:
            pixels = rng.integers(0, 256, (1, height, width, 3), dtype=np.uint8)
            image = layout_input(pixels, db, device, layout)

            def call(image: torch.Tensor = image) -> None:
                nnet.test(image, **kwargs)[0].cpu()

            first, second = timed_ms(call, device), timed_ms(call, device)
            rows.append({"config": args.config, "device": str(device), "layout": layout,
                         "precision": args.precision, "shape": [height, width],
                         "first_ms": first, "second_ms": second})
            log(f"{where}, {layout}, {height}x{width}: first call {first:.1f} ms, second "
                f"{second:.1f} ms")
        height, width = args.shapes[0]
        pixels = rng.integers(0, 256, (args.batch, height, width, 3), dtype=np.uint8)
        batch = layout_input(pixels, db, device, layout)
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16,
                                                    enabled=args.precision == "bf16"):
            def network(batch: torch.Tensor = batch) -> None:
                nnet.model.last_stack(batch)

            network()  # the shape at this batch size is new: its cost is the rows' above
            runs = sorted(timed_ms(network, device) for _ in range(args.repeats))
        per_image = runs[len(runs) // 2] / args.batch
        rows.append({"config": args.config, "device": str(device), "layout": layout,
                     "precision": args.precision, "shape": [height, width],
                     "network_batch": args.batch, "network_ms_per_image": per_image})
        log(f"{where}, {layout}, {height}x{width}: network alone at batch {args.batch}: "
            f"{per_image:.2f} ms per image")
    nnet.model.to(memory_format=torch.contiguous_format)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = measure(args, log=lambda line: print(line, flush=True))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
