"""Deployment latency: python bench/bench_deploy.py [--configs ...] [--reps 3] [--threads 1 2]

Per image, torch eager against onnxruntime on the CPU at the same thread count (1 and all cores
by default), for CornerNet_Squeeze and CornerNet at their test settings: a coco128 image resized
and padded as test.py does (test scale 1; with `test_flipped` the image and its mirror form a
batch of 2, as in test.py), the network (image to the last stack's heads) and the decoding
(heads to detections) timed separately. The onnxruntime side runs the two halves of the exported
graph as two graphs built the same way as tools/export.py builds the whole (max_scan corner
pooling, dense corner search); the torch side is the model's own test path (cummax pooling,
`peak_topk`). Weights are random (speed does not depend on them, except torch's `peak_topk`,
whose candidate search is shorter on the peaked maps of a trained model). On a GPU (when torch
sees one and onnxruntime has its CUDA provider) the same rows are measured there.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time
import warnings
from functools import partial
from pathlib import Path

import cv2
import numpy as np
import torch
from _coco128 import COCO128, coco128_run

from core.inference.cornernet import decode_kwargs, network_input, resize_and_pad
from core.models import build_model
from core.models.py_utils.decode import decode, dense_peak_topk
from core.nnet.export import DeployGraph

IMAGE = COCO128 / "images" / "000000000529.jpg"


class Heads(torch.nn.Module):
    """The network half of the exported graph: image -> the last stack's six head maps."""

    def __init__(self, graph: DeployGraph) -> None:
        super().__init__()
        self.model = graph.model

    def forward(self, image: torch.Tensor) -> list[torch.Tensor]:
        cnvs, _ = self.model.hg(image)
        return self.model._heads(len(cnvs) - 1, cnvs[-1])


class Decoder(torch.nn.Module):
    """The decoding half: the six head maps -> detections (B, num_dets, 8)."""

    def __init__(self, settings: dict) -> None:
        super().__init__()
        self.settings = settings

    def forward(self, *heads: torch.Tensor) -> torch.Tensor:
        return decode(*heads, corners=dense_peak_topk, **self.settings)


def to_onnx(module: torch.nn.Module, inputs: tuple, path: Path) -> None:
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, inputs, str(path), dynamo=True, opset_version=18)


def median_seconds(run, reps: int) -> float:
    run()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def session(path: Path, threads: int, provider: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=[provider])


def bench_config(name: str, threads_list: list[int], reps: int, folder: Path) -> None:
    system_config, make_db = coco128_run(name, db={"categories": 80})  # the images' classes
    db = make_db()
    db_config = db.configs
    torch.manual_seed(0)
    model = build_model(system_config.model_name, db_config["categories"]).eval()
    settings = decode_kwargs(db_config)
    canvas = resize_and_pad(cv2.imread(str(IMAGE)), 1.0)[0]
    pixels = np.stack((canvas, cv2.flip(canvas, 1))) if db_config["test_flipped"] else canvas[None]
    image = network_input(pixels, db.mean, db.std, "cpu").contiguous()
    per_image = len(pixels)
    with torch.no_grad():
        cnvs, _ = model.hg(image)
        heads = model._heads(len(cnvs) - 1, cnvs[-1])
    graph = DeployGraph(build_model(system_config.model_name, db_config["categories"]).eval(),
                        settings)
    graph.model.load_state_dict(model.state_dict())
    start = time.perf_counter()
    to_onnx(Heads(graph), (image,), folder / f"{name}_heads.onnx")
    to_onnx(Decoder(settings), tuple(heads), folder / f"{name}_decode.onnx")
    print(f"{name}: input {'x'.join(map(str, image.shape))} ({per_image} per image), "
          f"export {time.perf_counter() - start:.0f} s")

    devices = [("cpu", "CPUExecutionProvider")]
    import onnxruntime as ort
    if torch.cuda.is_available() and "CUDAExecutionProvider" in ort.get_available_providers():
        devices.append(("cuda", "CUDAExecutionProvider"))
    feeds_heads = {"image": image.numpy()}
    for device, provider in devices:
        for threads in threads_list if device == "cpu" else [threads_list[-1]]:
            torch.set_num_threads(threads)
            rows = {"torch": torch_times(model, image, heads, settings, device, reps)}
            net = session(folder / f"{name}_heads.onnx", threads, provider)
            dec = session(folder / f"{name}_decode.onnx", threads, provider)
            names = [i.name for i in dec.get_inputs()]
            feeds_dec = dict(zip(names, [h.numpy() for h in heads]))
            rows["onnxruntime"] = (median_seconds(partial(net.run, None, feeds_heads), reps),
                                   median_seconds(partial(dec.run, None, feeds_dec), reps))
            for runtime, (network, decoding) in rows.items():
                print(f"| {name} | {device} | {threads} | {runtime} | "
                      f"{1000 * network / per_image:.0f} | {1000 * decoding / per_image:.1f} | "
                      f"{1000 * (network + decoding) / per_image:.0f} |", flush=True)


def torch_times(model: torch.nn.Module, image: torch.Tensor, heads: list, settings: dict,
                device: str, reps: int) -> tuple[float, float]:
    """Median seconds of torch's network (image -> heads) and decoding (heads -> detections)."""
    model = model.to(device)
    image = image.to(device)
    heads = [h.to(device) for h in heads]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def network() -> None:
        with torch.no_grad():
            cnvs, _ = model.hg(image)
            model._heads(len(cnvs) - 1, cnvs[-1])
        sync()

    def decoding() -> None:
        decode(*heads, **settings)
        sync()

    times = median_seconds(network, reps), median_seconds(decoding, reps)
    model.to("cpu")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["CornerNet_Squeeze", "CornerNet"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, os.cpu_count() or 1])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    print("| config | device | threads | runtime | network ms/image | decode ms/image | "
          "total ms/image |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.configs:
            bench_config(name, args.threads, args.reps, Path(folder))
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
