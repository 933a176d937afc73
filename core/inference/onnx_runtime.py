"""The network test.py and demo.py run: torch eager, or an exported .onnx file in onnxruntime
(or in OpenVINO: core/inference/openvino_runtime.py, which shares these checks).

Both runtimes answer `test(images, **decode_kwargs)` as `NetworkFactory.test` does, so one
`detect()` loop, one inference per sampling function and one scorer serve both: only the network
and the decoding (inside the graph) differ. The graph's metadata (see core/nnet/export.py) must
name the config and class count being evaluated, and the decode settings it was exported with
must be the ones asked for; anything else is a one-line error saying what to do.

A file is also the export of one snapshot (`check_identity`): its iteration must be the one
asked for (results are filed under it), its weight digest that of the snapshot's weights now
(a retrained snapshot makes its old export stale), and its weights the ones asked for (the
average, or the trained ones with --raw-weights). A file from before the identity was recorded
is refused with the command that exports it again: nothing in it says which weights it holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.nnet.checkpoint import read_snapshot
from core.nnet.export import (
    IDENTITY_KEYS,
    INPUT_NAME,
    META_KEYS,
    describe_sizes,
    fits,
    snapshot_weights,
    weights_digest,
)

from ..errors import UsageError
from ..utils import hints

RUNTIMES = ("torch", "onnxruntime", "openvino")
# The OpenVINO precisions: f32 (equal to torch within the parity tolerance) or what the CPU
# plugin picks by default for speed (bf16 on CPUs with bf16 units, else f32).
PRECISIONS = ("f32", "default")
# Metadata an INT8 file adds to the export's (META_KEYS): how it was calibrated.
CALIBRATION = "calibration"


class MissingOnnxRuntime(UsageError):
    """onnxruntime is not installed."""


def onnx_file(system_config: Any, testiter: int | str) -> Path:
    """Where tools/export.py writes the graph of snapshot `testiter`: beside the snapshot."""
    return system_config.snapshot_file(testiter).with_suffix(".onnx")


def check_identity(meta: dict[str, Any], path: Path, system_config: Any, testiter: int | str,
                   raw_weights: bool) -> None:
    """A one-line UsageError unless the exported file `path` (metadata `meta`) holds the
    weights of snapshot `testiter` that are asked for (see the module docstring). Without the
    snapshot file (only the export was copied) the iteration alone is compared."""
    export = hints.command("tools/export.py", f"{system_config.snapshot_name} --testiter "
                           f"{testiter}" + (" --raw-weights" if raw_weights else ""))
    missing = [key for key in IDENTITY_KEYS if key not in meta]
    if missing:
        raise UsageError(f"{path} was exported before exports recorded their snapshot "
                         f"(no {', '.join(missing)} in its metadata), so it cannot be told "
                         f"from another snapshot's: export it again with {export}")
    if raw_weights and meta["weights"] != "raw":
        raise UsageError(f"{path} holds the average of the weights, but --raw-weights asks for "
                         f"the trained ones: export them with {export}")
    snapshot_path = system_config.snapshot_file(testiter)
    snapshot = read_snapshot(snapshot_path) if snapshot_path.is_file() else None
    # Results are filed under an asked number; `best` is the iteration its snapshot records.
    iteration = testiter if isinstance(testiter, int) or snapshot is None else \
        snapshot.get("iteration", testiter)
    if isinstance(iteration, int) and meta["iteration"] != iteration:
        raise UsageError(f"{path} was exported from iteration {meta['iteration']}, not "
                         f"iteration {iteration} (--testiter {testiter}): export iteration "
                         f"{iteration} with {export}, or evaluate --testiter "
                         f"{meta['iteration']}")
    if snapshot is not None:
        weights = snapshot_weights(snapshot, meta["weights"])
        if not weights or weights_digest(weights) != meta["digest"]:
            raise UsageError(f"{path} is stale: it was exported from iteration "
                             f"{meta['iteration']}'s earlier weights, and {snapshot_path.name} "
                             f"(iteration {iteration}) now holds other ones (trained again "
                             f"since): export it again with {export}")


def _ort() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise MissingOnnxRuntime(f"onnxruntime is not installed: {hints.install('onnx')}"
                                 ) from None
    return onnxruntime


def read_metadata(session: Any) -> dict[str, Any]:
    """The export metadata of an onnxruntime session, decoded (empty for a foreign file)."""
    props = session.get_modelmeta().custom_metadata_map
    return {key: json.loads(props[key]) for key in (*META_KEYS, CALIBRATION) if key in props}


def check_config(meta: dict[str, Any], path: Path, config: str, categories: int) -> None:
    """A one-line UsageError unless the file `path` (metadata `meta`) was exported from
    `config` with `categories` classes."""
    if meta.get("config") != config or meta.get("categories") != categories:
        raise UsageError(
            f"{path} was exported from config {meta.get('config', '?')} with "
            f"{meta.get('categories', '?')} classes, not {config} with {categories}: "
            f"export {config} with {hints.command('tools/export.py', config)} or pass its file "
            "to --onnx")


class OnnxNetwork:
    """An exported detector in onnxruntime, used like a NetworkFactory by the inference code.

    `test(images (B, 3, H, W) float32, **decode_kwargs)` returns what the torch model's test path
    returns: `(detections,)` with detections (B, num_dets, 8) float32 as `decode` gives them,
    or, for a model with attention heads, `(detections, [att (B, 1, h_j, w_j) float32, ...])`
    (only detections with `no_att=True`). Tensors come back on the CPU.

    Threads: onnxruntime uses as many as torch does (`torch.get_num_threads()`, which
    OMP_NUM_THREADS sets), so both runtimes follow the same setting.
    """

    def __init__(self, path: Path, config: str, categories: int, device: str = "cpu",
                 content: bytes | None = None) -> None:
        """`content`: the file's bytes when they are not written yet (the export's own check);
        `path` then only names it."""
        ort = _ort()
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        if torch.device(device).type == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise UsageError("--device cuda with --runtime onnxruntime needs "
                                 "onnxruntime-gpu; use --device cpu or install it")
            providers.insert(0, "CUDAExecutionProvider")
        try:
            self.session = ort.InferenceSession(str(path) if content is None else content,
                                                options, providers=providers)
        except Exception as err:  # noqa: BLE001 - onnxruntime raises its own plain types
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UsageError(f"{path} is not a readable ONNX file ({first}); export it again "
                             f"with {hints.command('tools/export.py')}") from None
        self.path = path
        self.meta = read_metadata(self.session)
        check_config(self.meta, path, config, categories)
        self.device = torch.device("cpu")
        self.outputs = [output.name for output in self.session.get_outputs()]
        # "ema" or "raw", as test.py reports it; files from before it was recorded hold raw ones
        self.evaluated_weights = self.meta.get("weights", "raw")

    def check_input(self, shape: tuple[int, ...]) -> None:
        """A one-line error unless (B, 3, H, W) is a size the exported network takes."""
        rule = self.meta["size_rule"]
        if len(shape) != 4 or shape[1] != 3 or not (fits(shape[2], rule) and
                                                     fits(shape[3], rule)):
            raise UsageError(f"{self.path} cannot take an input of shape {tuple(shape)}: it "
                             f"needs (B, 3, H, W) with H and W {describe_sizes(rule)}")
        largest = self.meta.get("max_side")
        if largest is not None and max(shape[2:]) > largest:
            raise UsageError(f"{self.path} is exact for inputs up to {largest} pixels a side, "
                             f"not {tuple(shape)}: export it again with a larger --max-map "
                             f"({hints.command('tools/export.py', '... --max-map N')}) or "
                             "test at a smaller "
                             "scale")

    def check_decode(self, kwargs: dict[str, Any]) -> None:
        """A one-line error unless `kwargs` are the decode settings the graph holds."""
        baked = self.meta["decode"]
        asked = {key: value for key, value in kwargs.items() if key != "no_att"}
        if asked != {key: baked.get(key) for key in asked} or set(baked) - set(asked):
            raise UsageError(f"{self.path} decodes with {baked}, but {asked} is asked for: "
                             "export the snapshot again with this config's test settings")

    def test(self, image: torch.Tensor, no_att: bool = False, **kwargs: Any) -> Any:
        self.check_input(tuple(image.shape))
        self.check_decode({**kwargs, "no_att": no_att})
        pixels = np.ascontiguousarray(image.detach().cpu().numpy(), dtype=np.float32)
        found = [torch.from_numpy(out) for out in self.infer(pixels)]
        if len(found) == 1:
            return (found[0],)
        return found[0] if no_att else (found[0], found[1:])

    def infer(self, pixels: np.ndarray) -> list[np.ndarray]:
        """The graph's outputs for a checked (B, 3, H, W) float32 input."""
        return self.session.run(self.outputs, {INPUT_NAME: pixels})
