"""The network inference runs: a model with the weights to test, and nothing of training.

`InferenceNetwork` is what test.py, demo.py and `cornernet.Detector` run in torch: the model of a
config with a snapshot's weights (the weight average when the snapshot has one), in eval mode on
one device. It has no optimizer, gradient scaler, freezing, SyncBatchNorm or distributed wrap, so
the training-time device rules do not apply: a snapshot trained with `system.sync_bn: true` or
`system.amp: "fp16"` on GPUs is tested on the CPU (SyncBatchNorm's weights are BatchNorm's; fp16
training keeps float32 weights). The averaged weights are loaded into the model itself, so hooks
on `model` (the decode timer of `detect`) see the weights that run.

It answers `core.inference.protocol.Network`, as every runtime's network does; it is the
runtime "torch" of the registry (core/deploy/runtimes.py), registered in core/deploy/builtin.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

# A snapshot's config record is checked as a config file is, against the db keys the datasets
# declare when they are registered.
from .. import dbs  # noqa: F401
from ..config import ConfigError, SystemConfig, check_db_config
from ..config.system import SYSTEM_KEYS
from ..models import build_model, load_original_state_dict, strip_module_prefix
from ..nnet.checkpoint import (
    SNAPSHOT_FORMAT,
    config_difference,
    plain,
    read_snapshot,
    recorded_classes,
)
from ..utils.device import resolve_device
from .unavailable import CompileUnavailable

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def snapshot_config(snapshot: dict, path: Path) -> tuple[SystemConfig, dict]:
    """The resolved config a snapshot of ours records, checked as a config file is.

    Settings a later version no longer knows are left out (an old snapshot still opens).
    """
    record = snapshot.get("config") if snapshot.get("format") == SNAPSHOT_FORMAT else None
    if not isinstance(record, dict) or "system" not in record:
        raise ConfigError(f"{path} records no config (an official or foreign state dict): "
                          "name the config it belongs to")
    system = {k: v for k, v in record["system"].items() if k in SYSTEM_KEYS}
    system_config = SystemConfig().update_config(system, f"{path} (its config record)")
    return system_config, check_db_config(record.get("db", {}), f"{path} (its config record)")


def weights_of(snapshot: dict, raw_weights: bool = False) -> tuple[dict, str]:
    """(state dict to test, "ema" or "raw") of a snapshot of ours or a plain state dict.

    The average (`ema`) when the snapshot holds one of at least one step, unless `raw_weights`.
    """
    if snapshot.get("format") != SNAPSHOT_FORMAT:
        return strip_module_prefix(snapshot), "raw"
    average = snapshot.get("ema")
    if average is not None and not raw_weights and int(average["n_averaged"]) > 1:
        return {key.removeprefix("module."): value for key, value in average.items()
                if key != "n_averaged"}, "ema"
    return snapshot["model"], "raw"


class InferenceNetwork:
    """A model of `system_config` with weights loaded, in eval mode on `device`.

    Args:
        system_config: names the model (`system.model`, else the config) and the precision
            (`system.amp`: autocast where the device runs it, float32 otherwise).
        db_config: `categories` sizes the heads.
        device: as `core.utils.device.resolve_device` (default: the current GPU, else CPU).
    """

    def __init__(self, system_config: SystemConfig, db_config: dict,
                 device: torch.device | str | None = None) -> None:
        self.system_config, self.db_config = system_config, db_config
        self.device = resolve_device(device)
        self.model: nn.Module = build_model(system_config.model_name, db_config["categories"])
        self.model.to(self.device).eval()
        amp = AMP_DTYPES.get(system_config.amp)
        # fp16 autocast on a CPU is slow and not what the weights need: float32 there.
        self._amp = None if amp is torch.float16 and self.device.type != "cuda" else amp
        self._forward: Any = self.model  # the model, or its torch.compile (`compile`)
        self.evaluated_weights = "raw"
        self.iteration: int | None = None  # the snapshot's, where it records one (`load`)
        # (names, category ids) the snapshot records (`checkpoint.recorded_classes`), or None
        self.classes: tuple[list[str], list[int]] | None = None

    def load(self, snapshot: dict, path: Path, raw_weights: bool = False) -> InferenceNetwork:
        """Load a snapshot's weights (the average unless `raw_weights`); a snapshot of another
        model or class count is a ConfigError naming the difference."""
        if snapshot.get("format") == SNAPSHOT_FORMAT:
            differences = config_difference(snapshot.get("config", {}), {
                "system": plain(self.system_config.full), "db": plain(self.db_config)})
            if differences:
                raise ConfigError(f"{path} does not fit this config: {'; '.join(differences)}")
        weights, self.evaluated_weights = weights_of(snapshot, raw_weights)
        iteration = snapshot.get("iteration") if snapshot.get("format") == SNAPSHOT_FORMAT \
            else None
        self.iteration = iteration if isinstance(iteration, int) else None
        self.classes = recorded_classes(snapshot.get("classes"), int(self.db_config["categories"]))
        try:
            load_original_state_dict(self.model, weights)
        except RuntimeError as err:
            raise ConfigError(f"{path} does not fit this config: {err}") from None
        return self

    @classmethod
    def from_file(cls, path: Path | str, system_config: SystemConfig | None = None,
                  db_config: dict | None = None, device: torch.device | str | None = None,
                  raw_weights: bool = False) -> InferenceNetwork:
        """The network of snapshot file `path`; without a config, the one the snapshot records
        (then `system_config`/`db_config` of the result are that record)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no snapshot file {path}")
        snapshot = read_snapshot(path)
        if system_config is None or db_config is None:
            system_config, db_config = snapshot_config(snapshot, path)
        return cls(system_config, db_config, device).load(snapshot, path, raw_weights)

    def eval_mode(self) -> None:
        self.model.eval()

    def set_autocast(self, amp: str | None) -> InferenceNetwork:
        """Run the test path under autocast to `amp` ("bf16" or "fp16") on this device, or in
        float32 (None), whatever `system.amp` says; its outputs stay float32 either way."""
        self._amp = None if amp is None else AMP_DTYPES[amp]
        return self

    def compile(self) -> InferenceNetwork:
        """Run the test path through `torch.compile` of the model (inductor), compiled at the
        first call of each input shape. Raises CompileUnavailable, here or at that first call,
        where torch.compile cannot run (no C++ compiler for the CPU, an unsupported Python)."""
        try:
            self._forward = torch.compile(self.model)
        except RuntimeError as err:
            raise CompileUnavailable(f"torch.compile cannot run here: {_first_line(err)}") \
                from None
        return self

    @property
    def compiled(self) -> bool:
        """Whether the test path runs through torch.compile (`compile`)."""
        return self._forward is not self.model

    @property
    def precision(self) -> str | None:
        """What the test path runs in, where it is not float32 eager: "bf16" or "fp16"
        (autocast), "compile" (torch.compile), or both; None for float32 eager."""
        parts = [name for name, dtype in AMP_DTYPES.items() if dtype is self._amp]
        return " ".join(parts + (["compile"] if self.compiled else [])) or None

    @torch.no_grad()
    def test(self, image: torch.Tensor, **kwargs: Any) -> Any:
        """The model's test path `model(image, test=True, **kwargs)` on this device."""
        if self._amp is None:
            return self._call(image, kwargs)
        with torch.autocast(self.device.type, dtype=self._amp):
            found = self._call(image, kwargs)
        return tuple(part.float() if torch.is_tensor(part) and part.is_floating_point()
                     else part for part in found)

    def _call(self, image: torch.Tensor, kwargs: dict) -> Any:
        if not self.compiled:
            return self.model(image.to(self.device), test=True, **kwargs)
        try:
            return self._forward(image.to(self.device), test=True, **kwargs)
        except torch._dynamo.exc.BackendCompilerFailed as err:  # e.g. no C++ compiler
            raise CompileUnavailable(f"torch.compile cannot run here: {_first_line(err)}") \
                from None


def _first_line(err: BaseException) -> str:
    """The first line of `err`; for a backend's failure, its cause's class and first line."""
    inner = getattr(err, "inner_exception", None)
    if isinstance(inner, BaseException):
        return f"{type(inner).__name__}: {_first_line(inner)}"
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__


def open_snapshot(path: Path, system_config: SystemConfig, db_config: dict, device: str,
                  precision: str, raw_weights: bool) -> InferenceNetwork:
    """The registry's opener (`core.deploy.runtimes.Opener`) of the runtime "torch": "config"
    runs as `system.amp` says, "fp32" in float32 whatever it says, "bf16" under bf16 autocast,
    "compile" through torch.compile in float32."""
    network = InferenceNetwork.from_file(path, system_config, db_config, device, raw_weights)
    if precision == "config":
        return network
    network.set_autocast(precision if precision in AMP_DTYPES else None)
    return network.compile() if precision == "compile" else network

