"""Which device a process runs on, decided once, and the global torch settings that go with it.

`torch.device("cuda")` names no GPU: `torch.cuda.set_device` refuses it, and two threads that
read "the current GPU" at different times can disagree. So every entry point turns what the user
asked for into an indexed device (`cuda` -> `cuda:<current>`) here, in the main process, before
anything else uses it: the network factory, the pin-memory threads of the prefetcher, the
evaluation, test.py, demo.py and the benchmarks all receive the resolved device.

Under `--distributed` each rank takes `cuda:<local rank>` (one process per GPU), so `--device`
may only choose the kind there: `cuda` (the default where there are GPUs) or `cpu` (gloo
processes); an index is refused, because it would put every rank on the same GPU.
"""

from __future__ import annotations

import os
import re
import warnings

import torch

from ..errors import ConfigError

_NAME = re.compile(r"^(cpu|cuda)(?::(\d+))?$")

# cuBLAS needs a fixed workspace to give the same result twice (NVIDIA's cuBLAS documentation,
# "Results reproducibility"); it must be set before the first cuBLAS call of the process.
CUBLAS_WORKSPACE = ":4096:8"


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _no_gpu(text: str) -> ConfigError:
    build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
    return ConfigError(f"--device {text}: this machine has no usable GPU (torch "
                       f"{torch.__version__}, {build}); use --device cpu, or install a CUDA "
                       f"build of torch on a machine with a GPU")


def resolve_device(requested: str | torch.device | None = None) -> torch.device:
    """The indexed device a request names: None is `cuda:<current>` where there is a GPU, else
    `cpu`; `cuda` is `cuda:<current>`; `cuda:N` and `cpu` are checked and kept.

    Raises ConfigError (one line, naming --device and what to do) for a malformed name, a CUDA
    device on a machine without one, or an index the machine lacks.
    """
    if requested is None:
        requested = "cuda" if _gpus() else "cpu"
    text = str(requested)
    match = _NAME.match(text)
    if match is None:
        raise ConfigError(f"--device {text}: expected cpu, cuda or cuda:<index>")
    kind, index = match.group(1), match.group(2)
    if kind == "cpu":
        if index is not None:
            raise ConfigError(f"--device {text}: the CPU has no index; use --device cpu")
        return torch.device("cpu")
    gpus = _gpus()
    if not gpus:
        raise _no_gpu(text)
    number = torch.cuda.current_device() if index is None else int(index)
    if number >= gpus:
        raise ConfigError(f"--device {text}: this machine has {gpus} GPU(s), cuda:0 to "
                          f"cuda:{gpus - 1}")
    return torch.device("cuda", number)


def distributed_kind(requested: str | None) -> str:
    """The device kind of every rank under --distributed: 'cuda' (one GPU per process,
    `cuda:<local rank>`) or 'cpu' (gloo). `--device cuda:N` is refused in one line."""
    if requested is None:
        return "cuda" if _gpus() else "cpu"
    match = _NAME.match(str(requested))
    if match is not None and match.group(2) is not None:
        raise ConfigError(f"--device {requested}: under --distributed every process takes the "
                          f"GPU of its local rank (cuda:<local rank>); say --device cuda or "
                          f"--device cpu, and choose GPUs with CUDA_VISIBLE_DEVICES")
    return resolve_device(requested).type


def rank_device(kind: str, local_rank: int) -> torch.device:
    """The device of the process with this local rank: `cuda:<local_rank>` or cpu; ConfigError
    when the node has fewer GPUs than processes."""
    if kind == "cpu":
        return torch.device("cpu")
    return resolve_device(f"cuda:{local_rank}")


def check_runtime(amp: str | None, sync_bn: bool, device: torch.device) -> None:
    """Settings `device` cannot run (`system.amp`, `system.sync_bn`): a ConfigError before
    anything starts."""
    if device.type != "cuda" and amp == "fp16":
        raise ConfigError("system.amp \"fp16\" needs a GPU (float16 autocast with a gradient "
                          "scaler); use \"bf16\" or null on the CPU")
    if device.type != "cuda" and sync_bn:
        raise ConfigError("system.sync_bn needs GPUs: torch runs SyncBatchNorm only on "
                          "accelerators; set it to false for a CPU run")
    check_precision(amp, device)


def check_precision(amp: str | None, device: torch.device) -> None:
    """bf16 on a GPU without native bf16 (before Ampere: V100, T4) is refused: torch emulates it
    there, slower than fp32. ConfigError naming system.amp."""
    if amp == "bf16" and device.type == "cuda" and \
            not torch.cuda.is_bf16_supported(including_emulation=False):
        name = torch.cuda.get_device_name(device)
        raise ConfigError(f"system.amp \"bf16\": {name} has no native bfloat16 (it needs compute "
                          f"capability 8.0, Ampere, or newer); use \"fp16\" or null")


def configure(device: torch.device, deterministic: bool, fixed_sizes: bool) -> None:
    """The process-wide settings of a run on `device`.

    deterministic: the same result on every run (`system.deterministic`): torch's deterministic
        algorithms (an op without one raises, naming itself), deterministic cuDNN, a fixed cuBLAS
        workspace. Costs speed on a GPU; changes nothing on the CPU, which is deterministic.
    fixed_sizes: every batch has the same shape (training), so cuDNN may time its algorithms
        once and keep the fastest (`cudnn.benchmark`); never with `deterministic`.
    """
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        if os.environ["CUBLAS_WORKSPACE_CONFIG"] not in (":4096:8", ":16:8"):
            warnings.warn(f"CUBLAS_WORKSPACE_CONFIG={os.environ['CUBLAS_WORKSPACE_CONFIG']} is "
                          f"not one cuBLAS is deterministic with (:4096:8 or :16:8)",
                          stacklevel=2)
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = device.type == "cuda" and fixed_sizes and not deterministic
