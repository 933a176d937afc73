"""What a benchmark ran on, in one line each: the CPU's model and the instruction sets that
decide its speed in float32, bf16 and int8 (AVX2, AVX-512, VNNI, bf16, AMX), and the device."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_vnni": "AVX-512 VNNI",
         "avx_vnni": "AVX-VNNI", "avx512_bf16": "AVX-512 BF16", "amx_bf16": "AMX-BF16",
         "amx_int8": "AMX-INT8"}


def cpu_line() -> str:
    """The CPU model, its core count and which of AVX2, AVX-512, VNNI, bf16 and AMX it has."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    have = [name for flag, name in FLAGS.items() if flag in flags]
    return (f"CPU: {model}, {os.cpu_count()} cores; instruction sets: "
            f"{', '.join(have) or 'none of AVX2, AVX-512, bf16, AMX'}"
            + ("" if flags else " (no /proc/cpuinfo flags)"))


def device_line(device: torch.device, threads: list[int], batches: list[int]) -> str:
    """Where the rows run: the GPU's name and the torch/CUDA versions, or the thread counts;
    and the load average."""
    load = f"load average {os.getloadavg()[0]:.1f}"
    if device.type != "cuda":
        return (f"device: cpu, threads {' and '.join(map(str, threads))}, batch "
                f"{' and '.join(map(str, batches))}; {load}")
    return (f"device: {device} ({torch.cuda.get_device_name(device)}), torch "
            f"{torch.__version__}, CUDA {torch.version.cuda}; batch "
            f"{' and '.join(map(str, batches))}, {max(threads)} CPU threads; {load}")
