"""Canvas buckets against today's canvases: AP, input shapes and detections, on the CPU.

python bench/bench_buckets.py --snapshot cache/nnet/CornerNet_Tiny/CornerNet_Tiny_best.pkl
    [--data-dir DIR] [--buckets '[[511, 767], ...]'] [--shift '[[383, 383]]'] [--coco128 DIR]

Three comparisons of test.py's detection (`detect`, batch 1) without buckets (what test.py
computes on a CPU) and with them (what it computes on a GPU, `db.test_buckets: "auto"`):

1. The snapshot's own validation split with the GPU's buckets: AP before and after, distinct
   network input shapes, and whether the images whose canvas did not change kept their
   detections exactly.
2. The same split with `--shift` buckets, which move every canvas of that split (the README
   job's Shapes images all have 255 x 255 canvases, which the GPU's buckets leave alone): AP
   before and after when every image is padded.
3. coco128's validation images (found as the tests find them, or `--coco128`) through the same
   snapshot with the GPU's buckets: distinct input shapes and the unchanged canvases' detections
   (no AP: the snapshot's classes are not COCO's).

Detections of a changed canvas are "equal within the decode tolerance" when every class has as
many boxes, each within rtol 1e-5 / atol 1e-5 (docs: the reference tolerances, decode rows).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, run as a script

from bench._shared import coco128_dir
from core.config import SystemConfig
from core.dbs import datasets
from core.deploy.network import InferenceNetwork
from core.inference.buckets import GPU_BUCKETS, bucket_of
from core.inference.coco_eval import score
from core.inference.loop import ImageResult, detect
from core.utils.device import resolve_device

RTOL = ATOL = 1e-5  # decode rows (the reference tolerances)


class ShapeRecorder:
    """`nnet` with the shape of every input it is given recorded in `shapes`."""

    def __init__(self, nnet: Any) -> None:
        self._nnet = nnet
        self.shapes: set[tuple[int, int]] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nnet, name)

    def test(self, images: Any, **kwargs: Any) -> Any:
        self.shapes.add(tuple(images.shape[2:]))
        return self._nnet.test(images, **kwargs)


class ImageList:
    """The images of a COCO annotation file as a test set (no boxes): enough for `detect`."""

    def __init__(self, annotation_file: Path, image_dir: Path, configs: dict,
                 mean: np.ndarray, std: np.ndarray) -> None:
        images = json.loads(annotation_file.read_text())["images"]
        self._files = [image_dir / entry["file_name"] for entry in images]
        self._ids = [int(entry["id"]) for entry in images]
        self.db_inds = np.arange(len(images))
        self.configs, self.mean, self.std = configs, mean, std
        self.has_annotations = False

    def image_id(self, ind: int) -> int:
        return self._ids[ind]

    def read_image(self, ind: int) -> np.ndarray:
        return cv2.imread(str(self._files[ind]))


def canvas_moves(image_hw: Sequence[int], scales: Sequence[float],
                 buckets: Sequence[tuple[int, int]]) -> bool:
    """Whether an image of `image_hw` gets a bucket other than its canvas at some scale."""
    for scale in scales:
        canvas = (int(image_hw[0] * scale) | 127, int(image_hw[1] * scale) | 127)
        if bucket_of(canvas, tuple(buckets)) != canvas:
            return True
    return False


def same_detections(a: dict[int, np.ndarray], b: dict[int, np.ndarray], exact: bool) -> bool:
    """Whether two images' detections {cls: (n, 5)} are equal (bit for bit, or within the
    decode tolerance)."""
    for cls, boxes in a.items():
        if boxes.shape != b[cls].shape:
            return False
        if not (np.array_equal(boxes, b[cls]) if exact
                else np.allclose(boxes, b[cls], rtol=RTOL, atol=ATOL)):
            return False
    return True


def best_box_move(a: dict[int, np.ndarray], b: dict[int, np.ndarray]) -> tuple[float, float]:
    """(largest coordinate difference in pixels, score difference) between two images'
    best-scoring detections."""
    def best(dets: dict[int, np.ndarray]) -> np.ndarray:
        boxes = np.concatenate([*dets.values(), np.zeros((1, 5), np.float32)])
        return boxes[np.argmax(boxes[:, 4])]
    first, second = best(a), best(b)
    return float(np.abs(first[:4] - second[:4]).max()), float(abs(first[4] - second[4]))


def _run(db: Any, nnet: Any, system_config: SystemConfig, inds: Sequence[int],
         buckets: list) -> tuple[dict, set, dict]:
    """(detections, input shapes, image sizes by id) of `detect` with `buckets`."""
    recorder, sizes = ShapeRecorder(nnet), {}
    saved = db.configs["test_buckets"]
    db.configs["test_buckets"] = buckets

    def seen(result: ImageResult) -> None:
        sizes[result.image_id] = result.image.shape[:2]

    try:
        run = detect(db, recorder, system_config, inds, on_image=seen)
    finally:
        db.configs["test_buckets"] = saved
    return run.detections, recorder.shapes, sizes


def compare_buckets(db: Any, nnet: Any, system_config: SystemConfig, inds: Sequence[int],
                    buckets: Sequence[Sequence[int]], score_dir: Path | None = None
                    ) -> dict[str, Any]:
    """Detect `inds` of `db` without buckets and with `buckets`; what changed.

    Returns:
        {"images", "buckets", "shapes_before", "shapes_after" (distinct network input shapes),
        "unchanged", "unchanged_equal" (images whose canvas no bucket moved; of them, those with
        bit-equal detections), "changed", "changed_within_tolerance", "best_box_moves" (per
        changed image, `best_box_move`), and with `score_dir` and boxes in `db`: "ap_before",
        "ap_after"}.
    """
    buckets = [list(b) for b in buckets]
    before, shapes_before, sizes = _run(db, nnet, system_config, inds, [])
    after, shapes_after, _ = _run(db, nnet, system_config, inds, buckets)
    moved = {image_id: canvas_moves(hw, db.configs["test_scales"],
                                    [tuple(b) for b in buckets])
             for image_id, hw in sizes.items()}
    changed = [i for i, m in moved.items() if m]
    report = {
        "images": len(inds), "buckets": len(buckets),
        "shapes_before": len(shapes_before), "shapes_after": len(shapes_after),
        "unchanged": sum(not m for m in moved.values()),
        "unchanged_equal": sum(same_detections(before[i], after[i], exact=True)
                               for i, m in moved.items() if not m),
        "changed": sum(moved.values()),
        "changed_within_tolerance": sum(same_detections(before[i], after[i], exact=False)
                                        for i in changed),
        "best_box_moves": [best_box_move(before[i], after[i]) for i in changed],
    }
    if score_dir is not None and getattr(db, "has_annotations", False):
        for key, detections in (("ap_before", before), ("ap_after", after)):
            metrics = score(db, detections, score_dir / key, image_ids=list(before),
                            report=False, log=lambda line: None)
            report[key] = metrics["AP"]
    return report


def describe(name: str, report: dict[str, Any]) -> str:
    """One line of a comparison."""
    line = (f"{name}: {report['images']} images, distinct input shapes {report['shapes_before']}"
            f" -> {report['shapes_after']} ({report['buckets']} buckets); unchanged canvases "
            f"{report['unchanged']}, equal detections {report['unchanged_equal']}; changed "
            f"canvases {report['changed']}, within the decode tolerance "
            f"{report['changed_within_tolerance']}")
    if report["best_box_moves"]:
        moves = np.array(report["best_box_moves"])
        line += (f" (best box per image: median {np.median(moves[:, 0]):.2f} px, largest "
                 f"{moves[:, 0].max():.2f} px; score median {np.median(moves[:, 1]):.4f}, "
                 f"largest {moves[:, 1].max():.4f})")
    if "ap_before" in report:
        line += (f"; AP {report['ap_before']:.4f} -> {report['ap_after']:.4f} "
                 f"({report['ap_after'] - report['ap_before']:+.4f})")
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshot", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="system.data_dir of the snapshot's dataset")
    parser.add_argument("--buckets", type=json.loads, default=[list(b) for b in GPU_BUCKETS])
    parser.add_argument("--shift", type=json.loads, default=[[383, 383]],
                        help="buckets that move every canvas of the snapshot's split")
    parser.add_argument("--coco128", type=Path, default=None)
    parser.add_argument("--images", type=int, default=None, help="the first N of each split")
    args = parser.parse_args(argv)

    nnet = InferenceNetwork.from_file(args.snapshot, device=resolve_device("cpu"))
    system_config = nnet.system_config
    if args.data_dir is not None:
        system_config = system_config.update_config({"data_dir": str(args.data_dir)})
    db = datasets[system_config.dataset](dict(nnet.db_config), split=system_config.test_split,
                                         sys_config=system_config)
    inds = [int(i) for i in db.db_inds[:args.images]]
    with tempfile.TemporaryDirectory() as scratch:
        for name, buckets in (("GPU buckets", args.buckets), ("every canvas moved", args.shift)):
            report = compare_buckets(db, nnet, system_config, inds, buckets,
                                     score_dir=Path(scratch) / name.replace(" ", "_"))
            print(f"{system_config.test_split}, {name} {buckets}: {describe('', report)[2:]}",
                  flush=True)
    coco128 = args.coco128 or coco128_dir()
    if coco128 is not None:
        images = ImageList(coco128 / "annotations" / "instances_coco128_val.json",
                           coco128 / "images", db.configs, db.mean, db.std)
        inds = [int(i) for i in images.db_inds[:args.images]]
        report = compare_buckets(images, nnet, system_config, inds, args.buckets)
        print(f"coco128 val, GPU buckets {args.buckets}: {describe('', report)[2:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
