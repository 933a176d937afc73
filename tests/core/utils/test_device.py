"""Device resolution: one indexed device per process, decided once; a device the machine lacks
is a one-line error before anything starts."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from core.config import ConfigError
from core.utils import device as device_mod
from core.utils.device import distributed_kind, rank_device, resolve_device
from tests._train_helpers import REPO


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine with GPUs 0 and 1, GPU 1 current (no CUDA call is made)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_cuda_resolves_to_the_current_gpu_with_its_index(two_gpus):
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device(None) == torch.device("cuda", 1)
    assert resolve_device(torch.device("cuda")) == torch.device("cuda", 1)


def test_an_indexed_gpu_and_the_cpu_are_kept(two_gpus):
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(resolve_device("cuda")) == torch.device("cuda", 1)  # idempotent


def test_without_a_gpu_the_default_is_the_cpu(no_gpu):
    assert resolve_device(None) == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_a_gpu_on_a_machine_without_one_is_a_one_line_error(no_gpu, name):
    with pytest.raises(ConfigError, match=rf"^--device {name}: this machine has no usable GPU "
                                          r".*use --device cpu") as err:
        resolve_device(name)
    assert "\n" not in str(err.value)


def test_a_gpu_index_the_machine_lacks_is_refused(two_gpus):
    with pytest.raises(ConfigError, match=r"--device cuda:2: this machine has 2 GPU\(s\), "
                                          r"cuda:0 to cuda:1"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "cpu:0", "mps"])
def test_a_malformed_device_is_refused(two_gpus, name):
    with pytest.raises(ConfigError, match=rf"--device {name}"):
        resolve_device(name)


def test_distributed_ranks_take_the_gpu_of_their_local_rank(two_gpus):
    assert distributed_kind(None) == "cuda" and distributed_kind("cuda") == "cuda"
    assert rank_device("cuda", 0) == torch.device("cuda", 0)
    assert rank_device("cuda", 1) == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match="fewer|cuda:0 to cuda:1"):
        rank_device("cuda", 2)


def test_distributed_honours_cpu_and_refuses_an_index(two_gpus):
    assert distributed_kind("cpu") == "cpu" and rank_device("cpu", 1) == torch.device("cpu")
    with pytest.raises(ConfigError, match="cuda:<local rank>.*CUDA_VISIBLE_DEVICES"):
        distributed_kind("cuda:1")


def test_distributed_without_gpus_runs_cpu_processes(no_gpu):
    assert distributed_kind(None) == "cpu"
    with pytest.raises(ConfigError, match="no usable GPU"):
        distributed_kind("cuda")


def test_bf16_is_refused_on_a_gpu_without_native_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")
    with pytest.raises(ConfigError, match=r"system.amp \"bf16\": Tesla V100 has no native"):
        device_mod.check_precision("bf16", torch.device("cuda", 0))
    device_mod.check_precision("bf16", torch.device("cpu"))
    device_mod.check_precision(None, torch.device("cuda", 0))


@pytest.fixture
def restore_torch_settings():
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1:]


def test_deterministic_sets_torch_cudnn_and_cublas(restore_torch_settings, monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    device_mod.configure(torch.device("cuda", 0), deterministic=True, fixed_sizes=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    import os
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_fixed_sizes_on_a_gpu_let_cudnn_pick_its_fastest_algorithms(restore_torch_settings):
    device_mod.configure(torch.device("cuda", 0), deterministic=False, fixed_sizes=True)
    assert torch.backends.cudnn.benchmark and not torch.are_deterministic_algorithms_enabled()
    device_mod.configure(torch.device("cuda", 0), deterministic=False, fixed_sizes=False)
    assert not torch.backends.cudnn.benchmark
    device_mod.configure(torch.device("cpu"), deterministic=False, fixed_sizes=True)
    assert not torch.backends.cudnn.benchmark


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_train_py_with_cuda_on_a_cpu_only_torch_is_one_line_exit_2_in_seconds():
    t0 = time.monotonic()
    result = subprocess.run([sys.executable, str(REPO / "train.py"), "CornerNet_Tiny",
                             "--device", "cuda"], capture_output=True, text=True, cwd=REPO,
                            timeout=60, check=False)
    seconds = time.monotonic() - t0
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: --device cuda: this machine has no usable GPU")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert seconds < 30, seconds
