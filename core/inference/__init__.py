"""Inference and evaluation: per sampling function how to detect (`registry.inference_of`), the
test loop (`loop.detect`) and COCO scoring (`coco_eval.score`).

`inference_of(system.sampling_function)` is an `Inference`: `prepare(db, image (H, W, 3) uint8
BGR)` does the CPU work that can overlap with the network (it runs in a reader thread), and
`run(db, nnet, prepared list, timer)` returns per image {cls 1..C: (n, 5) float32 [x1, y1, x2,
y2, score]} in image pixels. `Inference.__call__(db, nnet, image)` does both for one image.

The modules are imported by name (`from core.inference.loop import detect`): the package itself
imports nothing, so that a parser reads the evaluators' names (`coco_eval.BACKENDS`) and the
results folder's rule (`folders`) without torch.
"""
