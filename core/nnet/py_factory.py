"""NetworkFactory: a model with its loss, optimizer and gradient scaler, and one step.

What a step needs beyond that lives beside it: the chunks of a batch and the DDP wrap in
`parallel`, snapshot files in `checkpoint` (this class owns what goes in them:
`state_dict` / `load_state_dict`), freezing in `freeze`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..errors import ConfigError, RunFailure
from ..models import build_model, load_original_state_dict
from ..sample.render import normalize_image, render_targets
from ..utils.device import check_runtime, resolve_device
from . import checkpoint, parallel, step_path
from .compiled import StepFunction, run_guarded
from .ema import WeightAverage
from .freeze import freeze, frozen_norms_to_eval

if TYPE_CHECKING:
    from ..config import SystemConfig
    from ..data.chunks import Deal
    from ..dbs.detection import DETECTION
    from .running_stats import RunningStatsMerge
    from .step_path import StepPath


class NonFiniteLoss(RunFailure, FloatingPointError):
    """The loss of a step is NaN or infinite; `terms` holds every component. The step sets
    `iteration` (of the bad step) and `read_at` (the iteration whose read found it), and
    `skipped` = (bad, recent) when it stops after skipping too many steps."""

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
        read = getattr(self, "read_at", iteration)
        later = f" (found when read at iteration {read})" if read != iteration else ""
        return (f"iteration {iteration}: the loss is not finite ({self}){later}; stopping. Lower "
                f"system.learning_rate, check the data, or set system.nonfinite_loss to "
                f"\"skip\".")


class NetworkFactory:
    """Model + loss + optimizer (+ gradient scaler) of one process, and its training step.

    Args:
        system_config: the resolved SystemConfig (optimizer, snapshot paths, amp, sync_bn,
            channels_last, compile, one_forward).
        db: a dataset object; its `configs` give the class count and the target rules.
        device: where to run (`core.utils.device.resolve_device`: cuda:<current> when there is
            a GPU, else CPU, unless given).
        distributed: wrap the model in DistributedDataParallel (process group already set up).
        share: this process's chunks of the global batch (`core.data.chunks.deal`); None is one
            process running the whole batch as one chunk.
        path: how the step runs (`step_path.resolve` of the config on this device, unless
            given: a bench builds the GPU's path on the CPU).
        log: where a compile that failed is said (one line).
    """

    def __init__(self, system_config: SystemConfig, db: DETECTION,
                 device: torch.device | str | None = None,
                 distributed: bool = False, share: Deal | None = None,
                 path: StepPath | None = None, log: Callable[[str], None] = print) -> None:
        self.system_config = system_config
        self.db_configs = db.configs
        self.classes = checkpoint.class_record(db)  # names travel with the snapshot
        self.categories = db.configs["categories"]
        self.device = resolve_device(device)
        check_runtime(system_config.amp, system_config.sync_bn, self.device)
        self.path = path or step_path.resolve(system_config, self.device.type)
        self.share = share
        self.distributed = distributed
        model = build_model(system_config.model_name, self.categories)
        self.frozen = freeze(model, system_config.freeze)
        # SyncBN across ranks needs one forward per rank (its collectives must match).
        synced = parallel.one_forward(system_config.sync_bn, distributed, share)
        if synced:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        self.one_forward = synced or self.path.one_forward
        self._memory_format = (torch.channels_last if self.path.channels_last
                               else torch.contiguous_format)
        self.model = model.to(self.device, memory_format=self._memory_format)
        self.loss = self.model.loss
        self.network: nn.Module = self.model
        self._ddp: nn.parallel.DistributedDataParallel | None = None
        self._merge: RunningStatsMerge | None = None
        if distributed:
            self._ddp, self._merge = parallel.wrap(self.model, self.device, share,
                                                   synced, self.one_forward)
            self.network = self._ddp
        self._amp = self.path.dtype
        self.step_fn = StepFunction(self.network, self.loss, self._amp, self.path.compile,
                                    self.path.compile_mode, log, system_config.snapshot_dir)
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self.ema = WeightAverage.of(self.model, system_config)  # None unless system.ema_decay
        self.grad_norm: torch.Tensor | None = None  # of the last step, before clipping
        params = self._params
        lr, decay = system_config.learning_rate, system_config.weight_decay
        # Fused on a GPU: the step counters stay on the device, and `found_inf` skips a step
        # there. The CPU keeps torch's default (for the CPU: one tensor at a time).
        fused = {"fused": True} if self.path.fused else {}
        if system_config.opt_algo == "adam":
            self.optimizer = torch.optim.Adam(params, lr=lr, weight_decay=decay, **fused)
        else:
            self.optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=decay,
                                             **fused)
            if fused:
                # Fused SGD makes its momentum buffers with `empty_like` at its first step; a
                # first step skipped by `found_inf` would leave them uninitialised for the next.
                # Zeros give the same first step (no dampening: 0.9 * 0 + g = g).
                for p in params:
                    self.optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.path.amp == "fp16")
        # Whether each step's loss is read at once (steps.TrainStep): where the optimizer is not
        # fused (the CPU), the step reads the host anyway; a fused one defers every read.
        self.reads_at_once = not self.path.fused
        # fp16: whether the scaler skipped the last step (its gradients overflowed), a bool
        # on the device; False without a scaler.
        self.scaler_skipped: torch.Tensor | bool = False

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

    def _targets(self, chunk: dict[str, torch.Tensor]) -> list:
        return render_targets(chunk, self.db_configs, self.categories,
                              static=self.path.static_targets or None)

    def _losses(self, fn: StepFunction, batch: dict[str, torch.Tensor],
                chunks: list[dict[str, torch.Tensor]],
                backward: Callable[[torch.Tensor], None] | None = None) -> list[tuple]:
        """The (loss, terms) of every chunk: one forward of the whole local batch, or one per
        chunk (each followed by `backward` of its loss, so its graph is freed before the next;
        DDP reduces the gradients once, with the last chunk)."""
        if self.one_forward:
            losses = fn(self._image(batch), [self._targets(chunk) for chunk in chunks],
                        [len(chunk["image"]) for chunk in chunks])
            if backward is not None:
                backward(sum(loss for loss, _ in losses))
            return [(loss.detach(), terms) for loss, terms in losses]
        losses = []
        with parallel.casts_once(self.device.type):
            for i, chunk in enumerate(chunks):
                last = i == len(chunks) - 1
                sync = contextlib.nullcontext() if last or self._ddp is None or backward is None \
                    else self._ddp.no_sync()
                with sync:
                    [(loss, terms)] = fn(self._image(chunk), [self._targets(chunk)],
                                         [len(chunk["image"])])
                    if backward is not None:
                        backward(loss)
                losses.append((loss.detach(), terms))
        return losses

    def _to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {key: value.to(self.device, non_blocking=True) for key, value in batch.items()}

    def _global_mean(self, losses: list[tuple[torch.Tensor, dict]]) -> tuple[torch.Tensor, dict]:
        return parallel.global_mean(losses, self.share, self.distributed)

    def train(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """One optimisation step; on a GPU nothing in it waits for the device (fused
        optimizer, static targets). Returns (loss, terms): means over every chunk of the global
        batch, detached, on the device, equal on every rank.

        Each chunk's loss is scaled by `share.loss_weight` before its backward, so that DDP's
        averaged gradient is that of the mean over all chunks. A non-finite loss skips the
        update on the device, as a gradient scaler skips one: the parameters and the optimizer
        are left as they were (and, with system.nonfinite_loss "skip", the BatchNorm running
        statistics); whoever reads the loss later (`steps.TrainStep.settle`) learns it then.
        """
        self.optimizer.zero_grad(set_to_none=True)
        batch = self._to_device(batch)
        chunks = parallel.split_batch(batch, self.share)
        weight = self.share.loss_weight if self.share else 1.0 / len(chunks)
        # A skipped step must leave the running statistics as they were ("stop" ends the run).
        buffers = ([b.clone() for b in self.model.buffers()]
                   if self.system_config.nonfinite_loss == "skip" else [])
        if self._merge is not None:
            self._merge.begin()

        def backward(loss: torch.Tensor) -> None:
            self.scaler.scale(loss * weight).backward()

        losses = run_guarded(self.step_fn, lambda fn: self._losses(fn, batch, chunks, backward),
                             lambda: self.optimizer.zero_grad(set_to_none=True),
                             tuple(batch["image"].shape), tuple(self.model.buffers()))
        if self._merge is not None:
            self._merge.finish()
        loss, terms = self._global_mean(losses)
        bad = ~torch.isfinite(loss)
        if buffers:
            with torch.no_grad():
                for now, before in zip(self.model.buffers(), buffers):
                    now.copy_(torch.where(bad, before, now))
        self.grad_norm = self._clip_gradients()
        host_bad = self._optimizer_step(bad)
        if self.ema is not None:
            # A skipped step leaves the average as it was; on the device its weight is zeroed
            # there (the warm-up count still advances).
            if host_bad is None:
                self.ema.update(self.model, skip=bad)
            elif not host_bad:
                self.ema.update(self.model)
        return loss, terms

    def _optimizer_step(self, bad: torch.Tensor) -> bool | None:
        """The optimizer's step unless `bad` (a bool on the device), and the scaler's update;
        returns `bad` as read on the host, or None where it was not read.

        A fused optimizer takes `found_inf` and skips on the device; with fp16 the scaler
        hands it its own (a non-finite loss has non-finite gradients), and `scaler_skipped`
        says whether the scaler lowered its scale for another reason. Elsewhere (the CPU's
        optimizer) the step is skipped by reading `bad` once: nothing is queued to wait for.
        """
        host_bad = None if self.path.fused else bool(bad)
        if self.scaler.is_enabled():
            before = self.scaler._scale.clone() if self.scaler._scale is not None else None
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if before is not None:
                self.scaler_skipped = (self.scaler._scale < before) & ~bad
            return host_bad
        if host_bad is None:
            self.optimizer.found_inf = bad.float()
            self.optimizer.step()
        elif not host_bad:
            self.optimizer.step()
        return host_bad

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
        return self._global_mean(run_guarded(self.step_fn,
                                             lambda fn: self._losses(fn, batch, chunks),
                                             lambda: None))

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
