"""How a training step runs on its device, decided once from the config and the device.

A GPU runs ahead of the host: the step is fastest when nothing in it waits for the host, few
kernels are launched and the GPU's fast number formats are used. The CPU runs one op after the
other, so there the step stays what it has always been (the README job's losses and AP are
unchanged). The `"auto"` settings of the system section are resolved here:

- `amp: "auto"`: bfloat16 autocast where the GPU has native bf16 (Ampere and newer), float32
  elsewhere and on the CPU; `"fp32"` (or null) pins float32, `"bf16"` / `"fp16"` ask for one.
- `compile: "auto"`: the network and the loss compiled as one graph per batch shape on a GPU,
  eager on the CPU (compiling costs minutes there and gains little).
- `one_forward: "auto"`: on a GPU, one forward over the whole local batch, the loss still taken
  per chunk; on the CPU the shipped chunks, one forward each (BatchNorm's batch is the chunk).
- a fused optimizer on a GPU (its step counters stay on the device: the foreach Adam reads each
  parameter's counter on the host); the targets drawn with a fixed window on a GPU (no read of
  the largest radius).
- `channels_last` and `compile_mode: "reduce-overhead"` (CUDA graphs) are never turned on by
  "auto": they are asked for where a measurement says they pay (bench/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class StepPath:
    """The resolved settings of a step.

    amp: "bf16", "fp16" or None (float32).
    compile: the network and the loss through torch.compile (static shapes).
    compile_mode: torch.compile's mode: None (its default) or "reduce-overhead" (CUDA graphs).
    one_forward: one forward over the whole local batch instead of one per chunk.
    fused: the optimizer's fused implementation (found_inf skips a step on the device).
    static_targets: targets drawn with a window fixed by the config (`render_targets`).
    channels_last: the model and its input in channels_last.
    """

    amp: str | None = None
    compile: bool = False
    compile_mode: str | None = None
    one_forward: bool = False
    fused: bool = False
    static_targets: bool = False
    channels_last: bool = False

    @property
    def dtype(self) -> torch.dtype | None:
        """The autocast dtype, None for float32."""
        return AMP_DTYPES.get(self.amp) if self.amp else None

    def describe(self) -> str:
        """One phrase for the start line: `bf16, compiled, one forward, fused optimizer`."""
        parts = [self.amp or "fp32"]
        if self.compile:
            parts.append("compiled" + (f" ({self.compile_mode})" if self.compile_mode else ""))
        parts.append("one forward" if self.one_forward else "a forward per chunk")
        parts += ["fused optimizer"] * self.fused + ["channels_last"] * self.channels_last
        return ", ".join(parts)


def _auto(value: Any, on_gpu: bool) -> bool:
    return on_gpu if value == "auto" else bool(value)


def resolve(system_config: Any, device_type: str, bf16: bool | None = None) -> StepPath:
    """The StepPath of `system_config` on a device of `device_type` ("cuda" or "cpu").

    `bf16`: whether that GPU has native bfloat16 (default: asked of the current GPU). A bench
    passes "cuda" on the CPU to build the GPU's path there (bench/bench_syncs.py).
    """
    gpu = device_type == "cuda"
    amp = system_config.amp
    if amp == "auto":
        if bf16 is None:
            bf16 = gpu and torch.cuda.is_available() and \
                torch.cuda.is_bf16_supported(including_emulation=False)
        amp = "bf16" if gpu and bf16 else None
    elif amp == "fp32":
        amp = None
    compiled = _auto(system_config.compile, gpu)
    mode = system_config.compile_mode
    return StepPath(amp=amp, compile=compiled,
                    compile_mode=mode if compiled and mode != "default" else None,
                    one_forward=_auto(system_config.one_forward, gpu), fused=gpu,
                    static_targets=gpu, channels_last=system_config.channels_last)
