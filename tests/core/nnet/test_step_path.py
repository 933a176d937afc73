"""core/nnet/step_path.py: the "auto" settings of a step, decided by the device; and the config
keys that hold them."""

from __future__ import annotations

import pytest

from core.config import ConfigError, SystemConfig
from core.nnet.step_path import StepPath, resolve


def config(**system) -> SystemConfig:
    return SystemConfig().update_config(system)


def test_the_defaults_leave_the_cpu_step_as_it_was():
    assert resolve(config(), "cpu") == StepPath()
    assert StepPath().describe() == "fp32, a forward per chunk"


def test_the_defaults_on_a_gpu_with_bf16_are_the_fast_step():
    path = resolve(config(), "cuda", bf16=True)
    assert path == StepPath(amp="bf16", compile=True, one_forward=True, fused=True,
                            static_targets=True)
    assert path.describe() == "bf16, compiled, one forward, fused optimizer"


def test_a_gpu_without_native_bf16_trains_in_fp32():
    assert resolve(config(), "cuda", bf16=False).amp is None


@pytest.mark.parametrize("pinned", ["fp32", None])
def test_fp32_can_be_pinned_on_a_gpu(pinned):
    assert resolve(config(amp=pinned), "cuda", bf16=True).dtype is None


def test_settings_asked_for_are_kept_on_either_device():
    asked = config(amp="bf16", compile=True, compile_mode="reduce-overhead", one_forward=True,
                   channels_last=True)
    cpu = resolve(asked, "cpu")
    assert (cpu.amp, cpu.compile, cpu.compile_mode, cpu.one_forward, cpu.channels_last) == \
        ("bf16", True, "reduce-overhead", True, True)
    assert not cpu.fused and not cpu.static_targets  # the CPU's optimizer and targets
    off = resolve(config(compile=False, one_forward=False), "cuda", bf16=True)
    assert not off.compile and not off.one_forward and off.compile_mode is None


def test_cuda_graphs_are_off_unless_asked_for():
    assert resolve(config(), "cuda", bf16=True).compile_mode is None


@pytest.mark.parametrize(("change", "message"), [
    ({"compile": "yes"}, "system.compile is 'yes'; valid: true, false or \"auto\""),
    ({"one_forward": 1}, "system.one_forward must be true, false or \"auto\", got int 1"),
    ({"amp": "fp8"}, "system.amp is 'fp8'; valid: auto, fp32, bf16, fp16"),
    ({"compile": False, "compile_mode": "reduce-overhead"},
     "system.compile_mode \"reduce-overhead\" needs a compiled step"),
    ({"compile_mode": "max"}, "system.compile_mode is 'max'; valid: default, reduce-overhead"),
])
def test_a_setting_that_cannot_be_right_is_refused_naming_the_key(change, message):
    with pytest.raises(ConfigError, match=None) as err:
        config(**change)
    assert message in str(err.value)
