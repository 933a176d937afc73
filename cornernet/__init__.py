"""CornerNet-Lite, modern: corner-keypoint detectors to train, evaluate, run and deploy.

    import cornernet
    detector = cornernet.Detector.from_snapshot("cache/nnet/CornerNet_Tiny/CornerNet_Tiny_best.pkl")
    for result in detector.predict("video.mp4"):          # one Result per frame, lazily
        print(result.frame, result.boxes, result.names)
    cornernet.train("CornerNet_Tiny", max_iter=200)       # a TrainResult: status, best, AP
    cornernet.evaluate("CornerNet_Tiny", "best")          # the COCO metrics
    cornernet.export("CornerNet_Tiny", "best")            # the checked .onnx: an ExportReport

The names here are the public API; `core` is the engine behind it. They are imported when first
used, so that the `cornernet` command (cornernet.cli) sets up the process (OpenMP's wait policy,
core/utils/threads.py) before torch is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["Detector", "Result", "__version__", "benchmark", "evaluate", "export", "train"]
# Each public name from the module it lives in, imported when first used: `import cornernet`
# (and so `cornernet --help`, or a command's) costs no torch.
_HOMES = {"Detector": "detector", "Result": "results", "benchmark": "api", "evaluate": "api",
          "export": "api", "train": "api"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'cornernet' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
