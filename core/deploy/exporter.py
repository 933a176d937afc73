"""Export: a torch network as one checked ONNX file, its runtime's own file beside it, and a
report of what was written and measured.

    report = export_snapshot(system_config, db_config, "best", runtime="openvino")
    print(*report.lines(), sep="\n")

`export_snapshot` is `cornernet export`'s whole workflow for a config's snapshot; `export_network`
does the part after the weights are loaded, for `cornernet.Detector.export` too, so the command,
`cornernet.export` and `Detector.export` write the same files. Before anything is written, the
graph (core/deploy/onnx_graph.py) passes onnx.checker and runs in onnxruntime on a real image
(the validation split's first, or the one named) with its mirror image as a batch of 2; its
largest differences from torch are measured with the tolerance rule of the parity references
(shared/reference/README.md section 6). Only a graph within it replaces the file, atomically (a
failed or killed export leaves the previous file and no temporary one); one outside it raises
`ExportCheckFailed`, which carries the report. The file records the snapshot it holds
(iteration, which weights, their digest, the largest input side: `ExportReport.identity`), which
the runtimes compare (core/deploy/identity.py).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from ..config import ConfigError, lookup
from ..dbs import DatasetError, datasets
from ..errors import RunFailure, UsageError
from ..inference.cornernet import decode_kwargs, network_input, resize_and_pad
from ..nnet.checkpoint import class_record, plain, read_snapshot, require_snapshot
from ..utils import hints
from ..utils.files import (
    check_free_disk,
    probe_writable,
    remove_stale_temp_files,
    snapshot_bytes,
    write_file_atomic,
)
from ..utils.images import ImageReadError, read_image
from .defaults import DEFAULT_MAX_MAP, DEFAULT_OPSET, EXPORTS_TO, check_export
from .identity import onnx_file
from .network import InferenceNetwork
from .onnx_graph import (
    IDENTITY_KEYS,
    DeployGraph,
    compare_outputs,
    describe_sizes,
    export_onnx,
    metadata,
    output_names,
    size_rule,
    weights_digest,
)
from .runtimes import RUNTIMES, Runtime, runtime


@dataclasses.dataclass(frozen=True)
class ExportReport:
    """What an export wrote and measured.

    Attributes:
        files: every file written, the .onnx first, then the runtime's own (an IR .xml);
            empty when the check failed.
        path: the .onnx file.
        runtime, precision: what the files are for (the runtime's precision, its first by
            default: the float graph serves each of them).
        identity: what the file records of its snapshot: iteration, weights ("ema" or
            "raw"), digest (SHA-256 of those weights), max_side.
        size: the .onnx file's bytes; opset; seconds: the export's time (the check's apart).
        sizes: the input sides the graph takes, in words; outputs: the output names;
            num_dets: detections per image; attention: whether it has attention outputs.
        image, shape: the check's image and its input shape (the image and its mirror).
        differences: `onnx_graph.compare_outputs` of onnxruntime against torch: largest
            "boxes", "scores", "attention" differences, "valid" rows per image, "ok".
        converted: what the runtime's own file is, in words ("OpenVINO IR, float32").
    """

    files: tuple[Path, ...]
    path: Path
    runtime: str
    precision: str
    identity: dict[str, Any]
    size: int
    opset: int
    seconds: float
    sizes: str
    outputs: tuple[str, ...]
    num_dets: int
    attention: bool
    image: str
    shape: tuple[int, ...]
    differences: dict[str, Any]
    converted: str | None = None

    @property
    def passed(self) -> bool:
        """Whether onnxruntime reproduced torch within the tolerance."""
        return bool(self.differences["ok"])

    def lines(self) -> list[str]:
        """The report as `cornernet export` prints it."""
        found = self.differences
        head = (f"exported {self.size / 2**20:.1f} MiB, opset {self.opset}, "
                f"{self.seconds:.0f} s; onnx.checker passed")
        inputs = (f"input: image (B, 3, H, W) float32, normalised; B dynamic, H and W "
                  f"{self.sizes}, up to {self.identity['max_side']}")
        outputs = (f"outputs: {', '.join(self.outputs)}; detections (B, {self.num_dets}, 8) "
                   "[x1, y1, x2, y2, score, tl_score, br_score, cls] in output-map coordinates"
                   + ("; att<j> (B, 1, h_j, w_j) attention after sigmoid" if self.attention
                      else ""))
        check = (f"check on {self.image} (input {'x'.join(map(str, self.shape))}, image and "
                 f"mirror): onnxruntime vs torch, largest differences: boxes "
                 f"{found['boxes']:.3g}, scores {found['scores']:.3g}"
                 + (f", attention {found['attention']:.3g}" if self.attention else "")
                 + f"; valid detections {found['valid']}; "
                 f"{'within' if self.passed else 'OUTSIDE'} the tolerance |d| <= "
                 f"1e-4*mean|ref| + 1e-4*|ref| ({hints.tolerance_doc()})")
        lines = [head, inputs, outputs, check]
        if self.files:
            lines.append(f"wrote {self.path} ({self.identity['weights']} weights of iteration "
                         f"{self.identity['iteration']})")
        lines += [f"wrote {file} ({self.converted})" for file in self.files[1:]]
        return lines


class ExportCheckFailed(RunFailure, RuntimeError):
    """The exported graph does not reproduce torch; nothing was written. `report` says by how
    much. A failure at run time (exit 1, one line), and a RuntimeError as before."""

    def __init__(self, report: ExportReport) -> None:
        found = report.differences
        super().__init__(f"the export does not reproduce torch: {found.get('error', found)}; "
                         f"{report.path} was not written (a previous file there is unchanged)")
        self.report = report


def require_extra() -> None:
    """A one-line UsageError naming the onnx extra unless its packages are installed."""
    for name in ("onnx", "onnxscript", "onnxruntime"):
        try:
            __import__(name)
        except ImportError:
            raise UsageError(f"{name} is not installed: {hints.install('onnx')}") from None


def target(name: str | None, precision: str | None) -> tuple[Runtime, str]:
    """The runtime of exported files (`name`, default onnxruntime) and its precision (default
    its first) an export is for; a one-line UsageError for a runtime that runs snapshots, or
    whose package for its own file is missing (now, not after the minutes of export)."""
    entry = runtime(EXPORTS_TO if name is None else name)
    if not entry.exported:
        names = [other.name for other in RUNTIMES.values() if other.exported]
        raise UsageError(f"runtime {entry.name} runs the snapshot itself, not an exported file: "
                         f"export for {' or '.join(names)}")
    precision = entry.precision(precision)
    if entry.convert is not None:
        entry.convert.require()
    return entry, precision


def check_db(system_config: Any, db_config: dict) -> Any:
    """The config's validation split, whose first image the check runs on; without one (no
    data here, a dataset without splits) the dataset alone: then an image must be named."""
    dataset = lookup(datasets, system_config.dataset, "dataset")
    try:
        return dataset(db_config, split=system_config.val_split, sys_config=system_config)
    except (FileNotFoundError, ConfigError, DatasetError):
        return dataset(db_config, split=None, sys_config=system_config)


def check_image(image: Path | None, db: Any) -> tuple[np.ndarray, str]:
    """The (H, W, 3) uint8 image of the check and its name: `image`, else the first readable
    of the first 20 of `db`'s split."""
    if image is not None:
        return read_image(image), str(image)
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


def export_snapshot(system_config: Any, db_config: dict, testiter: int | str,
                    out: Path | None = None, *, runtime: str | None = None,
                    precision: str | None = None, opset: int = DEFAULT_OPSET,
                    max_map: int = DEFAULT_MAX_MAP, raw_weights: bool = False,
                    image: Path | None = None) -> ExportReport:
    """Export snapshot `testiter` of the config to `out` (default: beside the snapshot,
    `identity.onnx_file`): the weights test evaluates (their average where the snapshot holds
    one, unless `raw_weights`), checked on `image` (default: the validation split's first).
    Every check that needs no export (the extra installed, `out` writable, `max_map` large
    enough) runs before the snapshot is read."""
    check_export(opset, max_map)
    require_extra()
    entry, precision = target(runtime, precision)
    path = require_snapshot(system_config, testiter, "train first or pick --testiter")
    db = check_db(system_config, db_config)
    out = Path(out) if out is not None else onnx_file(system_config, testiter)
    network = InferenceNetwork(system_config, db.configs, device="cpu")
    check_max_map(max_map, size_rule(network.model))
    check_out(out, sum(p.numel() for p in network.model.parameters()))
    snapshot = read_snapshot(path)
    network.load(snapshot, path, raw_weights=raw_weights)
    return export_network(network, db, out, image, runtime=entry.name, precision=precision,
                          iteration=int(snapshot.get("iteration", testiter)),
                          classes=snapshot.get("classes") or class_record(db), opset=opset,
                          max_map=max_map)


def export_copy(network: InferenceNetwork) -> InferenceNetwork:
    """A float32 copy of `network` on the CPU, to export (the export changes its model's
    corner pools): the same weights, which weights they are, iteration and classes."""
    copy = InferenceNetwork(network.system_config, network.db_config, device="cpu")
    copy.set_autocast(None)
    copy.model.load_state_dict(network.model.state_dict())
    copy.evaluated_weights, copy.iteration = network.evaluated_weights, network.iteration
    copy.classes = network.classes
    return copy


def export_network(network: InferenceNetwork, db: Any, out: Path, image: Path | None = None,
                   *, iteration: int, classes: dict | None, runtime: str | None = None,
                   precision: str | None = None, opset: int = DEFAULT_OPSET,
                   max_map: int = DEFAULT_MAX_MAP) -> ExportReport:
    """Export `network` (on the CPU, weights loaded; its model becomes the graph, so pass one
    built for the export or `export_copy`) as snapshot `iteration` with class record `classes`
    to `out`, checked on `image` (default: `db`'s first); `db`: a dataset of the network's
    config (`check_db`). Returns the report; raises `ExportCheckFailed` when the check fails."""
    check_export(opset, max_map)
    require_extra()
    entry, precision = target(runtime, precision)
    from .onnx_runtime import OnnxNetwork

    system_config, model = network.system_config, network.model
    network.set_autocast(None)  # the reference is float32, as the graph is
    rule = size_rule(model)
    check_max_map(max_map, rule)
    check_out(out, sum(p.numel() for p in model.parameters()))
    settings = decode_kwargs(db.configs)
    if model.with_att:
        settings["no_border"] = True  # the saccade loop decodes every crop so

    # The reference comes from the model as trained (cummax pools), before export swaps them.
    picture, image_name = check_image(image, db)
    canvas = resize_and_pad(picture, db.configs["test_scales"][0])[0]
    check_max_map(max_map, rule, max(canvas.shape[:2]), image_name)
    batch = network_input(np.stack((canvas, cv2.flip(canvas, 1))), db.mean, db.std, "cpu")
    batch = batch.contiguous()
    reference = _outputs(network.test(batch, **settings), model.with_att)

    name = str(system_config.snapshot_name)
    digest = weights_digest(model.state_dict())  # before the graph swaps the pools
    graph = DeployGraph(model, settings, max_map)
    example = torch.zeros(2, 3, rule["multiple"] - 1, 2 * rule["multiple"] - 1)
    max_side = max_map * rule["stride"]
    meta = metadata(name, str(system_config.model_name), int(db.configs["categories"]),
                    settings, rule, output_names(model), iteration, network.evaluated_weights,
                    digest, max_side, {"system": plain(system_config.full),
                                       "db": plain(db.configs)}, classes)
    start = time.perf_counter()
    try:
        content, names = export_onnx(graph, example, opset, meta, max_side)
    except ValueError as err:  # an opset the exporter fell back from
        raise UsageError(f"--opset {opset}: {err}; choose another --opset") from None
    seconds = time.perf_counter() - start

    checked = OnnxNetwork(out, name, int(db.configs["categories"]), content=content)
    got = _outputs(checked.test(batch, **settings), model.with_att)
    report = ExportReport(
        files=(), path=out, runtime=entry.name, precision=precision,
        identity={key: json.loads(meta[key]) for key in IDENTITY_KEYS},
        size=len(content), opset=opset, seconds=seconds, sizes=describe_sizes(rule),
        outputs=tuple(names), num_dets=int(settings["num_dets"]), attention=model.with_att,
        image=image_name, shape=tuple(batch.shape), differences=compare_outputs(got, reference),
        converted=None if entry.convert is None else entry.convert.what)
    if not report.passed:
        raise ExportCheckFailed(report)
    write_file_atomic(out, lambda file: file.write(content))
    files = (out,) if entry.convert is None else (out, entry.convert.write(out))
    return dataclasses.replace(report, files=files)


def _outputs(found: object, with_att: bool) -> list[np.ndarray]:
    """A test path's result as [detections, att0, ...] numpy arrays."""
    if with_att:
        dets, atts = found
        return [dets.numpy(), *[att.numpy() for att in atts]]
    return [found[0].numpy()]
