"""NetworkFactory: its step (gradient norm, clipping, a skipped step) and parameter I/O (official
plain state dicts, pretrained weights, snapshots)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from _tiny_nnet import batch_of
from _tiny_nnet import factory as tiny_factory

from core.config import ConfigError, SystemConfig, check_db_config
from core.nnet.py_factory import NetworkFactory
from core.nnet.step_path import StepPath


def factory(tmp_path, categories=4, seed=0):
    system = SystemConfig().update_config({"model": "CornerNet_Tiny", "snapshot_name": "T",
                                           "cache_dir": str(tmp_path)})
    db = SimpleNamespace(configs=check_db_config({"categories": categories}))
    torch.manual_seed(seed)
    return NetworkFactory(system, db, device="cpu")


def test_official_plain_state_dict_with_module_prefix_loads_as_a_snapshot(tmp_path):
    source, target = factory(tmp_path), factory(tmp_path / "other", seed=1)
    assert not torch.equal(source.model.state_dict()["hg.pre.0.conv.weight"],
                           target.model.state_dict()["hg.pre.0.conv.weight"])
    path = target.system_config.snapshot_file(5)
    path.parent.mkdir(parents=True)
    torch.save({f"module.{k}": v for k, v in source.model.state_dict().items()}, path)
    target.load_params(5)
    for key, value in source.model.state_dict().items():
        assert torch.equal(target.model.state_dict()[key], value), key


def test_plain_state_dict_of_another_model_is_rejected_naming_keys(tmp_path):
    target = factory(tmp_path)
    path = target.system_config.snapshot_file(5)
    path.parent.mkdir(parents=True)
    torch.save({"module.backbone.weight": torch.zeros(1)}, path)
    with pytest.raises(ConfigError, match="does not fit this config.*unexpected keys "
                                          "\\['backbone.weight'\\]"):
        target.load_params(5)


def test_snapshot_of_another_class_count_says_what_differs(tmp_path):
    factory(tmp_path, categories=80).save_params(3)
    with pytest.raises(ConfigError, match="trained for 80 classes, this config has 4"):
        factory(tmp_path, categories=4).load_params(3)


def test_pretrained_weights_skip_heads_of_another_class_count(tmp_path):
    source, target = factory(tmp_path, categories=80), factory(tmp_path, categories=4, seed=1)
    path = tmp_path / "official.pkl"
    torch.save({f"module.{k}": v for k, v in source.model.state_dict().items()}, path)
    skipped = target.load_pretrained_params(path)
    assert skipped and all("heats" in key for key in skipped)
    own = target.model.state_dict()
    for key, value in source.model.state_dict().items():
        if key not in skipped:
            assert torch.equal(own[key], value), key


def test_snapshot_round_trip_restores_model_and_optimizer(tmp_path):
    first = factory(tmp_path)
    first.optimizer.state[next(first.model.parameters())] = {"step": torch.tensor(3.0)}
    first.save_params(7, {"data": {"next_batch": 7}})
    second = factory(tmp_path / "x", seed=1)
    second.system_config = second.system_config.replace(cache_dir=str(tmp_path))
    state = second.load_params(7)
    assert state["data"]["next_batch"] == 7
    for key, value in first.model.state_dict().items():
        assert torch.equal(second.model.state_dict()[key], value), key
    assert len(second.optimizer.state_dict()["state"]) == 1
    inference = factory(tmp_path / "y", seed=2)
    inference.system_config = inference.system_config.replace(cache_dir=str(tmp_path))
    inference.load_params(7, model_only=True)
    assert not inference.optimizer.state_dict()["state"]
    assert torch.equal(inference.model.state_dict()["hg.pre.0.conv.weight"],
                       first.model.state_dict()["hg.pre.0.conv.weight"])


def test_clipped_gradient_norm_never_exceeds_the_limit(tmp_path, tiny_db):
    batch = batch_of(tiny_db, 2)
    free = tiny_factory(tmp_path, tiny_db)
    free.train(batch)
    unclipped = float(free.grad_norm)
    limit = unclipped / 10
    clipped = tiny_factory(tmp_path, tiny_db, clip_grad_norm=limit)
    seen = []
    original_step = clipped.optimizer.step

    def step_checking_norm(*args, **kwargs):
        grads = [p.grad for p in clipped.model.parameters() if p.grad is not None]
        seen.append(float(torch.nn.utils.get_total_norm(grads)))
        return original_step(*args, **kwargs)

    clipped.optimizer.step = step_checking_norm
    for _ in range(3):
        clipped.train(batch)
    assert float(clipped.grad_norm) > limit  # the logged norm is the one before clipping
    assert all(norm <= limit * (1 + 1e-5) for norm in seen)
    assert seen[0] == pytest.approx(limit, rel=1e-4)




def test_factory_reports_grad_norm_equal_to_the_gradients(tmp_path, tiny_db):
    nnet: NetworkFactory = tiny_factory(tmp_path, tiny_db)
    nnet.optimizer.step = lambda *a, **k: None  # keep the gradients to compare
    nnet.train(batch_of(tiny_db, 2))
    grads = [p.grad for p in nnet.model.parameters() if p.grad is not None]
    assert float(nnet.grad_norm) == pytest.approx(
        math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads)), rel=1e-5)




@pytest.mark.parametrize("path", [None, StepPath(fused=True, static_targets=True)],
                         ids=["cpu", "gpu path"])
def test_a_non_finite_step_is_skipped_on_the_device_leaving_weights_optimizer_and_statistics(
        tmp_path, tiny_db, path):
    nnet = tiny_factory(tmp_path, tiny_db, nonfinite_loss="skip")
    if path is not None:  # the GPU's step (fused Adam: found_inf) built on the CPU
        torch.manual_seed(0)
        nnet = NetworkFactory(nnet.system_config, tiny_db, device="cpu", path=path)
    nnet.train_mode()
    batch = batch_of(tiny_db, 2)
    nnet.train(batch)  # a good step first: the optimizer has state to keep
    with torch.no_grad():
        nnet.model.hg.pre[0].conv.weight[0, 0, 0, 0] = float("nan")
    before = {k: v.clone() for k, v in nnet.model.state_dict().items()}
    moments = [{k: v.clone() for k, v in state.items()} for state in nnet.optimizer.state.values()]
    loss, _terms = nnet.train(batch)
    assert not torch.isfinite(loss)  # returned, not raised: the step's reader says it
    for key, value in nnet.model.state_dict().items():
        assert torch.equal(value, before[key]) or (value.isnan() == before[key].isnan()).all() \
            and torch.equal(value.nan_to_num(), before[key].nan_to_num()), key
    for state, was in zip(nnet.optimizer.state.values(), moments):
        for key, value in state.items():
            assert torch.equal(value, was[key]), key  # the step counters included


def test_a_skipped_first_step_of_fused_sgd_leaves_no_uninitialised_momentum_nor_average(
        tmp_path, tiny_db):
    """The GPU's step with SGD (fused, found_inf) built on the CPU: a first step skipped for a
    non-finite loss, then a good one, trains exactly as that good step alone from the same
    start (fused SGD's own buffers start as empty_like at its first step), and the skipped step
    leaves the weight average as it was."""
    path = StepPath(fused=True, static_targets=True)

    def fresh(name):
        base = tiny_factory(tmp_path / name, tiny_db, nonfinite_loss="skip", opt_algo="sgd",
                            ema_decay=0.5)
        torch.manual_seed(0)
        nnet = NetworkFactory(base.system_config, tiny_db, device="cpu", path=path)
        nnet.train_mode()
        return nnet

    batch = batch_of(tiny_db, 2)
    clean, skipped = fresh("clean"), fresh("skipped")
    weight = skipped.model.hg.pre[0].conv.weight
    kept = weight[0, 0, 0, 0].item()
    with torch.no_grad():
        weight[0, 0, 0, 0] = float("nan")
    average = {k: v.clone() for k, v in skipped.ema.state_dict().items()}
    assert not torch.isfinite(skipped.train(batch)[0])
    for key, value in skipped.ema.state_dict().items():
        if value.is_floating_point():
            assert torch.equal(value.nan_to_num(), average[key].nan_to_num()), key
    with torch.no_grad():
        weight[0, 0, 0, 0] = kept
    clean.train(batch)
    skipped.train(batch)
    for (key, a), b in zip(clean.model.state_dict().items(), skipped.model.state_dict().values()):
        assert torch.equal(a, b), key
    for a, b in zip(clean.optimizer.state.values(), skipped.optimizer.state.values()):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])
