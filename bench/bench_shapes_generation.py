"""Time the generation of the full default Shapes dataset (2000 train, 200 val images).

Usage: python bench/bench_shapes_generation.py [--train N] [--val N]
Generates into a temporary folder, prints seconds and images per second, and removes it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import _checkout  # noqa: F401 - the checkout's root on sys.path, before core

from core.config import check_db_config
from core.dbs.shapes import ensure_shapes


def main() -> None:
    defaults = check_db_config({})
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=defaults["num_train_images"])
    parser.add_argument("--val", type=int, default=defaults["num_val_images"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        root = ensure_shapes(Path(tmp) / "shapes", args.train, args.val)
        seconds = time.perf_counter() - start
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    total = args.train + args.val
    print(f"generated {total} images ({args.train} train, {args.val} val, {size / 2**20:.1f} MiB) "
          f"in {seconds:.1f} s: {total / seconds:.0f} images/s")


if __name__ == "__main__":
    main()
