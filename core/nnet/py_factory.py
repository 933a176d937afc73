"""NetworkFactory: a model with its loss and optimizer, one training step, and parameter I/O."""

from __future__ import annotations

import contextlib
import importlib
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..config import ConfigError, lookup
from ..models import load_original_state_dict, strip_module_prefix
from ..sample.render import normalize_image, render_targets

# Model modules by name: `system.model`, or the config name, selects one of these.
MODELS = {name: f"core.models.{name}" for name in (
    "CornerNet", "CornerNet_Squeeze", "CornerNet_Saccade", "CornerNet_Tiny")}

SNAPSHOT_FORMAT = "cornernet-lite-modern/1"


class NonFiniteLoss(FloatingPointError):
    """The loss of a step is NaN or infinite; `terms` holds every component."""

    def __init__(self, terms: dict[str, float]) -> None:
        self.terms = terms
        super().__init__(", ".join(f"{k}={v:.6g}" for k, v in terms.items()))


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def build_model(system_config: Any, categories: int) -> nn.Module:
    """The model module's `model(categories=...)`, chosen by `system.model` or the config name."""
    name = system_config.model or system_config.snapshot_name
    module = importlib.import_module(lookup(MODELS, name, "model"))
    return module.model(categories=categories)


def write_atomic(obj: Any, path: Path) -> None:
    """torch.save to a temporary file beside `path`, fsync, then rename over it.

    A crash at any moment leaves either the old file or the new one, never a torn one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class NetworkFactory:
    """Model + loss + optimizer of one process.

    Args:
        system_config: the resolved SystemConfig (optimizer, snapshot paths, amp).
        db: a dataset object; its `configs` give the class count and the target rules.
        device: where to run; CUDA when available, else CPU, unless given.
        distributed: wrap the model in DistributedDataParallel (process group already set up).
        chunks: this process's chunk sizes (see `_forward_loss`); None is one chunk.
    """

    def __init__(self, system_config: Any, db: Any, device: torch.device | str | None = None,
                 distributed: bool = False, chunks: list[int] | None = None) -> None:
        self.system_config = system_config
        self.db_configs = db.configs
        self.categories = db.configs["categories"]
        self.device = torch.device(device) if device is not None else default_device()
        self.model = build_model(system_config, self.categories).to(self.device)
        self.loss = self.model.loss
        self.distributed = distributed
        self.network: nn.Module = self.model
        if distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.network = nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        params = [p for p in self.model.parameters() if p.requires_grad]
        lr, decay = system_config.learning_rate, system_config.weight_decay
        if system_config.opt_algo == "adam":
            self.optimizer = torch.optim.Adam(params, lr=lr, weight_decay=decay)
        else:
            self.optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=decay)
        self._amp = system_config.amp and self.device.type == "cuda"
        self.chunks = chunks

    # ----------------------------------------------------------------------------- modes
    def train_mode(self) -> None:
        self.network.train()

    def eval_mode(self) -> None:
        self.network.eval()

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # ------------------------------------------------------------------------------ steps
    def _chunk_loss(self, chunk: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Render the targets and normalise the image on the device, run model and loss."""
        image = normalize_image(chunk["image"], chunk["color"])
        targets = render_targets(chunk, self.db_configs, self.categories)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self._amp):
            outs = self.network(image)
        return self.loss(outs, targets)

    def _chunks(self, batch: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """The batch on the device, split into this process's chunks.

        The loss of a batch is the mean of its chunks' losses, as the original's DataParallel
        computed it per GPU: the losses normalise over their own batch, so this is what makes
        one process with chunks [b, b] equal two processes with b each.
        """
        batch = {key: value.to(self.device, non_blocking=True) for key, value in batch.items()}
        sizes = self.chunks or [len(batch["image"])]
        if len(sizes) == 1:
            return [batch]
        parts = {key: torch.split(value, sizes) for key, value in batch.items()}
        return [{key: parts[key][i] for key in batch} for i in range(len(sizes))]

    def _all_finite(self, loss: torch.Tensor) -> bool:
        """Whether every rank's loss is finite: ranks must agree to skip or stop together."""
        finite = torch.isfinite(loss).to(torch.int32)
        if self.distributed:
            torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
        return bool(finite.item())

    def train(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """One optimisation step. Returns (loss, terms), both detached.

        Each chunk's graph is freed by its own backward (gradients accumulate; DDP reduces them
        once, with the last chunk). A non-finite loss raises NonFiniteLoss before the
        parameters are touched.
        """
        self.optimizer.zero_grad(set_to_none=True)
        chunks = self._chunks(batch)
        loss, terms = torch.zeros((), device=self.device), {}
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            sync = contextlib.nullcontext() if last or not self.distributed \
                else self.network.no_sync()
            with sync:
                part, parts = self._chunk_loss(chunk)
                (part / len(chunks)).backward()
            loss += part.detach() / len(chunks)
            for key, value in parts.items():
                terms[key] = terms.get(key, 0) + value / len(chunks)
        if not self._all_finite(loss):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLoss({k: float(v) for k, v in terms.items()})
        self.optimizer.step()
        return loss, terms

    @torch.no_grad()
    def validate(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """The loss of a batch (mean over chunks) without updating anything."""
        results = [self._chunk_loss(chunk) for chunk in self._chunks(batch)]
        loss = sum(part for part, _ in results) / len(results)
        terms = {key: sum(parts[key] for _, parts in results) / len(results)
                 for key in results[0][1]}
        return loss, terms

    @torch.no_grad()
    def test(self, image: torch.Tensor, **kwargs: Any) -> Any:
        """The model's test path: `model(image, test=True, **kwargs)` on this device."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self._amp):
            return self.model(image.to(self.device), test=True, **kwargs)

    # ------------------------------------------------------------------------ parameters
    def save_params(self, iteration: int, state: dict | None = None) -> Path:
        """Write snapshot `iteration` atomically: model, optimizer, config and `state`."""
        snapshot = {
            "format": SNAPSHOT_FORMAT,
            "iteration": iteration,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "config": {"system": _plain(self.system_config.full), "db": _plain(self.db_configs)},
            "rng": {"torch": torch.get_rng_state()},
            **(state or {}),
        }
        if self.device.type == "cuda":
            snapshot["rng"]["cuda"] = torch.cuda.get_rng_state(self.device)
        path = self.system_config.snapshot_file(iteration)
        write_atomic(snapshot, path)
        return path

    def load_params(self, iteration: int, model_only: bool = False) -> dict:
        """Load snapshot `iteration` (ours, or an official plain state dict).

        Restores model, optimizer and RNG states (only the model with `model_only`, for
        inference); returns the whole snapshot dict.
        """
        path = self.system_config.snapshot_file(iteration)
        if not path.is_file():
            have = sorted(self.system_config.snapshot_dir.glob("*.pkl"))
            raise FileNotFoundError(f"no snapshot for iteration {iteration}: {path} does not "
                                    f"exist; available: {', '.join(p.name for p in have) or 'none'}")
        snapshot = _load(path)
        if snapshot.get("format") != SNAPSHOT_FORMAT:
            load_original_state_dict(self.model, snapshot)
            return {"iteration": iteration}
        self.model.load_state_dict(snapshot["model"])
        if model_only:
            return snapshot
        self.optimizer.load_state_dict(snapshot["optimizer"])
        torch.set_rng_state(snapshot["rng"]["torch"])
        if "cuda" in snapshot["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(snapshot["rng"]["cuda"], self.device)
        return snapshot

    def load_pretrained_params(self, path: str | Path) -> list[str]:
        """Starting weights from a plain state dict or a snapshot; returns the skipped keys.

        Entries whose shape differs (a head for another class count) are skipped and named.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"system.pretrain: {path} does not exist")
        loaded = _load(path)
        loaded = strip_module_prefix(loaded.get("model", loaded)
                                     if loaded.get("format") == SNAPSHOT_FORMAT else loaded)
        own = self.model.state_dict()
        usable = {k: v for k, v in loaded.items() if k in own and own[k].shape == v.shape}
        skipped = sorted(set(loaded) - set(usable)) + sorted(set(own) - set(loaded))
        self.model.load_state_dict(usable, strict=False)
        if skipped:
            print(f"pretrained {path.name}: {len(usable)} entries loaded, {len(skipped)} skipped "
                  f"(missing or other shape): {', '.join(skipped[:8])}"
                  f"{' ...' if len(skipped) > 8 else ''}")
        return skipped


def _load(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same to a user
        raise ConfigError(f"cannot load {path}: {err}") from None


def _plain(value: Any) -> Any:
    """Config values as JSON-like python types (snapshots load with weights_only=True)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
