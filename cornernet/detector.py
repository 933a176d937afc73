"""`Detector`: a trained network that takes images and gives `Result`s.

    Detector.from_snapshot("cache/nnet/CornerNet_Tiny/CornerNet_Tiny_best.pkl")  # file alone
    Detector.from_config("CornerNet_Tiny", "best")        # a config and its snapshot
    Detector.from_onnx("CornerNet_Tiny_best.onnx")        # an exported file alone
    Detector.from_state_dict("CornerNet_500000.pkl", "CornerNet")  # official weights

`predict(source)` runs the config's inference (`system.sampling_function`: the same code as
test.py, so the same boxes) on every image of `source` and yields one `Result` per image or
frame, lazily.

Every way of opening a detector goes through `open_detector`'s pieces: the config is read (from
the config file, the snapshot's record or the export's metadata), then `overrides` (--set) are
applied to it by `apply_overrides`, whatever it came from. Arguments are checked when the object
is made, as UsageErrors in the command line's words (`thresh` is --thresh).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.config import (
    CONFIG_DIR,
    ConfigError,
    SystemConfig,
    apply_overrides,
    load_config,
    lookup,
    snapshot_arg,
)
from core.dbs import DatasetError, datasets
from core.dbs.detection import DETECTION
from core.deploy.defaults import DEFAULT_MAX_MAP, DEFAULT_OPSET
from core.deploy.network import InferenceNetwork, snapshot_config
from core.deploy.runtimes import RUNTIMES, open_network, runtime_of
from core.errors import UsageError
from core.inference.registry import inference_of
from core.nnet.checkpoint import (
    SNAPSHOT_FORMAT,
    class_record,
    config_difference,
    default_snapshot,
    read_snapshot,
    require_snapshot,
)
from core.utils import hints
from core.utils.files import probe_writable
from core.utils.threads import use_threads

from .defaults import DEFAULT_THRESH
from .outputs import Outputs, SavedPredictions
from .results import Result
from .sources import as_image, expand, frames

if TYPE_CHECKING:
    from core.deploy.exporter import ExportReport


def check_thresh(value: Any) -> float:
    """`value` as a threshold: a real number in [0, 1] (a UsageError naming --thresh else)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise UsageError(f"thresh (--thresh) {value!r}: expected a number between 0 and 1, got "
                         f"{type(value).__name__}")
    if not (math.isfinite(float(value)) and 0.0 <= float(value) <= 1.0):
        raise UsageError(f"thresh (--thresh) {value!r}: expected a number between 0 and 1")
    return float(value)


def snapshot_value(snapshot: int | str) -> int | str:
    """A snapshot named in Python as on the command line (`snapshot_arg`: 12, "12", "best")."""
    try:
        return snapshot_arg(str(snapshot))
    except ValueError as err:
        raise ConfigError(f"snapshot {snapshot!r}: {err}") from None


def class_table(system_config: SystemConfig, db_config: dict, strict: bool = False,
                recorded: tuple[list[str], list[int]] | None = None
                ) -> tuple[list[str], list[int]]:
    """(names, dataset ids) of classes 1..C: those the snapshot or exported file records
    (`recorded`, the network's `classes`) first, in any folder; else from the validation
    split's annotations where the dataset is there (a file from before names were recorded),
    else "class <c>" and c. `strict`: an annotation file the config names that is missing or
    broken is an error (a config the user named), not passed over (a snapshot or export
    carried to another machine)."""
    if recorded is not None:
        return list(recorded[0]), list(recorded[1])
    count = int(db_config["categories"])
    named = system_config.val_split in (db_config.get("annotation_files") or {})
    try:  # a dataset that is not there is not made (Shapes would be generated) for its names
        if not named and not system_config.data_dir.is_dir():
            raise FileNotFoundError(system_config.data_dir)
        db = lookup(datasets, system_config.dataset, "dataset")(
            db_config, split=system_config.val_split, sys_config=system_config)
        record = class_record(db)
        if record is not None:
            return record["names"], record["ids"]
    except (FileNotFoundError, ConfigError, DatasetError, OSError):
        if strict and named:
            raise
    return [f"class {c}" for c in range(1, count + 1)], list(range(1, count + 1))


class Detector:
    """A network with its test settings and class names.

    Args:
        network: the network of a registered runtime (core/deploy/runtimes.py): an
            `InferenceNetwork` (torch), an `OnnxNetwork` (onnxruntime), ...
        system_config, db_config: the config it was trained with (its test settings are used).
        thresh: results keep detections scoring above it (0: all, as test.py scores them).
        names, category_ids: of classes 1..C, one per class (default: those the network's
            file records, else the dataset's, `class_table`).
        threads: CPU threads (default: OMP_NUM_THREADS, else the CPUs this process may use;
            `core.utils.threads`). The constructors set them before the network is made.
    """

    def __init__(self, network: Any, system_config: SystemConfig, db_config: dict,
                 thresh: float = DEFAULT_THRESH, names: list[str] | None = None,
                 category_ids: list[int] | None = None, threads: int | None = None) -> None:
        self.thresh = check_thresh(thresh)
        count = int(db_config["categories"])
        for what, given in (("names", names), ("category_ids", category_ids)):
            if given is not None and (isinstance(given, (str, bytes)) or len(given) != count):
                got = f"a {type(given).__name__}" if isinstance(given, (str, bytes)) else \
                    f"{len(given)}"
                raise UsageError(f"{what}: expected a list of {count} (one per class of "
                                 f"{system_config.snapshot_name}, db.categories), got {got}")
        if category_ids is not None and len(set(category_ids)) < len(category_ids):
            twice = next(c for c in category_ids if list(category_ids).count(c) > 1)
            classes = [k + 1 for k, c in enumerate(category_ids) if c == twice]
            raise UsageError(f"category_ids: {twice!r} is the id of classes "
                             f"{', '.join(map(str, classes))}; each class needs an id of its "
                             "own (COCO results are matched to classes by id)")
        self.network, self.system_config = network, system_config
        self.threads = use_threads(threads)
        self.settings = DETECTION(db_config)  # test settings and normalisation statistics
        if names is None or category_ids is None:
            table = class_table(system_config, self.settings.configs,
                                recorded=getattr(network, "classes", None))
            names = table[0] if names is None else names
            category_ids = table[1] if category_ids is None else category_ids
        self.names, self.category_ids = [str(n) for n in names], [int(c) for c in category_ids]
        self._inference = inference_of(system_config.sampling_function)
        self.frames_skipped: list[str] = []  # why each unreadable input of `predict` was skipped
        self.saved: SavedPredictions | None = None  # what `predict(save_to=)` wrote

    # ------------------------------------------------------------------------ constructors
    @classmethod
    def from_snapshot(cls, path: str | Path, device: str | None = None,
                      raw_weights: bool = False, overrides: list[str] | None = None,
                      **kwargs: Any) -> Detector:
        """From a snapshot file alone: it records its resolved config and class names;
        `overrides` as --set."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no snapshot file {path}")
        use_threads(kwargs.get("threads"))
        snapshot = read_snapshot(path)
        system_config, db_config = apply_overrides(*snapshot_config(snapshot, path), overrides,
                                                   f"{path} (its config record)")
        network = InferenceNetwork(system_config, db_config, device).load(snapshot, path,
                                                                         raw_weights)
        return cls(network, system_config, db_config, **kwargs)

    @classmethod
    def from_config(cls, config: str, snapshot: int | str | None = None,
                    config_dir: Path | None = CONFIG_DIR, overrides: list[str] | None = None,
                    device: str | None = None, raw_weights: bool = False,
                    runtime: str | None = None, file: str | Path | None = None,
                    precision: str | None = None, **kwargs: Any) -> Detector:
        """From config `config` and its snapshot `snapshot` (an iteration, "best", default
        `system.max_iter`), as test.py finds them; `overrides` as --set. `runtime` (default
        torch), `file` and `precision` as test.py's --runtime, --onnx and --precision."""
        use_threads(kwargs.get("threads"))
        system_config, db_config = load_config(config, config_dir, overrides=overrides)
        testiter = (default_snapshot(system_config) if snapshot is None
                    else snapshot_value(snapshot))
        network, _ = open_network(runtime, system_config, DETECTION(db_config), testiter, device,
                                  None if file is None else Path(file), raw_weights, precision)
        return cls(network, system_config, db_config, **kwargs)

    @classmethod
    def from_state_dict(cls, path: str | Path, config: str,
                        config_dir: Path | None = CONFIG_DIR, device: str | None = None,
                        overrides: list[str] | None = None, **kwargs: Any) -> Detector:
        """From a plain state dict (an official CornerNet-Lite snapshot) and its config name."""
        use_threads(kwargs.get("threads"))
        system_config, db_config = load_config(config, config_dir, overrides=overrides)
        network = InferenceNetwork.from_file(path, system_config, db_config, device)
        return cls(network, system_config, db_config, **kwargs)

    @classmethod
    def from_onnx(cls, path: str | Path, device: str | None = None,
                  config_dir: Path | None = CONFIG_DIR, runtime: str | None = None,
                  precision: str | None = None, overrides: list[str] | None = None,
                  **kwargs: Any) -> Detector:
        """From a file tools/export.py wrote, alone: its metadata holds the config (the whole
        resolved one since it is recorded; the config's name before). `runtime`: a registered
        runtime of exported files (default: the one the file's suffix names, .onnx onnxruntime,
        .xml openvino); `precision`: one of that runtime's (default its first); `overrides` as
        --set (the test settings: the graph itself is fixed)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no exported file {path}")
        entry = runtime_of(path, runtime)
        if entry.read_metadata is None:
            raise UsageError(f"runtime {entry.name} does not open an exported file alone: "
                             "name one of " + ", ".join(
                                 name for name, other in RUNTIMES.items() if other.read_metadata))
        precision = entry.precision(precision)
        use_threads(kwargs.get("threads"))  # the exported files' runtimes take torch's count
        meta = _export_metadata(path, entry)
        if "config" not in meta:
            raise ConfigError(f"{path} holds no export metadata: export it with "
                              f"{hints.command('export')}")
        record = meta.get("settings")
        if record is not None:
            system_config, db_config = snapshot_config(
                {"format": SNAPSHOT_FORMAT, "config": record}, path)
        else:
            system_config, db_config = load_config(meta["config"], config_dir)
        system_config, db_config = apply_overrides(system_config, db_config, overrides,
                                                   f"{path} (its metadata)")
        # The file is checked against the config name it was exported under.
        exported_as = system_config if system_config.snapshot_name == meta["config"] else \
            system_config.replace(snapshot_name=meta["config"])
        network = entry.open_file(path, exported_as, db_config, device or "cpu", precision,
                                  False)
        return cls(network, system_config, db_config, **kwargs)

    # ------------------------------------------------------------------------- detection
    def detect(self, image: np.ndarray, source: str = "image", frame: int = 0) -> Result:
        """The result of one (H, W, 3) uint8 BGR image (a gray or BGRA one is converted, see
        `sources.as_image`)."""
        image = as_image(image, source)
        found = self._inference(self.settings, self.network, image)
        rows = [(cls, row) for cls, boxes in sorted(found.items()) for row in boxes
                if row[4] > self.thresh]
        rows.sort(key=lambda item: -item[1][4])
        classes = np.asarray([cls for cls, _ in rows], np.int64)
        table = np.asarray([row for _, row in rows], np.float32).reshape(-1, 5)
        return Result(boxes=table[:, :4].copy(), scores=table[:, 4].copy(), classes=classes,
                      names=[self.names[c - 1] for c in classes],
                      category_ids=np.asarray([self.category_ids[c - 1] for c in classes],
                                              np.int64),
                      source=source, frame=frame, image=image)

    def predict(self, source: Any, save_to: str | Path | None = None,
                log: Callable[[str], None] | None = None) -> Iterator[Result]:
        """One `Result` per image or frame of `source`: a path, folder, glob, list, numpy
        image (H, W, 3) uint8 BGR or a list of them, a video file, a camera index or a stream
        URL. Read lazily; unreadable pictures are skipped (`frames_skipped` counts them).

        With `save_to` (a folder, created if needed) it also writes there what
        `cornernet predict --out` writes: each picture drawn (`<name>.jpg`), each video,
        camera or stream drawn (`<name>.mp4`), and detections.jsonl with one line per result;
        a folder that holds earlier outputs keeps them (new names, as --exist-ok). The files
        are complete when the iteration ends or stops (the generator closed); `saved` then
        says what was written (`cornernet.outputs.SavedPredictions`). `log` gets one line per
        picture, video and unreadable input."""
        self.frames_skipped, self.saved = [], None
        items = expand(source)
        outputs = None
        if save_to is not None:
            probe_writable(Path(save_to), "save_to")
            outputs = Outputs(Path(save_to), items, self.thresh, log)
        try:
            for frame in frames(items):
                if frame.image is None:
                    self.frames_skipped.append(frame.error or frame.source)
                    if outputs is not None:
                        outputs.skip(frame)
                    continue
                result = self.detect(frame.image, frame.source, frame.index)
                if outputs is not None:
                    outputs.add(frame, result)
                yield result
        finally:
            if outputs is not None:
                self.saved = outputs.close()

    def __call__(self, source: Any) -> list[Result]:
        return list(self.predict(source))

    # ---------------------------------------------------------------------------- export
    def export(self, path: str | Path, runtime: str | None = None,
               precision: str | None = None, *, image: str | Path | None = None,
               opset: int = DEFAULT_OPSET, max_map: int = DEFAULT_MAX_MAP) -> ExportReport:
        """Write this detector's weights to `path` as `cornernet export` writes a snapshot:
        one ONNX graph with the decoding inside, checked against torch on `image` (default:
        the config's first validation image) and recording the snapshot it holds; for
        `runtime` (default onnxruntime; openvino also writes its IR beside it) at `precision`
        (default the runtime's first). Returns the `ExportReport` (`files`, `identity`,
        `differences`, `lines()`); raises `ExportCheckFailed` (nothing written) when the
        graph does not reproduce torch. Needs a detector in torch with a snapshot of ours
        (`from_snapshot`, `from_config`), whose iteration the file records."""
        from core.deploy.exporter import check_db, export_copy, export_network

        if not isinstance(self.network, InferenceNetwork):
            raise UsageError(f"export takes the weights of a detector in torch, not "
                             f"{type(self.network).__name__}: open it with from_snapshot or "
                             "from_config")
        if self.network.iteration is None:
            raise UsageError("these weights record no iteration (an official state dict): "
                             f"export them with {hints.command('export')} <Cfg> "
                             "--testiter <iteration>")
        network = export_copy(self.network)
        db = check_db(self.system_config, self.settings.configs)
        return export_network(network, db, Path(path), None if image is None else Path(image),
                              iteration=network.iteration,
                              classes={"names": self.names, "ids": self.category_ids},
                              runtime=runtime, precision=precision, opset=opset,
                              max_map=max_map)


def _export_metadata(path: Path, entry: Any) -> dict[str, Any]:
    """The export metadata of `path`; a file the runtime cannot read as a model is one line."""
    try:
        return entry.read_metadata(path)
    except UsageError:
        raise
    except Exception as err:  # noqa: BLE001 - the runtime's own parse errors (InvalidProtobuf)
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UsageError(f"{path}: not a model {entry.name} can read ({type(err).__name__}: "
                         f"{first}); name a file written by {hints.command('export')}") from None


def open_detector(config: str | None = None, snapshot: Path | None = None,
                  onnx: Path | None = None, testiter: int | str | None = None,
                  runtime: str | None = None, precision: str | None = None,
                  device: str | None = None,
                  config_dir: Path | None = CONFIG_DIR, overrides: list[str] | None = None,
                  thresh: float = DEFAULT_THRESH, threads: int | None = None,
                  log: Callable[[str], None] = print) -> Detector:
    """The detector `cornernet predict` opens: a snapshot file alone (`snapshot`), an
    exported file alone (`onnx` without `config`), or config `config`'s snapshot `testiter`
    in `runtime`; `overrides` (--set) applied whichever it is, on `threads` CPU threads.
    A config named beside a snapshot file is a check: it must exist and build the model and
    class count the snapshot records (whose config is the one used)."""
    if snapshot is not None:
        named = None if config is None else load_config(config, config_dir)
        detector = Detector.from_snapshot(snapshot, device, overrides=overrides,
                                          thresh=thresh, threads=threads)
        if named is not None:
            _check_config_beside(config, named, detector, Path(snapshot))
        return detector
    if config is None:
        return Detector.from_onnx(onnx, device, config_dir, runtime, precision,
                                  overrides=overrides, thresh=thresh, threads=threads)
    system_config, db_config = load_config(config, config_dir, overrides=overrides)
    testiter = default_snapshot(system_config, log) if testiter is None else testiter
    if runtime in (None, "torch"):
        require_snapshot(system_config, testiter, "pick --testiter")
    network, _ = open_network(runtime, system_config, DETECTION(db_config), testiter,
                              device, onnx, precision=precision, threads=threads)
    names, category_ids = class_table(system_config, db_config, strict=True,
                                      recorded=getattr(network, "classes", None))
    return Detector(network, system_config, db_config, thresh=thresh, names=names,
                    category_ids=category_ids, threads=threads)


def _check_config_beside(config: str, named: tuple[SystemConfig, dict], detector: Detector,
                         path: Path) -> None:
    """A UsageError when config `config` (`named`: as loaded) cannot be the config of the
    snapshot file `path` that `detector` opened: another model or class count."""
    def settings(system_config: SystemConfig, db_config: dict) -> dict:
        return {"system": {"model": system_config.model or system_config.snapshot_name},
                "db": {"categories": db_config["categories"]}}

    differences = config_difference(settings(detector.system_config, detector.settings.configs),
                                    settings(*named))
    if differences:
        raise UsageError(f"config {config} named beside --snapshot {path} is not the "
                         f"snapshot's: {'; '.join(differences)}; drop the config (a snapshot "
                         f"records its own) or name the one it was trained with")
