"""CornerNet-Lite, modern: corner-keypoint detectors to train, evaluate, run and deploy.

    import cornernet
    detector = cornernet.Detector.from_snapshot("cache/nnet/CornerNet_Tiny/CornerNet_Tiny_best.pkl")
    for result in detector.predict("video.mp4"):          # one Result per frame, lazily
        print(result.frame, result.boxes, result.names)
    cornernet.train("CornerNet_Tiny", max_iter=200)       # what train.py prints, as a dict
    cornernet.evaluate("CornerNet_Tiny", "best")          # the COCO metrics

The names here are the public API; `core` is the engine behind it.
"""

from .api import evaluate, train
from .detector import Detector
from .results import Result

__version__ = "0.1.0"
__all__ = ["Detector", "Result", "__version__", "evaluate", "train"]
