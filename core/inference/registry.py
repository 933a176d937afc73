"""The inference of each sampling function: `inference_of(system.sampling_function)`.

The sampling functions are core/sample's one registry; their inference (this floor's code, which
core/sample cannot import) is attached here to each record of it. `test_func` is the original's
name for the same, by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..sample import CORNER_SAMPLING, SACCADE_SAMPLING, SamplingFunction, sampling_function
from .cornernet import prepare_cornernet, run_cornernet
from .cornernet_saccade import cornernet_saccade_inference
from .timing import StageTimer


@dataclass(frozen=True)
class Inference:
    """How one sampling function detects: `prepare` in the reader thread, `run` batched."""

    prepare: Callable[[Any, np.ndarray], Any]
    run: Callable[..., list[dict[int, np.ndarray]]]

    def __call__(self, db: Any, nnet: Any, image: np.ndarray) -> dict[int, np.ndarray]:
        return self.run(db, nnet, [self.prepare(db, image)])[0]


def _whole_image(db: Any, image: np.ndarray) -> np.ndarray:
    return image


def run_saccade(db: Any, nnet: Any, images: list[np.ndarray],
                timer: StageTimer | None = None) -> list[dict[int, np.ndarray]]:
    """Saccade inference image by image (its crops depend on each image's attention)."""
    timer = timer or StageTimer()
    with timer.stage("network"):
        return [cornernet_saccade_inference(db, nnet, image) for image in images]


_INFERENCES: dict[SamplingFunction, Inference] = {
    CORNER_SAMPLING: Inference(prepare_cornernet, run_cornernet),
    SACCADE_SAMPLING: Inference(_whole_image, run_saccade),
}
test_func = {fn.name: inference for fn, inference in _INFERENCES.items()}


def inference_of(name: str) -> Inference:
    """How sampling function `name` detects; a ConfigError listing the valid names for an unknown
    one."""
    return _INFERENCES[sampling_function(name)]
