"""NetworkFactory: a model with its loss, optimizer and gradient scaler, and one step.

What a step needs beyond that lives beside it: the chunks of a batch and the DDP wrap in
`parallel`, snapshot files in `checkpoint` (this class owns what goes in them:
`state_dict` / `load_state_dict`), freezing in `freeze`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from ..errors import ConfigError, RunFailure
from ..models import build_model, load_original_state_dict
from ..sample.render import normalize_image, render_targets
from ..utils.device import check_runtime, resolve_device
from . import checkpoint, parallel
from .ema import WeightAverage
from .freeze import freeze, frozen_norms_to_eval

if TYPE_CHECKING:
    from ..config import SystemConfig
    from ..data.chunks import Deal
    from ..dbs.detection import DETECTION
    from .running_stats import RunningStatsMerge


class NonFiniteLoss(RunFailure, FloatingPointError):
    """The loss of a step is NaN or infinite; `terms` holds every component. The loop sets
    `iteration`, and `skipped` = (bad, recent) when it stops after skipping too many steps."""

    def __init__(self, terms: dict[str, float]) -> None:
        self.terms = terms
        super().__init__(", ".join(f"{k}={v:.6g}" for k, v in terms.items()))

    def explain(self) -> str:
        iteration = getattr(self, "iteration", "?")
        if hasattr(self, "skipped"):
            bad, recent = self.skipped
            return (f"iteration {iteration}: {bad} of the last {recent} steps had a non-finite "
                    f"loss ({self}); the run is diverging, stopping. Lower "
                    f"system.learning_rate or resume from an earlier snapshot.")
        return (f"iteration {iteration}: the loss is not finite ({self}); stopping. Lower "
                f"system.learning_rate, check the data, or set system.nonfinite_loss to "
                f"\"skip\".")


AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class NetworkFactory:
    """Model + loss + optimizer (+ gradient scaler) of one process, and its training step.

    Args:
        system_config: the resolved SystemConfig (optimizer, snapshot paths, amp, sync_bn,
            channels_last, compile).
        db: a dataset object; its `configs` give the class count and the target rules.
        device: where to run (`core.utils.device.resolve_device`: cuda:<current> when there is
            a GPU, else CPU, unless given).
        distributed: wrap the model in DistributedDataParallel (process group already set up).
        share: this process's chunks of the global batch (`core.data.chunks.deal`); None is one
            process running the whole batch as one chunk.
    """

    def __init__(self, system_config: SystemConfig, db: DETECTION,
                 device: torch.device | str | None = None,
                 distributed: bool = False, share: Deal | None = None) -> None:
        self.system_config = system_config
        self.db_configs = db.configs
        self.classes = checkpoint.class_record(db)  # names travel with the snapshot
        self.categories = db.configs["categories"]
        self.device = resolve_device(device)
        check_runtime(system_config.amp, system_config.sync_bn, self.device)
        self.share = share
        self.distributed = distributed
        model = build_model(system_config.model_name, self.categories)
        self.frozen = freeze(model, system_config.freeze)
        self.one_forward = parallel.one_forward(system_config.sync_bn, distributed, share)
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
            self._ddp, self._merge = parallel.wrap(self.model, self.device, share,
                                                   self.one_forward)
            self.network = self._ddp
        if system_config.compile:
            self.network = torch.compile(self.network)
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self.ema = WeightAverage.of(self.model, system_config)  # None unless system.ema_decay
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
        # fp16: whether the scaler skipped the last step (its gradients overflowed).
        self.scaler_skipped = False
        self._scale: float | None = None

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
                for part, chunk in zip(parallel.split_outputs(outs, sizes), chunks)]

    def _to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {key: value.to(self.device, non_blocking=True) for key, value in batch.items()}

    def _global_mean(self, losses: list[tuple[torch.Tensor, dict]]) -> tuple[torch.Tensor, dict]:
        return parallel.global_mean(losses, self.share, self.distributed)

    def train(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """One optimisation step. Returns (loss, terms): means over every chunk of the global
        batch, detached, equal on every rank.

        Each chunk's loss is scaled by `share.loss_weight` before its backward, so that DDP's
        averaged gradient is that of the mean over all chunks. Without SyncBN, each chunk's graph
        is freed by its own backward (gradients accumulate; DDP reduces them once, with the last
        chunk). A non-finite loss raises NonFiniteLoss before the parameters are touched.
        """
        self.optimizer.zero_grad(set_to_none=True)
        if self._scale is None and self.scaler.is_enabled():  # the initial or resumed scale
            self._scale = self.scaler.get_scale()
        batch = self._to_device(batch)
        chunks = parallel.split_batch(batch, self.share)
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
            with parallel.casts_once(self.device.type):
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
        self._note_scaler_skip()
        if self.ema is not None:
            self.ema.update(self.model)
        return loss, terms

    def _note_scaler_skip(self) -> None:
        """`scaler_skipped`: the scaler lowered its scale, which it does exactly when it found
        inf/NaN gradients and skipped `optimizer.step()` (one read of the scale per fp16 step)."""
        if self._scale is None:
            return
        scale = self.scaler.get_scale()
        self.scaler_skipped = scale < self._scale
        self._scale = scale

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
        chunks = parallel.split_batch(batch, self.share)
        if self.one_forward:
            return self._global_mean(self._whole_batch_losses(batch, chunks))
        with parallel.casts_once(self.device.type):
            return self._global_mean([self._chunk_loss(chunk) for chunk in chunks])

    # ------------------------------------------------------------------------ parameters
    def config_record(self) -> dict:
        """The resolved config as a snapshot stores it: {"system": {...}, "db": {...}}."""
        return {"system": checkpoint.plain(self.system_config.full),
                "db": checkpoint.plain(self.db_configs)}

    def state_dict(self) -> dict:
        """Everything of this network a snapshot holds: "model", "optimizer", "config" (the
        record), "classes" (names and category ids, `checkpoint.class_record`), "rng" (torch's,
        and the device's on CUDA), "ema" with a weight average and "scaler" with fp16. Tensors
        stay where they are; the file writer copies them."""
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "config": self.config_record(), "classes": self.classes,
                 "rng": {"torch": torch.get_rng_state()}}
        if self.ema is not None:
            state["ema"] = self.ema.state_dict()
        if self.device.type == "cuda":
            state["rng"]["cuda"] = torch.cuda.get_rng_state(self.device)
        if self.scaler.is_enabled():
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: dict, model_only: bool = False,
                        source: str | Path = "the snapshot") -> None:
        """Restore what `state_dict` wrote (extra keys, the loop's, are left alone), or weights
        from an official plain state dict. `model_only` (inference) restores only the weights
        and their average. A snapshot that does not fit this config is a ConfigError naming
        `source`."""
        if not checkpoint.is_ours(state):
            try:
                load_original_state_dict(self.model, state)
            except RuntimeError as err:
                raise ConfigError(f"{source} does not fit this config: {err}") from None
            if self.ema is not None:  # a weight average restarts from official weights
                self.ema.restart(self.model)
            return
        checkpoint.check_fits(state, self.config_record(), source)
        self.model.load_state_dict(state["model"])
        if self.ema is not None:
            self.ema.load(state.get("ema"), self.model)
        if model_only:
            return
        algo = self.system_config.opt_algo
        saved_algo = state.get("config", {}).get("system", {}).get("opt_algo")
        try:
            if saved_algo not in (None, algo):
                raise ValueError(f"it was trained with {saved_algo}, this config uses {algo}")
            self.optimizer.load_state_dict(state["optimizer"])
        except ValueError as err:  # another optimizer, or other parameters frozen
            raise ConfigError(f"{source}: its optimizer state does not fit this config ({err}); "
                              f"to start from its weights, set system.pretrain to it") from None
        if self.scaler.is_enabled() and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["rng"]["torch"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)

    def save_params(self, iteration: int, state: dict | None = None,
                    path: Path | None = None) -> Path:
        """Write snapshot `iteration` atomically (to its numbered file, or `path`): this
        network's `state_dict` and the loop's `state`."""
        return checkpoint.write({**self.state_dict(), **(state or {})}, iteration,
                                path or self.system_config.snapshot_file(iteration))

    def load_params(self, iteration: int, model_only: bool = False) -> dict:
        """Load snapshot `iteration` (ours, or an official plain state dict); with `model_only`
        (inference) only the weights. Returns the whole snapshot dict ({"iteration"} alone for
        an official one)."""
        path = checkpoint.require_snapshot(self.system_config, iteration)
        snapshot = checkpoint.read_snapshot(path)
        self.load_state_dict(snapshot, model_only, source=path)
        return snapshot if checkpoint.is_ours(snapshot) else {"iteration": iteration}

    def load_pretrained_params(self, path: str | Path,
                               log: Callable[[str], None] = print) -> list[str]:
        """Starting weights from a snapshot or an official plain state dict, also of another
        class count; returns the keys that start fresh (named with their shapes in one line to
        `log`). A weight average restarts from them."""
        skipped = checkpoint.load_pretrained(self.model, Path(path),
                                             self.categories,
                                             self.system_config.model_name, log)
        if self.ema is not None:
            self.ema.restart(self.model)
        return skipped
