"""CornerNet-Lite, modern: corner-keypoint detectors to train, evaluate, run and deploy.

    import cornernet
    detector = cornernet.Detector.from_snapshot("cache/nnet/CornerNet_Tiny/CornerNet_Tiny_best.pkl")
    for result in detector.predict("video.mp4"):
        print(result.frame, result.boxes, result.names)

The names here are the public API; `core` is the engine behind it.
"""

__version__ = "0.1.0"
