"""Export a snapshot as one ONNX graph with the decoding inside, then check it.

    cornernet export <Cfg> [--testiter N|best|FILE] [--out PATH] [--opset K] [--image IMG]
                           [--raw-weights] [--max-map N]

Writes cache/nnet/<Cfg>/<Cfg>_<iter>.onnx (or --out): input `image` (B, 3, H, W) float32,
normalised, B, H and W dynamic; outputs `detections` (B, num_dets, 8) float32 and, for Saccade,
`att0..att2`. Before anything is written, it runs onnx.checker, runs the graph in onnxruntime on
a real image (--image, by default the first of the config's validation split) with its mirror
image as a batch of 2, and prints the largest differences from torch with the tolerance rule of
the parity references; only a graph that passes replaces the file (atomically: a failed or killed
export leaves the previous file and no temporary one). The file records the snapshot it holds
(iteration, which weights, their digest, the largest input side), which the onnxruntime runtime
compares. Needs the onnx extra: pip install -e ".[onnx]".
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from core.config import (
    CONFIG_DIR,
    DEFAULT_SNAPSHOT,
    ConfigError,
    load_config,
    lookup,
    snapshot_or_file_arg,
)
from core.deploy.defaults import DEFAULT_MAX_MAP
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError
from core.utils import hints
from core.utils.files import (
    check_free_disk,
    probe_writable,
    remove_stale_temp_files,
    snapshot_bytes,
    write_file_atomic,
)

# torch, cv2 and the export itself are imported by the functions that use them, so that --help
# imports none of them (cornernet/commands/__init__.py).

DEFAULT_OPSET = 18
# The opsets the exporter and onnxruntime can both hold for this graph (torch's exporter writes
# opset 18 and converts; below 18 the conversion of our ops fails).
OPSETS = range(18, 24)


PROG = "cornernet export"


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog or PROG,
                                     description="Export a snapshot to ONNX and check it")
    parser.add_argument("cfg_file", help="config name in configs/, e.g. CornerNet_Squeeze")
    parser.add_argument("--testiter", type=snapshot_or_file_arg, default=None,
                        help="snapshot iteration, 'best', or a snapshot file of the config "
                             f"(<Cfg>_<iter>.pkl; {DEFAULT_SNAPSHOT})")
    parser.add_argument("--out", type=Path, default=None,
                        help="the .onnx file (default: beside the snapshot)")
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET,
                        help=f"ONNX opset, {OPSETS.start} to {OPSETS.stop - 1} (default "
                             f"{DEFAULT_OPSET})")
    parser.add_argument("--raw-weights", action="store_true",
                        help="export the trained weights, not their average (system.ema_decay)")
    parser.add_argument("--image", type=Path, default=None,
                        help="the image of the check (default: the validation split's first)")
    parser.add_argument("--max-map", type=int, default=DEFAULT_MAX_MAP,
                        help="largest output-map side the graph is exact for (corner pooling "
                             "steps); inputs up to about 4x (Squeeze 8x) this")
    parser.add_argument("--openvino", action="store_true",
                        help="also write the checked graph as an OpenVINO IR beside it "
                             "(<name>.xml and .bin, float32, same metadata; the openvino extra)")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = parser.parse_args(argv)
    if args.opset not in OPSETS:
        parser.error(f"--opset {args.opset}: this export writes opsets {OPSETS.start} to "
                     f"{OPSETS.stop - 1}")
    if args.max_map < 1:
        parser.error(f"--max-map must be at least 1, got {args.max_map}")
    return args


def _require_extra() -> None:
    for name in ("onnx", "onnxscript", "onnxruntime"):
        try:
            __import__(name)
        except ImportError:
            raise UsageError(f"{name} is not installed: {hints.install('onnx')}") from None


def check_image(args: argparse.Namespace, db: object) -> tuple[np.ndarray, str]:
    """The (H, W, 3) uint8 image of the check and its name."""
    from core.utils.images import ImageReadError, read_image

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


@keeps_process
def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> Path:
    import cv2
    import torch

    from core.dbs import DatasetError, datasets
    from core.deploy.identity import onnx_file
    from core.deploy.network import InferenceNetwork
    from core.deploy.onnx_graph import (
        DeployGraph,
        compare_outputs,
        describe_sizes,
        export_onnx,
        metadata,
        output_names,
        size_rule,
        weights_digest,
    )
    from core.deploy.onnx_runtime import OnnxNetwork
    from core.deploy.openvino_runtime import openvino, write_openvino_ir
    from core.inference.cornernet import decode_kwargs, network_input, resize_and_pad
    from core.nnet.checkpoint import (
        class_record,
        default_snapshot,
        plain,
        read_snapshot,
        require_snapshot,
        snapshot_label,
    )

    _require_extra()
    if args.openvino:
        openvino()  # one line now when it is missing, not after the minutes of export
    system_config, db_config = load_config(args.cfg_file, args.config_dir)
    testiter = snapshot_label(system_config, default_snapshot(system_config, log)
                              if args.testiter is None else args.testiter)
    path = require_snapshot(system_config, testiter, "train first or pick --testiter")
    dataset = lookup(datasets, system_config.dataset, "dataset")
    try:
        db = dataset(db_config, split=system_config.val_split, sys_config=system_config)
    except (FileNotFoundError, ConfigError, DatasetError):
        db = dataset(db_config, split=None, sys_config=system_config)  # then --image is needed
    out = args.out or onnx_file(system_config, testiter)
    network = InferenceNetwork(system_config, db.configs, device="cpu")
    model = network.model
    rule = size_rule(model)
    check_max_map(args.max_map, rule)  # before the snapshot is read and the export starts
    check_out(out, sum(p.numel() for p in model.parameters()))
    # The weights test.py evaluates: their average when the snapshot holds one (ema_decay).
    snapshot = read_snapshot(path)
    network.load(snapshot, path, raw_weights=args.raw_weights)
    settings = decode_kwargs(db.configs)
    if model.with_att:
        settings["no_border"] = True  # the saccade loop decodes every crop so

    # The reference comes from the model as trained (cummax pools), before export swaps them.
    image, image_name = check_image(args, db)
    canvas = resize_and_pad(image, db.configs["test_scales"][0])[0]
    check_max_map(args.max_map, rule, max(canvas.shape[:2]), image_name)
    batch = network_input(np.stack((canvas, cv2.flip(canvas, 1))), db.mean, db.std, "cpu")
    batch = batch.contiguous()
    reference = _outputs(network.test(batch, **settings), model.with_att)

    graph = DeployGraph(model, settings, args.max_map)
    example = torch.zeros(2, 3, rule["multiple"] - 1, 2 * rule["multiple"] - 1)
    max_side = args.max_map * rule["stride"]
    meta = metadata(args.cfg_file, str(system_config.model or args.cfg_file),
                    int(db.configs["categories"]), settings, rule, output_names(model),
                    int(snapshot.get("iteration", testiter)), network.evaluated_weights,
                    weights_digest(model.state_dict()), max_side,
                    {"system": plain(system_config.full), "db": plain(db.configs)},
                    snapshot.get("classes") or class_record(db))
    start = time.perf_counter()
    try:
        content, names = export_onnx(graph, example, args.opset, meta, max_side)
    except ValueError as err:  # an opset the exporter fell back from
        raise UsageError(f"--opset {args.opset}: {err}; choose another --opset") from None
    seconds = time.perf_counter() - start
    print(f"exported {len(content) / 2**20:.1f} MiB, opset {args.opset}, {seconds:.0f} s; "
          f"onnx.checker passed")
    print(f"input: image (B, 3, H, W) float32, normalised; B dynamic, H and W "
          f"{describe_sizes(rule)}, up to {args.max_map * rule['stride']}")
    print(f"outputs: {', '.join(names)}; detections (B, {settings['num_dets']}, 8) "
          "[x1, y1, x2, y2, score, tl_score, br_score, cls] in output-map coordinates"
          + ("; att<j> (B, 1, h_j, w_j) attention after sigmoid" if model.with_att else ""))

    runtime = OnnxNetwork(out, args.cfg_file, int(db.configs["categories"]), content=content)
    got = _outputs(runtime.test(batch, **settings), model.with_att)
    report = compare_outputs(got, reference)
    shape = "x".join(map(str, batch.shape))
    verdict = "within" if report["ok"] else "OUTSIDE"
    print(f"check on {image_name} (input {shape}, image and mirror): onnxruntime vs torch, "
          f"largest differences: boxes {report['boxes']:.3g}, scores {report['scores']:.3g}"
          + (f", attention {report['attention']:.3g}" if model.with_att else "")
          + f"; valid detections {report['valid']}; {verdict} the tolerance |d| <= "
          f"1e-4*mean|ref| + 1e-4*|ref| ({hints.tolerance_doc()})")
    if not report["ok"]:
        raise RuntimeError(f"the export does not reproduce torch: {report.get('error', report)}; "
                           f"{out} was not written (a previous file there is unchanged)")
    write_file_atomic(out, lambda file: file.write(content))
    print(f"wrote {out} ({network.evaluated_weights} weights of iteration {meta['iteration']})")
    if args.openvino:
        print(f"wrote {write_openvino_ir(out)} (OpenVINO IR, float32)")
    return out


def check_max_map(max_map: int, rule: dict[str, int], side: int | None = None,
                  image_name: str = "") -> None:
    """--max-map against what the export feeds the graph: its example input (up to twice the
    size multiple, less one) and the check image at the test scale (`side`); a UsageError in
    one line with the smallest value that does, instead of torch.export's failure minutes on."""
    stride = rule["stride"]
    needed, what = 2 * rule["multiple"] - 1, "the export's example input"
    if side is not None:
        needed, what = side, f"{image_name} at the test scale"
    if max_map * stride < needed:
        raise UsageError(f"--max-map {max_map} makes a graph for inputs up to {max_map * stride} "
                         f"pixels (output stride {stride}); {what} is {needed}: use --max-map "
                         f"{-(-needed // stride)} or more (default {DEFAULT_MAX_MAP})")


def check_out(out: Path, num_params: int) -> None:
    """One line, before the minutes of export, unless `out` can be written: not a folder, its
    folder writable with room for the file. Removes the temporary files of killed exports."""
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder: name the .onnx file to write")
    probe_writable(out.parent, "--out")
    check_free_disk(out.parent, snapshot_bytes(num_params, False), "the exported file", "--out")
    remove_stale_temp_files(out.parent)


def _outputs(found: object, with_att: bool) -> list[np.ndarray]:
    """A test path's result as [detections, att0, ...] numpy arrays."""
    if with_att:
        dets, atts = found
        return [dets.numpy(), *[att.numpy() for att in atts]]
    return [found[0].numpy()]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), argv=argv)


if __name__ == "__main__":
    sys.exit(main())
