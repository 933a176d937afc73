"""The network and its loss as one callable, compiled with static shapes where asked.

The loss is some 260 small elementwise kernels per step; compiled apart from the network it stays
eager, so the two are compiled together: `forward_losses` runs the network on the images of a
forward and takes the loss of each chunk of its outputs, and `torch.compile` sees all of it as
one graph (tests/core/nnet/test_compiled.py holds every shipped model to no graph break). Shapes are
static (`dynamic=False`): one graph per batch shape, never the dynamic-shape recompile that
failed inside inductor on CUDA when a second batch size arrived. The targets are rendered
before it, eagerly (their scatter of gaussians is not worth a graph).

Compiling must never cost a run: where it fails, at compile time or at the first call, the step
says so in one line and runs eagerly from then on; the whole traceback is written beside the
snapshots (`compile_error.txt`) and kept in `failure`, for a GPU run to capture.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import parallel

Losses = list  # [(loss, terms)] one per chunk of a forward


def forward_losses(network: nn.Module, loss: nn.Module, dtype: torch.dtype | None,
                   image: torch.Tensor, targets: list, sizes: list[int]) -> Losses:
    """One forward of `image` (B, 3, H, W) float32, under autocast to `dtype` (None: float32),
    and the loss of each chunk of its outputs: `targets[i]` are chunk i's (`render_targets`),
    `sizes[i]` its images. Returns [(loss () float32, {term: () float32})] per chunk."""
    with torch.autocast(image.device.type, dtype=dtype or torch.float32,
                        enabled=dtype is not None):
        outs = network(image)
    parts = [outs] if len(sizes) == 1 else parallel.split_outputs(outs, sizes)
    return [loss(part, chunk_targets) for part, chunk_targets in zip(parts, targets)]


class StepFunction:
    """`forward_losses` of a network, compiled (`compile`, torch.compile's `mode`) or eager.

    Call it as `forward_losses` without its first three arguments. `fall_back(err)` is the
    caller's answer to an exception of a compiled call (at its compile or its backward): True
    when it switched to eager (say the line, write the traceback), False when the error is not
    the compiler's to take (eager already, or out of memory: raise it).
    """

    def __init__(self, network: nn.Module, loss: nn.Module, dtype: torch.dtype | None,
                 compile: bool, mode: str | None, log: Callable[[str], None],
                 folder: Path | None) -> None:
        self.eager = lambda *args: forward_losses(network, loss, dtype, *args)
        self.mode = mode
        self.log, self.folder = log, folder
        self.failure: str | None = None  # the traceback of a compile that failed
        self.proven: set[tuple] = set()  # input shapes whose compiled step ran through
        self.compiled: Callable | None = None
        if compile:
            try:  # torch.compile itself refuses some Pythons and platforms
                self.compiled = torch.compile(self.eager, dynamic=False, mode=mode)
            except Exception as err:  # noqa: BLE001 - whatever it is: said, and eager
                self.compiled = self.eager
                self.fall_back(err)

    @property
    def compiling(self) -> bool:
        """Whether calls go through torch.compile (asked for, and not failed)."""
        return self.compiled is not None and self.failure is None

    def __call__(self, image: torch.Tensor, targets: list, sizes: list[int]) -> Losses:
        if self.compiling:
            if self.mode == "reduce-overhead":  # a new step: CUDA graph outputs may be reused
                torch.compiler.cudagraph_mark_step_begin()
            return self.compiled(image, targets, sizes)
        return self.eager(image, targets, sizes)

    def fall_back(self, err: BaseException) -> bool:
        if not self.compiling or isinstance(err, torch.OutOfMemoryError):
            return False
        self.failure = "".join(traceback.format_exception(type(err), err,
                                                              err.__traceback__))
        where = self._write_failure()
        first = (str(err).strip().splitlines() or [""])[0][:200]
        self.log(f"torch.compile failed ({type(err).__name__}: {first}); training eagerly"
                 + (f"; traceback in {where}" if where else ""))
        return True

    def _write_failure(self) -> Path | None:
        if self.folder is None:
            return None
        with contextlib.suppress(OSError):  # a read-only folder must not end the run
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / "compile_error.txt"
            path.write_text(self.failure or "")
            return path
        return None


def run_guarded(fn: StepFunction, body: Callable[[StepFunction], Any],
                undo: Callable[[], None], shape: tuple = (),
                state: tuple[torch.Tensor, ...] = ()) -> Any:
    """`body(fn)`; where a compiled call fails inside it and `fn` falls back, `undo()` (the
    gradients it left) and `body(fn)` again, eagerly. The tensors of `state` (the BatchNorm
    running statistics, which a compiled forward may have updated before its backward failed)
    are put back first: they are copied before the first compiled call of each input `shape`,
    the only calls that compile."""
    fresh = fn.compiling and shape not in fn.proven
    with torch.no_grad():
        saved = [t.clone() for t in state] if fresh else []
    try:
        out = body(fn)
        if fresh:
            fn.proven.add(shape)
        return out
    except Exception as err:  # any compiler failure; the others are raised again
        if not fn.fall_back(err):
            raise
    with torch.no_grad():
        for tensor, before in zip(state, saved):
            tensor.copy_(before)
    undo()
    return body(fn)
