"""`Detector`: a trained network that takes images and gives `Result`s.

    Detector.from_snapshot("cache/nnet/CornerNet_Tiny/CornerNet_Tiny_best.pkl")  # file alone
    Detector.from_config("CornerNet_Tiny", "best")        # a config and its snapshot
    Detector.from_onnx("CornerNet_Tiny_best.onnx")        # an exported file alone
    Detector.from_state_dict("CornerNet_500000.pkl", "CornerNet")  # official weights

`predict(source)` runs the config's inference (`system.sampling_function`: the same code as
test.py, so the same boxes) on every image of `source` and yields one `Result` per image or
frame, lazily.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from core.config import (
    CONFIG_DIR,
    ConfigError,
    SystemConfig,
    load_config,
    lookup,
    snapshot_arg,
)
from core.dbs import DatasetError, datasets
from core.dbs.detection import DETECTION
from core.inference import test_func
from core.inference.network import InferenceNetwork
from core.inference.onnx_runtime import OnnxNetwork
from core.nnet.checkpoint import require_snapshot
from core.utils import hints

from .results import Result
from .sources import frames


def snapshot_value(snapshot: int | str) -> int | str:
    """A snapshot named in Python as on the command line (`snapshot_arg`: 12, "12", "best")."""
    try:
        return snapshot_arg(str(snapshot))
    except argparse.ArgumentTypeError as err:
        raise ConfigError(f"snapshot {snapshot!r}: {err}") from None


def class_table(system_config: SystemConfig, db_config: dict,
                strict: bool = False) -> tuple[list[str], list[int]]:
    """(names, dataset ids) of classes 1..C: from the validation split's annotations where
    the dataset is there, else "class <c>" and c. `strict`: an annotation file the config
    names that is missing or broken is an error (a config the user named), not passed over
    (a snapshot or export carried to another machine)."""
    count = int(db_config["categories"])
    named = system_config.val_split in (db_config.get("annotation_files") or {})
    try:  # a dataset that is not there is not made (Shapes would be generated) for its names
        if not named and not system_config.data_dir.is_dir():
            raise FileNotFoundError(system_config.data_dir)
        db = lookup(datasets, system_config.dataset, "dataset")(
            db_config, split=system_config.val_split, sys_config=system_config)
        if db.class_ids:
            return ([db.cls2name(c) for c in range(1, count + 1)],
                    [db.cls2coco(c) for c in range(1, count + 1)])
    except (FileNotFoundError, ConfigError, DatasetError, OSError):
        if strict and named:
            raise
    return [f"class {c}" for c in range(1, count + 1)], list(range(1, count + 1))


class Detector:
    """A network with its test settings and class names.

    Args:
        network: an `InferenceNetwork` (torch) or `OnnxNetwork` (onnxruntime).
        system_config, db_config: the config it was trained with (its test settings are used).
        thresh: results keep detections scoring above it (0: all, as test.py scores them).
    """

    def __init__(self, network: Any, system_config: SystemConfig, db_config: dict,
                 thresh: float = 0.3, names: list[str] | None = None,
                 category_ids: list[int] | None = None) -> None:
        self.network, self.system_config, self.thresh = network, system_config, thresh
        self.settings = DETECTION(db_config)  # test settings and normalisation statistics
        if names is None or category_ids is None:
            names, category_ids = class_table(system_config, self.settings.configs)
        self.names, self.category_ids = list(names), list(category_ids)
        self._inference = lookup(test_func, system_config.sampling_function,
                                 "sampling function")

    # ------------------------------------------------------------------------ constructors
    @classmethod
    def from_snapshot(cls, path: str | Path, device: str | None = None,
                      raw_weights: bool = False, **kwargs: Any) -> Detector:
        """From a snapshot file alone: it records its resolved config."""
        network = InferenceNetwork.from_file(path, device=device, raw_weights=raw_weights)
        return cls(network, network.system_config, network.db_config, **kwargs)

    @classmethod
    def from_config(cls, config: str, snapshot: int | str | None = None,
                    config_dir: Path | None = CONFIG_DIR, overrides: list[str] | None = None,
                    device: str | None = None, raw_weights: bool = False,
                    **kwargs: Any) -> Detector:
        """From config `config` and its snapshot `snapshot` (an iteration, "best", default
        `system.max_iter`), as test.py finds them; `overrides` as --set."""
        system_config, db_config = load_config(config, config_dir, overrides=overrides)
        testiter = system_config.max_iter if snapshot is None else snapshot_value(snapshot)
        path = require_snapshot(system_config, testiter, "train first or pick another")
        network = InferenceNetwork.from_file(path, system_config, db_config, device,
                                             raw_weights)
        return cls(network, system_config, db_config, **kwargs)

    @classmethod
    def from_state_dict(cls, path: str | Path, config: str,
                        config_dir: Path | None = CONFIG_DIR, device: str | None = None,
                        **kwargs: Any) -> Detector:
        """From a plain state dict (an official CornerNet-Lite snapshot) and its config name."""
        system_config, db_config = load_config(config, config_dir)
        network = InferenceNetwork.from_file(path, system_config, db_config, device)
        return cls(network, system_config, db_config, **kwargs)

    @classmethod
    def from_onnx(cls, path: str | Path, device: str | None = None,
                  config_dir: Path | None = CONFIG_DIR, runtime: str = "onnxruntime",
                  precision: str = "f32", **kwargs: Any) -> Detector:
        """From a file tools/export.py wrote, alone: its metadata holds the config (the whole
        resolved one since it is recorded; the config's name before). `runtime`:
        "onnxruntime", or "openvino" (an .onnx or its IR, at `precision` "f32" or "default")."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no ONNX file {path}")
        if runtime == "openvino":
            from core.inference.openvino_runtime import model_metadata, read_model
            meta = model_metadata(read_model(path))
        else:
            from core.inference.onnx_runtime import _ort, read_metadata
            meta = read_metadata(_ort().InferenceSession(str(path),
                                                         providers=["CPUExecutionProvider"]))
        if "config" not in meta:
            raise ConfigError(f"{path} holds no export metadata: export it with "
                              f"{hints.command('tools/export.py')}")
        record = meta.get("settings")
        if record is not None:
            from core.inference.network import snapshot_config
            from core.nnet.checkpoint import SNAPSHOT_FORMAT
            system_config, db_config = snapshot_config(
                {"format": SNAPSHOT_FORMAT, "config": record}, path)
        else:
            system_config, db_config = load_config(meta["config"], config_dir)
        if runtime == "openvino":
            from core.inference.openvino_runtime import OpenVinoNetwork
            network = OpenVinoNetwork(path, meta["config"], int(db_config["categories"]),
                                      device or "cpu", precision)
        else:
            network = OnnxNetwork(path, meta["config"], int(db_config["categories"]),
                                  device or "cpu")
        return cls(network, system_config, db_config, **kwargs)

    # ------------------------------------------------------------------------- detection
    def detect(self, image: np.ndarray, source: str = "image", frame: int = 0) -> Result:
        """The result of one (H, W, 3) uint8 BGR image."""
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

    def predict(self, source: Any) -> Iterator[Result]:
        """One `Result` per image or frame of `source`: a path, folder, glob, list, numpy
        image (H, W, 3) uint8 BGR or a list of them, a video file, a camera index or a stream
        URL. Read lazily; unreadable pictures are skipped (`frames_skipped` counts them)."""
        self.frames_skipped: list[str] = []
        for frame in frames(source):
            if frame.image is None:
                self.frames_skipped.append(frame.error or frame.source)
                continue
            yield self.detect(frame.image, frame.source, frame.index)

    def __call__(self, source: Any) -> list[Result]:
        return list(self.predict(source))
