"""Host reads of a test batch's decode, counted on the CPU: what a GPU would wait for.

python bench/bench_decode_syncs.py [--configs CornerNet_Squeeze CornerNet ...] [--batch 8]
    [--graph-breaks]

For each config, one batch of random corner heads of a 511 x 767 canvas (the shape most of
coco128 and COCO gets) at the config's output stride and decode settings goes through `decode`
with the corner search a GPU runs (`peak_topk` hands maps that are not on the CPU to
`dense_topk`), inside core/utils/host_reads.py's counter. The last line,

    host reads per decode batch: N

is the largest count over the configs (the issue's goal: 0). `--graph-breaks` also reports
`torch._dynamo.explain`'s graph breaks of the same decode (it compiles: a minute on a busy CPU).
bench/bench_syncs.py calls `decode_reads()` for its own line.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, run as a script

from core.config import load_config
from core.inference.cornernet import decode_kwargs, output_size
from core.models.py_utils.decode import decode, dense_topk
from core.utils.host_reads import counting_host_reads

CONFIGS = ("CornerNet_Squeeze", "CornerNet", "CornerNet_Saccade")
# The canvas of a 480 x 640 image at scale 1 (the commonest COCO size).
CANVAS = (511, 767)


def decode_inputs(config: str, batch: int, seed: int = 0) -> tuple[dict, dict]:
    """Random heads (B, C, h, w) of `config` on a `CANVAS` input, with ties at the top-k cut,
    and the config's decode keyword arguments (Saccade's with `no_border`)."""
    system, db = load_config(config)
    height, width = output_size(CANVAS, db)
    classes = db["categories"]
    generator = torch.Generator().manual_seed(seed)

    def maps(channels: int, scale: float, shift: float) -> torch.Tensor:
        return torch.randn(batch, channels, height, width, generator=generator) * scale + shift

    heads = {"tl_heat": (maps(classes, 2, -6)).round(), "br_heat": maps(classes, 1, -6),
             "tl_tag": maps(1, 0.3, 0), "br_tag": maps(1, 0.3, 0),
             "tl_regr": maps(2, 0.3, 0.5), "br_regr": maps(2, 0.3, 0.5)}
    kwargs = decode_kwargs(db)
    if system.sampling_function == "cornernet_saccade":
        kwargs["no_border"] = True
    return heads, kwargs


def decode_reads(config: str = "CornerNet_Squeeze", batch: int = 8) -> Counter:
    """Host reads and data-dependent shapes, by op name, of one test batch's decode of
    `config` on the GPU's path (counted on the CPU)."""
    heads, kwargs = decode_inputs(config, batch)
    with counting_host_reads() as counted:
        decode(**heads, **kwargs, corners=dense_topk)
    return counted.reads


def graph_breaks(config: str = "CornerNet_Squeeze", batch: int = 2) -> int:
    """`torch._dynamo.explain`'s graph breaks of the same decode."""
    heads, kwargs = decode_inputs(config, batch)
    explained = torch._dynamo.explain(
        lambda: decode(**heads, **kwargs, corners=dense_topk))()
    return explained.graph_break_count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--graph-breaks", action="store_true")
    args = parser.parse_args()
    most = 0
    for config in args.configs:
        reads = decode_reads(config, args.batch)
        most = max(most, sum(reads.values()))
        named = ", ".join(f"{name} {count}" for name, count in sorted(reads.items()))
        print(f"{config}: decode of a batch of {args.batch}: {sum(reads.values())} host reads"
              f"{f' ({named})' if named else ''}", flush=True)
        if args.graph_breaks:
            print(f"{config}: graph breaks in the decode: {graph_breaks(config)}", flush=True)
    print(f"host reads per decode batch: {most}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
