"""CornerNet-Lite, modern: corner-keypoint detectors, their trainer and their evaluator."""
