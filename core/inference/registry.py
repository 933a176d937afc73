"""The inference of each sampling function: `test_func[system.sampling_function]`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

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


test_func = {
    "cornernet": Inference(prepare_cornernet, run_cornernet),
    "cornernet_saccade": Inference(_whole_image, run_saccade),
}
