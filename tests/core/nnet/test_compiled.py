"""core/nnet/compiled.py: the network and the loss of every shipped model trace to one graph with
no break (what torch.compile makes one graph of), compiling CornerNet_Tiny's step gives eager's
losses, and a compile that fails says one line and trains eagerly."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from bench._batches import compact_batch, small_config
from core.models import build_model
from core.nnet.compiled import StepFunction, forward_losses
from core.nnet.py_factory import NetworkFactory
from core.nnet.step_path import StepPath
from core.sample.render import normalize_image, render_targets

# Tracing builds the model and runs it on fake tensors. Measured on 2 cores at a load of 5: Tiny
# 5 s; the full-size networks (`parity` tests) CornerNet 54 s, Squeeze 37 s, Saccade 33 s, the
# tracing itself, not the build (CornerNet's build is 4 s).
SHIPPED = ["CornerNet_Tiny"] + [pytest.param(name, marks=pytest.mark.parity)
                                for name in ("CornerNet", "CornerNet_Squeeze",
                                             "CornerNet_Saccade")]


def traced(name: str, dtype: torch.dtype | None) -> torch._dynamo.backends.debugging.ExplainOutput:
    system_config, db = small_config(name)
    torch.manual_seed(0)
    model = build_model(system_config.model_name, db["categories"]).train()
    # two images: a 1 x 1 innermost map of one image has no BatchNorm statistics to train on
    batch = compact_batch(db, 2, saccade=system_config.sampling_function != "cornernet")
    targets = render_targets(batch, db, db["categories"], static=True)
    image = normalize_image(batch["image"], batch["color"])
    torch._dynamo.reset()

    def step(image: torch.Tensor, targets: list) -> list:
        return forward_losses(model, model.loss, dtype, image, [targets], [2])

    return torch._dynamo.explain(step)(image, targets)


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_network_and_loss_trace_to_one_graph_without_a_break(name):
    explained = traced(name, None)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    assert explained.op_count > 100  # the network and the loss, not an empty trace


@pytest.mark.slow
def test_under_bf16_autocast_too():
    explained = traced("CornerNet_Tiny", torch.bfloat16)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), \
        explained.break_reasons


def tiny_factory(compile: bool, mode: str | None = None, log=print, **system) -> tuple:
    system_config, db = small_config("CornerNet_Tiny", batch_size=2, chunk_sizes=[1, 1],
                                     **system)
    torch.manual_seed(0)
    nnet = NetworkFactory(system_config, SimpleNamespace(configs=db), device="cpu",
                          path=StepPath(compile=compile, compile_mode=mode,
                                        static_targets=True, one_forward=True), log=log)
    nnet.train_mode()
    return nnet, compact_batch(db, 2)


@pytest.mark.slow  # compiles CornerNet_Tiny's forward, loss and backward with inductor (minutes)
@pytest.mark.timeout(1200)
def test_compiling_the_tiny_step_gives_the_eager_losses_over_three_steps():
    # SGD: a step is the learning rate times the gradient, so the compiled graph's float32
    # rounding stays of its own size; Adam divides each update by the gradient's running size
    # and turns a rounding difference of a near-zero gradient into a step of the learning rate.
    eager, batch = tiny_factory(compile=False, opt_algo="sgd")
    compiled, _ = tiny_factory(compile=True, opt_algo="sgd")
    for step in range(3):
        loss, terms = eager.train(batch)
        loss_c, terms_c = compiled.train(batch)
        assert compiled.step_fn.compiling, compiled.step_fn.failure
        # the compiled graph orders float32 ops its own way: shared/reference/README.md §6's
        # loss tolerance where the op order is not mirrored
        torch.testing.assert_close(loss_c, loss, rtol=1e-4, atol=1e-6,
                                   msg=f"step {step}: {float(loss_c)!r} against {float(loss)!r}")
        for key in terms:
            torch.testing.assert_close(terms_c[key], terms[key], rtol=1e-4, atol=1e-6,
                                       msg=f"{key}, step {step}")
    assert float(loss) < float(eager.train(batch)[0]) * 1.5  # it trains, not a constant


@pytest.mark.slow  # three CornerNet_Tiny steps
def test_a_compile_that_fails_says_one_line_keeps_the_traceback_and_trains_eagerly(tmp_path):
    said = []
    nnet, batch = tiny_factory(compile=True, log=said.append)
    nnet.step_fn.folder = tmp_path

    def broken(*args):
        raise TypeError("list indices must be integers or slices, not NoneType")

    nnet.step_fn.compiled = broken
    eager, _ = tiny_factory(compile=False)
    loss, _ = nnet.train(batch)
    torch.testing.assert_close(loss, eager.train(batch)[0], rtol=0, atol=0)
    assert said == [(f"torch.compile failed (TypeError: list indices must be integers or slices, "
                    f"not NoneType); training eagerly; traceback in {tmp_path}/compile_error.txt")]
    text = (tmp_path / "compile_error.txt").read_text()
    assert text.startswith("Traceback (most recent call last)") and "in broken" in text
    assert not nnet.step_fn.compiling
    nnet.train(batch)
    assert len(said) == 1  # said once


@pytest.mark.slow  # two CornerNet_Tiny steps
def test_a_compiled_forward_that_fails_after_running_leaves_the_statistics_counted_once():
    """A compiled call that ran its forward (BatchNorm's running statistics updated) and then
    failed (as a backward can, when it compiles): the eager rerun starts from the statistics
    as they were, so the step equals one eager step, buffers included."""
    nnet, batch = tiny_factory(compile=True, log=lambda line: None)

    def forward_then_fail(*args):
        nnet.step_fn.eager(*args)
        raise TypeError("list indices must be integers or slices, not NoneType")

    nnet.step_fn.compiled = forward_then_fail
    eager, _ = tiny_factory(compile=False)
    nnet.train(batch)
    eager.train(batch)
    assert not nnet.step_fn.compiling
    for (key, value), same in zip(nnet.model.state_dict().items(),
                                  eager.model.state_dict().values()):
        assert torch.equal(value, same), key


def test_out_of_memory_is_never_taken_for_a_compile_failure():
    fn = StepFunction(torch.nn.Identity(), torch.nn.Identity(), None, True, None, print, None)
    assert not fn.fall_back(torch.OutOfMemoryError("CUDA out of memory"))
    assert fn.compiling
    eager = dataclasses.replace(StepPath(), compile=False)
    assert not StepFunction(torch.nn.Identity(), torch.nn.Identity(), None, eager.compile,
                            None, print, None).fall_back(TypeError("x"))


def test_a_torch_compile_that_refuses_at_once_is_said_and_eager(monkeypatch, tmp_path):
    said = []

    def refuse(*args, **kwargs):
        raise RuntimeError("Dynamo is not supported on Python 3.99+")

    monkeypatch.setattr(torch, "compile", refuse)
    fn = StepFunction(torch.nn.Identity(), torch.nn.Identity(), None, True, None, said.append,
                      tmp_path)
    assert not fn.compiling and "Dynamo is not supported" in fn.failure
    assert said == [(f"torch.compile failed (RuntimeError: Dynamo is not supported on Python "
                    f"3.99+); training eagerly; traceback in {tmp_path}/compile_error.txt")]
