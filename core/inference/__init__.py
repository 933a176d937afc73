"""Inference and evaluation: per sampling function how to detect (`test_func`), the test loop
(`detect`) and COCO scoring (`score`).

`test_func[system.sampling_function]` is an `Inference`: `prepare(db, image (H, W, 3) uint8
BGR)` does the CPU work that can overlap with the network (it runs in a reader thread), and
`run(db, nnet, prepared list, timer)` returns per image {cls 1..C: (n, 5) float32 [x1, y1, x2,
y2, score]} in image pixels. `Inference.__call__(db, nnet, image)` does both for one image.
"""

from .coco_eval import score
from .cornernet import cornernet_inference
from .cornernet_saccade import cornernet_saccade_inference
from .folders import results_folder
from .loop import DetectionRun, detect
from .registry import Inference, test_func

__all__ = ["DetectionRun", "Inference", "cornernet_inference", "cornernet_saccade_inference",
           "detect", "results_folder", "score", "test_func"]
