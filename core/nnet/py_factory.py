"""NetworkFactory: a model with its loss and optimizer, one training step, and parameter I/O."""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..chunks import Deal
from ..config import ConfigError, lookup
from ..config_rules import config_difference
from ..models import load_original_state_dict, strip_module_prefix
from ..sample.render import normalize_image, render_targets
from ..utils.files import write_atomic
from .ema import WeightAverage
from .freeze import freeze, frozen_norms_to_eval
from .running_stats import RunningStatsMerge

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


AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_runtime(system_config: Any, device: torch.device) -> None:
    """Settings this device cannot run: a ConfigError before anything starts."""
    if device.type != "cuda" and system_config.amp == "fp16":
        raise ConfigError("system.amp \"fp16\" needs a GPU (float16 autocast with a gradient "
                          "scaler); use \"bf16\" or null on the CPU")
    if device.type != "cuda" and system_config.sync_bn:
        raise ConfigError("system.sync_bn needs GPUs: torch runs SyncBatchNorm only on "
                          "accelerators; set it to false for a CPU run")


class NetworkFactory:
    """Model + loss + optimizer of one process.

    Args:
        system_config: the resolved SystemConfig (optimizer, snapshot paths, amp, sync_bn,
            channels_last, compile).
        db: a dataset object; its `configs` give the class count and the target rules.
        device: where to run; CUDA when available, else CPU, unless given.
        distributed: wrap the model in DistributedDataParallel (process group already set up).
        share: this process's chunks of the global batch (`core.chunks.deal`); None is one
            process running the whole batch as one chunk.
    """

    def __init__(self, system_config: Any, db: Any, device: torch.device | str | None = None,
                 distributed: bool = False, share: Deal | None = None) -> None:
        self.system_config = system_config
        self.db_configs = db.configs
        self.categories = db.configs["categories"]
        self.device = torch.device(device) if device is not None else default_device()
        check_runtime(system_config, self.device)
        self.share = share
        self.distributed = distributed
        model = build_model(system_config, self.categories)
        self.frozen = freeze(model, system_config.freeze)
        # SyncBatchNorm makes one forward of the whole local batch per rank necessary: its
        # collectives must match across ranks whose chunk counts differ.
        self.one_forward = bool(system_config.sync_bn and distributed and share and share.world > 1)
        if self.one_forward:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        self._memory_format = (torch.channels_last if system_config.channels_last
                               else torch.contiguous_format)
        self.model = model.to(self.device, memory_format=self._memory_format)
        self.loss = self.model.loss
        self.network: nn.Module = self.model
        self._ddp: nn.parallel.DistributedDataParallel | None = None
        self._merge: RunningStatsMerge | None = None
        if distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            # Buffers are merged after each step (RunningStatsMerge), not broadcast from rank 0.
            self._ddp = nn.parallel.DistributedDataParallel(self.model, device_ids=ids,
                                                            forward_sync_buffers=False)
            self.network = self._ddp
            if not self.one_forward and share is not None:
                self._merge = RunningStatsMerge(self.model, share)
        if system_config.compile:
            self.network = torch.compile(self.network)
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self.ema = WeightAverage.of(self.model, system_config)  # None unless system.ema_decay
        self.use_ema = True  # the test path runs the average, if there is one
        self.grad_norm: torch.Tensor | None = None  # of the last step, before clipping
        params = self._params
        lr, decay = system_config.learning_rate, system_config.weight_decay
        if system_config.opt_algo == "adam":
            self.optimizer = torch.optim.Adam(params, lr=lr, weight_decay=decay)
        else:
            self.optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=decay)
        self._amp = AMP_DTYPES.get(system_config.amp)
        self.scaler = torch.amp.GradScaler(self.device.type,
                                           enabled=system_config.amp == "fp16")

    # ----------------------------------------------------------------------------- modes
    def train_mode(self) -> None:
        self.network.train()
        frozen_norms_to_eval(self.model, self.system_config.freeze)

    def eval_mode(self) -> None:
        self.network.eval()

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # ------------------------------------------------------------------------------ steps
    def _autocast(self) -> contextlib.AbstractContextManager:
        return torch.autocast(self.device.type, dtype=self._amp or torch.float32,
                              enabled=self._amp is not None)

    def _image(self, chunk: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, 3, H, W) float32 normalised image, in the model's memory format."""
        image = normalize_image(chunk["image"], chunk["color"])
        return image.contiguous(memory_format=self._memory_format)

    def _chunk_loss(self, chunk: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Render the targets and normalise the image on the device, run model and loss."""
        targets = render_targets(chunk, self.db_configs, self.categories)
        with self._autocast():
            outs = self.network(self._image(chunk))
        return self.loss(outs, targets)

    def _whole_batch_losses(self, batch: dict[str, torch.Tensor],
                            chunks: list[dict[str, torch.Tensor]]) -> list[tuple]:
        """One forward of the whole local batch, then the loss of each chunk of its outputs."""
        with self._autocast():
            outs = self.network(self._image(batch))
        sizes = [len(chunk["image"]) for chunk in chunks]
        return [self.loss(part, render_targets(chunk, self.db_configs, self.categories))
                for part, chunk in zip(_split_outputs(outs, sizes), chunks)]

    def _to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {key: value.to(self.device, non_blocking=True) for key, value in batch.items()}

    def _chunks(self, batch: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """This process's chunks of a batch already on the device."""
        sizes = self.share.mine if self.share else [len(batch["image"])]
        if len(sizes) == 1:
            return [batch]
        parts = {key: torch.split(value, sizes) for key, value in batch.items()}
        return [{key: parts[key][i] for key in batch} for i in range(len(sizes))]

    def _global_mean(self, losses: list[tuple[torch.Tensor, dict]]) -> tuple[torch.Tensor, dict]:
        """The mean over every chunk of the global batch of the loss and of each term.

        The same number on every rank (one all-reduce), and the one a single process running
        every chunk would print. Non-finite on one rank makes it non-finite everywhere.
        """
        keys = list(losses[0][1])
        local = torch.stack([sum(loss.detach().float() for loss, _ in losses)]
                            + [sum(terms[key].float() for _, terms in losses) for key in keys])
        chunks = len(self.share.sizes) if self.share else len(losses)
        if self.distributed:
            torch.distributed.all_reduce(local)
        mean = local / chunks
        return mean[0], dict(zip(keys, mean[1:]))

    def train(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """One optimisation step. Returns (loss, terms): means over every chunk of the global
        batch, detached, equal on every rank.

        Each chunk's loss is scaled by `share.loss_weight` before its backward, so that DDP's
        averaged gradient is that of the mean over all chunks. Without SyncBN, each chunk's graph
        is freed by its own backward (gradients accumulate; DDP reduces them once, with the last
        chunk). A non-finite loss raises NonFiniteLoss before the parameters are touched.
        """
        self.optimizer.zero_grad(set_to_none=True)
        batch = self._to_device(batch)
        chunks = self._chunks(batch)
        weight = self.share.loss_weight if self.share else 1.0 / len(chunks)
        # A skipped step must leave the running statistics as they were ("stop" ends the run).
        buffers = ([b.clone() for b in self.model.buffers()]
                   if self.system_config.nonfinite_loss == "skip" else [])
        if self._merge is not None:
            self._merge.begin()
        if self.one_forward:
            losses = self._whole_batch_losses(batch, chunks)
            self.scaler.scale(sum(loss for loss, _ in losses) * weight).backward()
        else:
            losses = []
            for i, chunk in enumerate(chunks):
                last = i == len(chunks) - 1
                sync = contextlib.nullcontext() if last or self._ddp is None \
                    else self._ddp.no_sync()
                with sync:
                    loss, terms = self._chunk_loss(chunk)
                    self.scaler.scale(loss * weight).backward()
                losses.append((loss.detach(), terms))
        if self._merge is not None:
            self._merge.finish()
        loss, terms = self._global_mean(losses)
        if not bool(torch.isfinite(loss)):
            self.optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                for now, before in zip(self.model.buffers(), buffers):
                    now.copy_(before)
            raise NonFiniteLoss({k: float(v) for k, v in terms.items()})
        self.grad_norm = self._clip_gradients()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.ema is not None:
            self.ema.update(self.model)
        return loss, terms

    def _clip_gradients(self) -> torch.Tensor:
        """The total 2-norm of the (unscaled) gradients, before clipping; with
        `system.clip_grad_norm` the gradients are scaled so that their norm is at most that."""
        self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self._params if p.grad is not None]
        norm = nn.utils.get_total_norm(grads)
        limit = self.system_config.clip_grad_norm
        if limit is not None:
            nn.utils.clip_grads_with_norm_(self._params, limit, norm)
        return norm.detach()

    @torch.no_grad()
    def validate(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """The loss of a batch (mean over every chunk of the global batch), updating nothing."""
        batch = self._to_device(batch)
        chunks = self._chunks(batch)
        if self.one_forward:
            return self._global_mean(self._whole_batch_losses(batch, chunks))
        return self._global_mean([self._chunk_loss(chunk) for chunk in chunks])

    @property
    def evaluated_weights(self) -> str:
        """Which weights the test path runs: "ema" (an average of at least one step) or "raw"."""
        return "ema" if self.use_ema and self.ema is not None and self.ema.steps else "raw"

    @torch.no_grad()
    def test(self, image: torch.Tensor, **kwargs: Any) -> Any:
        """The model's test path: `model(image, test=True, **kwargs)` on this device, with the
        weight average when `evaluated_weights` is "ema"."""
        model = self.ema.module if self.evaluated_weights == "ema" else self.model
        with self._autocast():
            return model(image.to(self.device), test=True, **kwargs)

    # ------------------------------------------------------------------------ parameters
    def save_params(self, iteration: int, state: dict | None = None,
                    path: Path | None = None) -> Path:
        """Write snapshot `iteration` atomically (to its numbered file, or `path`): model,
        optimizer, config and `state`."""
        snapshot = {
            "format": SNAPSHOT_FORMAT,
            "iteration": iteration,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "config": {"system": _plain(self.system_config.full), "db": _plain(self.db_configs)},
            "rng": {"torch": torch.get_rng_state()},
            **(state or {}),
        }
        if self.ema is not None:
            snapshot["ema"] = self.ema.state_dict()
        if self.device.type == "cuda":
            snapshot["rng"]["cuda"] = torch.cuda.get_rng_state(self.device)
        if self.scaler.is_enabled():
            snapshot["scaler"] = self.scaler.state_dict()
        path = path or self.system_config.snapshot_file(iteration)
        write_atomic(snapshot, path)
        return path

    def load_params(self, iteration: int, model_only: bool = False) -> dict:
        """Load snapshot `iteration` (ours, or an official plain state dict).

        Restores model, optimizer, gradient scaler (fp16) and RNG states (only the model with
        `model_only`, for inference); returns the whole snapshot dict.
        """
        path = self.system_config.snapshot_file(iteration)
        if not path.is_file():
            have = sorted(self.system_config.snapshot_dir.glob("*.pkl"))
            raise FileNotFoundError(f"no snapshot for iteration {iteration}: {path} does not "
                                    f"exist; available: "
                                    f"{', '.join(p.name for p in have) or 'none'}")
        snapshot = _load(path)
        if snapshot.get("format") != SNAPSHOT_FORMAT:
            try:
                load_original_state_dict(self.model, snapshot)
            except RuntimeError as err:
                raise ConfigError(f"{path} does not fit this config: {err}") from None
            if self.ema is not None:
                self.ema.restart(self.model)
            return {"iteration": iteration}
        differences = config_difference(snapshot.get("config", {}), {
            "system": _plain(self.system_config.full), "db": _plain(self.db_configs)})
        if differences:
            raise ConfigError(f"{path} does not fit this config: {'; '.join(differences)}")
        self.model.load_state_dict(snapshot["model"])
        if self.ema is not None:
            self.ema.load(snapshot.get("ema"), self.model)
        if model_only:
            return snapshot
        saved_algo = snapshot.get("config", {}).get("system", {}).get("opt_algo")
        try:
            if saved_algo not in (None, self.system_config.opt_algo):
                raise ValueError(f"it was trained with {saved_algo}, this config uses "
                                 f"{self.system_config.opt_algo}")
            self.optimizer.load_state_dict(snapshot["optimizer"])
        except ValueError as err:  # another optimizer, or other parameters frozen
            raise ConfigError(f"{path}: its optimizer state does not fit this config ({err}); "
                              f"to start from its weights, set system.pretrain to it") from None
        if self.scaler.is_enabled() and snapshot.get("scaler"):
            self.scaler.load_state_dict(snapshot["scaler"])
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
        if self.ema is not None:
            self.ema.restart(self.model)
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


def _split_outputs(outs: Any, sizes: list[int]) -> list[Any]:
    """A model's outputs (tensors in nested lists, batch first) cut along the batch into
    `sizes`: one output structure per chunk."""
    if isinstance(outs, torch.Tensor):
        return list(torch.split(outs, sizes))
    parts = [_split_outputs(item, sizes) for item in outs]
    return [[part[i] for part in parts] for i in range(len(sizes))]
