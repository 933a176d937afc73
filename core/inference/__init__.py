"""Test-time inference per sampling function: `test_func[system.sampling_function]`.

Each entry is `inference(db, nnet, image (H, W, 3) uint8 BGR) -> {cls 1..C: (n, 5) float32
[x1, y1, x2, y2, score]}` in image pixels.
"""

from .cornernet import cornernet_inference
from .cornernet_saccade import cornernet_saccade_inference

test_func = {
    "cornernet": cornernet_inference,
    "cornernet_saccade": cornernet_saccade_inference,
}

__all__ = ["cornernet_inference", "cornernet_saccade_inference", "test_func"]
