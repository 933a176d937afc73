#!/usr/bin/env python
"""Export a snapshot as one ONNX graph with the decoding inside, then check it.

    python tools/export.py <Cfg> [--testiter N|best] [--out PATH] [--opset K] [--image IMG]

Writes cache/nnet/<Cfg>/<Cfg>_<iter>.onnx (or --out): input `image` (B, 3, H, W) float32,
normalised, B, H and W dynamic; outputs `detections` (B, num_dets, 8) float32 and, for Saccade,
`att0..att2`. Then runs onnx.checker, runs the file in onnxruntime on a real image (--image, by
default the first of the config's validation split) with its mirror image as a batch of 2, and
prints the largest differences from torch with the tolerance rule of the parity references.
Needs the onnx extra: pip install -e ".[onnx]".
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import torch

from core.config import CONFIG_DIR, ConfigError, load_config, lookup, snapshot_arg
from core.dbs import DatasetError, datasets
from core.engine.cli import run_cli
from core.errors import UsageError
from core.inference.cornernet import decode_kwargs, network_input, resize_and_pad
from core.inference.onnx_runtime import OnnxNetwork, onnx_file
from core.nnet.checkpoint import require_snapshot
from core.nnet.export import (
    DEFAULT_MAX_MAP,
    DeployGraph,
    compare_outputs,
    describe_sizes,
    export_onnx,
    metadata,
    output_names,
    size_rule,
)
from core.nnet.py_factory import NetworkFactory
from core.utils.images import ImageReadError, read_image

DEFAULT_OPSET = 18


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Export a snapshot to ONNX and check it")
    parser.add_argument("cfg_file", help="config name in configs/, e.g. CornerNet_Squeeze")
    parser.add_argument("--testiter", type=snapshot_arg, default=None,
                        help="snapshot iteration or 'best' (default: system.max_iter)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the .onnx file (default: beside the snapshot)")
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    parser.add_argument("--image", type=Path, default=None,
                        help="the image of the check (default: the validation split's first)")
    parser.add_argument("--max-map", type=int, default=DEFAULT_MAX_MAP,
                        help="largest output-map side the graph is exact for (corner pooling "
                             "steps); inputs up to about 4x (Squeeze 8x) this")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = parser.parse_args(argv)
    return args


def _require_extra() -> None:
    for name in ("onnx", "onnxscript", "onnxruntime"):
        try:
            __import__(name)
        except ImportError:
            raise UsageError(f"{name} is not installed: pip install -e '.[onnx]'") from None


def check_image(args: argparse.Namespace, db: object) -> tuple[np.ndarray, str]:
    """The (H, W, 3) uint8 image of the check and its name."""
    if args.image is not None:
        return read_image(args.image), str(args.image)
    try:
        inds = db.db_inds[:20]
    except ValueError:  # a dataset without a split: no images of its own
        inds = []
    for ind in inds:
        try:
            return db.read_image(ind), f"image {db.image_id(ind)} of the validation split"
        except ImageReadError:
            continue
    raise UsageError("no readable image in the config's validation split for the check: "
                     "name one with --image")


def main(args: argparse.Namespace) -> Path:
    _require_extra()
    system_config, db_config = load_config(args.cfg_file, args.config_dir)
    testiter = system_config.max_iter if args.testiter is None else args.testiter
    require_snapshot(system_config, testiter, "train first or pick --testiter")
    dataset = lookup(datasets, system_config.dataset, "dataset")
    try:
        db = dataset(db_config, split=system_config.val_split, sys_config=system_config)
    except (FileNotFoundError, ConfigError, DatasetError):
        db = dataset(db_config, split=None, sys_config=system_config)  # then --image is needed
    out = args.out or onnx_file(system_config, testiter)
    nnet = NetworkFactory(system_config, db, device="cpu")
    nnet.load_params(testiter, model_only=True)
    nnet.eval_mode()
    # The weights test.py evaluates: their average when the snapshot holds one (ema_decay).
    model = nnet.ema.module if nnet.evaluated_weights == "ema" else nnet.model
    settings = decode_kwargs(db.configs)
    if model.with_att:
        settings["no_border"] = True  # the saccade loop decodes every crop so

    # The reference comes from the model as trained (cummax pools), before export swaps them.
    image, image_name = check_image(args, db)
    canvas = resize_and_pad(image, db.configs["test_scales"][0])[0]
    batch = network_input(np.stack((canvas, cv2.flip(canvas, 1))), db.mean, db.std, "cpu")
    batch = batch.contiguous()
    reference = _outputs(nnet.test(batch, **settings), model.with_att)

    rule = size_rule(model)
    graph = DeployGraph(model, settings, args.max_map)
    example = torch.zeros(2, 3, rule["multiple"] - 1, 2 * rule["multiple"] - 1)
    meta = metadata(args.cfg_file, str(system_config.model or args.cfg_file),
                    int(db.configs["categories"]), settings, rule, output_names(model), testiter,
                    nnet.evaluated_weights, nnet.config_record())
    start = time.perf_counter()
    names = export_onnx(graph, out, example, args.opset, meta, args.max_map * rule["stride"])
    seconds = time.perf_counter() - start
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB, opset {args.opset}, "
          f"{seconds:.0f} s); onnx.checker passed")
    print(f"input: image (B, 3, H, W) float32, normalised; B dynamic, H and W "
          f"{describe_sizes(rule)}, up to {args.max_map * rule['stride']}")
    print(f"outputs: {', '.join(names)}; detections (B, {settings['num_dets']}, 8) "
          "[x1, y1, x2, y2, score, tl_score, br_score, cls] in output-map coordinates"
          + ("; att<j> (B, 1, h_j, w_j) attention after sigmoid" if model.with_att else ""))

    runtime = OnnxNetwork(out, args.cfg_file, int(db.configs["categories"]))
    got = _outputs(runtime.test(batch, **settings), model.with_att)
    report = compare_outputs(got, reference)
    shape = "x".join(map(str, batch.shape))
    verdict = "within" if report["ok"] else "OUTSIDE"
    print(f"check on {image_name} (input {shape}, image and mirror): onnxruntime vs torch, "
          f"largest differences: boxes {report['boxes']:.3g}, scores {report['scores']:.3g}"
          + (f", attention {report['attention']:.3g}" if model.with_att else "")
          + f"; valid detections {report['valid']}; {verdict} the tolerance |d| <= "
          "1e-4*mean|ref| + 1e-4*|ref| (shared/reference/README.md section 6)")
    if not report["ok"]:
        raise RuntimeError(f"{out} does not reproduce torch: {report.get('error', report)}")
    return out


def _outputs(found: object, with_att: bool) -> list[np.ndarray]:
    """A test path's result as [detections, att0, ...] numpy arrays."""
    if with_att:
        dets, atts = found
        return [dets.numpy(), *[att.numpy() for att in atts]]
    return [found[0].numpy()]


if __name__ == "__main__":
    sys.exit(run_cli(lambda: main(parse_args())))
