"""The first parse of a COCO-train-sized annotation file: ours against pycocotools, side by side.

    python bench/bench_coco_parse.py [--scale 1.0] [--seed 0] [--keep]

Writes a seeded COCO instances file into /tmp (at --scale 1: 118,287 images, about 860,000
objects with polygon masks, 1 % crowd regions with RLE masks, about 300 MB, as COCO's
train2017), then runs, each in a fresh Python process one after the other: this project's first
load of it (`core.dbs.coco._cached_parse` on an empty cache folder: read, hash, parse, write
the cache), pycocotools' `COCO(file)` (json.load and its index), and this project's cached
start (the same call again, the cache now written). Prints seconds and the peak resident memory
of each process (ru_maxrss; an empty interpreter with the imports is printed too).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

IMAGES, OBJECTS = 118_287, 860_001  # COCO train2017
CATEGORIES = [k for k in range(1, 91) if k not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]


def write_file(path: Path, scale: float, seed: int) -> tuple[int, int]:
    """A COCO instances json of `scale` times train2017's counts, written in pieces."""
    rng = np.random.default_rng(seed)
    images, objects = max(1, round(IMAGES * scale)), max(1, round(OBJECTS * scale))
    widths = rng.integers(320, 641, images)
    heights = rng.integers(240, 641, images)
    owner = np.sort(rng.integers(0, images, objects))
    with open(path, "w") as file:
        file.write('{"info": {"description": "bench_coco_parse", "year": 2017}, '
                   '"licenses": [{"id": 1, "name": "bench", "url": ""}], "images": [')
        file.write(",".join(
            f'{{"license": 1, "file_name": "{k + 1:012d}.jpg", "coco_url": "", '
            f'"height": {h}, "width": {w}, "date_captured": "2013-11-14 17:02:52", '
            f'"flickr_url": "", "id": {k + 1}}}' for k, (w, h) in enumerate(zip(widths, heights))))
        file.write('], "annotations": [')
        for start in range(0, objects, 50_000):
            rows = []
            for k in range(start, min(start + 50_000, objects)):
                image = int(owner[k])
                width, height = int(widths[image]), int(heights[image])
                w, h = rng.uniform(2, width / 2), rng.uniform(2, height / 2)
                x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
                crowd = rng.uniform() < 0.01
                if crowd:
                    runs = rng.integers(1, 400, 40).tolist()
                    mask = f'{{"counts": {runs}, "size": [{height}, {width}]}}'
                else:
                    angles = np.sort(rng.uniform(0, 2 * np.pi, 12))
                    xs = x + w / 2 + np.cos(angles) * w / 2
                    ys = y + h / 2 + np.sin(angles) * h / 2
                    mask = "[[" + ",".join(f"{a:.2f},{b:.2f}" for a, b in zip(xs, ys)) + "]]"
                rows.append(f'{{"segmentation": {mask}, "area": {w * h * 0.7:.4f}, '
                            f'"iscrowd": {int(crowd)}, "image_id": {image + 1}, '
                            f'"bbox": [{x:.2f}, {y:.2f}, {w:.2f}, {h:.2f}], '
                            f'"category_id": {CATEGORIES[int(rng.integers(0, 80))]}, '
                            f'"id": {k + 1}}}')
            file.write(("," if start else "") + ",".join(rows))
        file.write('], "categories": [' + ",".join(
            f'{{"supercategory": "s", "id": {c}, "name": "class{c}"}}' for c in CATEGORIES) +
            "]}")
    return images, objects


CHILD = {
    "imports": "import core.dbs.coco, pycocotools.coco",
    "ours": "from core.dbs.coco import _cached_parse\n"
            "parsed = _cached_parse(PATH, CACHE, print)\n"
            "print('objects', len(parsed['boxes']), 'crowds', len(parsed['crowds']))",
    "pycocotools": "from pycocotools.coco import COCO\n"
                   "import contextlib, io\n"
                   "with contextlib.redirect_stdout(io.StringIO()):\n"
                   "    coco = COCO(str(PATH))\n"
                   "print('objects', len(coco.anns))",
}


def run_child(what: str, path: Path, cache: Path) -> tuple[float, float, str]:
    """(seconds, peak MB, its last line) of one fresh process doing `what`."""
    code = (f"import resource, time\nfrom pathlib import Path\nPATH = Path({str(path)!r})\n"
            f"CACHE = Path({str(cache)!r})\nstart = time.perf_counter()\n{CHILD[what]}\n"
            f"print('seconds', time.perf_counter() - start)\n"
            f"print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    if what == "imports":
        code = code.replace(CHILD[what], CHILD[what] + "\nstart = time.perf_counter()")
    lines = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(
                               Path(__file__).resolve().parents[1])}).stdout.splitlines()
    found = dict(line.split(" ", 1) for line in lines if line.startswith(("seconds", "peak")))
    said = next((line for line in lines if line.startswith("objects")), "")
    return float(found["seconds"]), int(found["peak"]) / 1024, said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="of COCO train2017's 118,287 images and 860,001 objects")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the written file")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_coco_parse-", dir="/tmp"))
    path = folder / "instances_train.json"
    start = time.perf_counter()
    images, objects = write_file(path, args.scale, args.seed)
    print(f"wrote {path}: {images} images, {objects} objects, "
          f"{path.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - start:.0f} s; "
          f"load {os.getloadavg()[0]:.1f}")
    cache = folder / "cache"
    cache.mkdir()
    print("| what | seconds | peak RSS (MB) |\n|---|---|---|")
    for what, name in (("imports", "interpreter and imports only"),
                       ("ours", "ours, first parse (empty cache)"),
                       ("pycocotools", "pycocotools COCO(file)"),
                       ("ours", "ours, cached start")):
        seconds, peak, said = run_child(what, path, cache)
        print(f"| {name} | {seconds:.1f} | {peak:.0f} |  {said}")
    print(f"load after: {os.getloadavg()[0]:.1f}")
    if not args.keep:
        for item in sorted(folder.rglob("*"), reverse=True):
            item.unlink() if item.is_file() else item.rmdir()
        folder.rmdir()


if __name__ == "__main__":
    main()
