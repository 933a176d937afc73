"""Deployment speed and AP on untrained weights: cornernet benchmark for CornerNet_Squeeze and
CornerNet on coco128, without a trained snapshot.

    python bench/bench_deploy.py [--configs CornerNet_Squeeze CornerNet] [--size 511]
                                 [--threads 1 2] [--images 8] [--calib-images 32]
                                 [--rows RUNTIME:PRECISION ...] [--reps 3] [--json PATH]
                                 [--profile] [--device cpu|cuda] [--batch 1 8]

For each config a temporary copy (coco128 for every split, 80 classes, its cache in a
temporary folder) gets a snapshot of iteration 0 with spread weights (bench/_spread.py:
N(0, 1/fan_in), maps that vary with the image, so that the export's check against torch is not
decided by near-tied scores; `--weights init` keeps the seed-0 initialisation instead), and
cornernet benchmark measures every runtime and precision on it, side by side in one process at
each thread count: ms per image on the first coco128 image resized to --size x --size, AP on the
first --images images (meaningless for untrained weights except as a check between rows),
file sizes, and the check. Speed does not depend on the weights, except torch's `peak_topk`
(shorter on the peaked maps of a trained model) and the dense corner search of the exported
graph, which does not depend on them. --profile then prints OpenVINO's time per layer type and
the slowest layers of each exported file, and its time compiled for the dynamic input the
runtime uses against a static --size x --size one. With --device cuda (bench/gpu_check.py's
deploy-gpu step) the rows are torch fp32, bf16 and torch.compile at --batch 1 and 8.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
from _coco128 import COCO128, REPO
from _spread import spread_weights

from core.config import load_config
from core.dbs import datasets
from core.deploy.openvino_runtime import cpu_properties
from core.nnet.py_factory import NetworkFactory
from cornernet.commands import benchmark


def random_snapshot(name: str, folder: Path, weights: str = "spread") -> Path:
    """configs/<name>.json under `folder` on coco128 with an untrained snapshot of iteration 0:
    seed 0's initialisation, then `spread_weights` unless `weights` is "init"."""
    config = json.loads((REPO / "configs" / f"{name}.json").read_text())
    config["system"].update(dataset="COCO", train_split="coco128", val_split="coco128",
                            test_split="coco128", max_iter=1, cache_dir=str(folder / "cache"),
                            result_dir=str(folder / "results"))
    config["db"].update(categories=80, image_dirs={"coco128": str(COCO128 / "images")},
                        annotation_files={"coco128": str(COCO128 / "annotations" /
                                                         "instances_coco128.json")})
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    (folder / "configs" / f"{name}.json").write_text(json.dumps(config))
    system_config, db_config = load_config(name, folder / "configs")
    db = datasets["COCO"](db_config, split=None, sys_config=system_config)
    torch.manual_seed(0)
    nnet = NetworkFactory(system_config, db, device="cpu")
    if weights == "spread":
        spread_weights(nnet.model)
    nnet.save_params(0)
    return folder / "configs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["CornerNet_Squeeze", "CornerNet"])
    parser.add_argument("--size", type=int, default=511)
    parser.add_argument("--threads", nargs="+", default=["1", str(os.cpu_count() or 1)])
    parser.add_argument("--images", default="8")
    parser.add_argument("--calib-images", default="32")
    parser.add_argument("--rows", nargs="+", default=None)
    parser.add_argument("--reps", default="3")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--device", default=None, help="as cornernet benchmark")
    parser.add_argument("--batch", nargs="+", default=None, help="as cornernet benchmark")
    parser.add_argument("--weights", choices=("spread", "init"), default="spread",
                        help="spread (maps that vary with the image) or seed 0's initialisation")
    parser.add_argument("--profile", action="store_true",
                        help="then OpenVINO's per-layer times of each exported file")
    args = parser.parse_args()
    status = 0
    for name in args.configs:
        with tempfile.TemporaryDirectory() as folder:
            configs = random_snapshot(name, Path(folder), args.weights)
            print(f"== {name} ({args.weights} weights), timed at {args.size}x{args.size}",
                  flush=True)
            argv = [name, "--testiter", "0", "--config-dir", str(configs), "--images",
                    args.images, "--threads", *args.threads, "--calib-images",
                    args.calib_images, "--reps", args.reps, "--time-size", str(args.size)]
            for option, value in (("--rows", args.rows), ("--batch", args.batch)):
                argv += [option, *value] if value else []
            argv += ["--device", args.device] if args.device else []
            if args.json:
                argv += ["--json", str(args.json.with_suffix(f".{name}.json"))]
            status |= benchmark.main(argv)
            if args.profile:
                for path in sorted((Path(folder) / "cache").rglob("*_0*.[ox][nm]*")):
                    profile(path, args.size, int(args.threads[0]))
                    static_against_dynamic(path, args.size, int(args.threads[0]))
    return status


def profile(path: Path, size: int, threads: int, top: int = 12) -> None:
    """Where OpenVINO's CPU plugin spends its time on `path` (an .onnx or IR .xml) at its
    default precision: ms per layer type and the slowest layers, one zero image of
    size x size (the same cost as a real one), at `threads` threads, after a warm-up."""
    import numpy as np
    import openvino as ov

    model = ov.Core().read_model(str(path))
    compiled = ov.Core().compile_model(model, "CPU", {
        **cpu_properties("default", threads), "PERF_COUNT": True})
    request = compiled.create_infer_request()
    image = np.zeros((1, 3, size, size), np.float32)
    request.infer({0: image})
    request.infer({0: image})
    layers = [(info.real_time.total_seconds() * 1000, info.node_type, info.exec_type,
               info.node_name) for info in request.profiling_info]
    total = sum(ms for ms, *_ in layers)
    by_type: dict[str, float] = {}
    for ms, node_type, exec_type, _ in layers:
        key = f"{node_type} ({exec_type})"
        by_type[key] = by_type.get(key, 0.0) + ms
    print(f"profile of {path.name} at {threads} thread(s), {size}x{size}: {total:.0f} ms "
          "in layers")
    for key, ms in sorted(by_type.items(), key=lambda item: -item[1])[:top]:
        print(f"  {ms:8.1f} ms {100 * ms / total:5.1f} %  {key}")
    print("  slowest layers:")
    for ms, node_type, exec_type, name in sorted(layers, reverse=True)[:top]:
        print(f"  {ms:8.1f} ms  {node_type} ({exec_type})  {name}")


def static_against_dynamic(path: Path, size: int, threads: int, reps: int = 5) -> dict[str, float]:
    """OpenVINO's ms per image on `path` compiled for the dynamic input the runtime uses (with
    the runtime's settings at its default precision), and for a static 1 x 3 x size x size
    input (what a fixed-size deployment could compile), at `threads` threads: the median of
    `reps` runs of each, interleaved, after a warm-up."""
    import statistics
    import time

    import numpy as np
    import openvino as ov

    core = ov.Core()
    image = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    requests = {}
    for kind in ("dynamic", "static"):
        model = core.read_model(str(path))
        if kind == "static":
            model.reshape({model.inputs[0].get_any_name(): [1, 3, size, size]})
        requests[kind] = core.compile_model(
            model, "CPU", cpu_properties("default", threads)).create_infer_request()
        requests[kind].infer({0: image})
    times: dict[str, list[float]] = {kind: [] for kind in requests}
    for _ in range(reps):
        for kind, request in requests.items():
            start = time.perf_counter()
            request.infer({0: image})
            times[kind].append(1000 * (time.perf_counter() - start))
    ms = {kind: statistics.median(values) for kind, values in times.items()}
    print(f"{path.name} at {threads} thread(s), {size}x{size}: {ms['dynamic']:.1f} ms with the "
          f"dynamic input, {ms['static']:.1f} ms compiled for a static one "
          f"({100 * (1 - ms['static'] / ms['dynamic']):+.1f} %)")
    return ms


if __name__ == "__main__":
    sys.exit(main())
