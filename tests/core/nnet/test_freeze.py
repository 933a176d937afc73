"""core.nnet.freeze: frozen parameters keep their values, leave the optimizer, and their batch
norms keep their statistics; a prefix that matches nothing names the closest."""

from __future__ import annotations

import pytest
import torch
from _tiny_nnet import batch_of, factory

from core.config import ConfigError


def test_frozen_parameters_stay_bit_identical_and_leave_the_optimizer(tmp_path, tiny_db):
    nnet = factory(tmp_path, tiny_db, opt_algo="adam", freeze=["hg.pre"])
    frozen = {name: p.detach().clone() for name, p in nnet.model.named_parameters()
              if name.startswith("hg.pre.")}
    norms = {name: (m.running_mean.clone(), m.running_var.clone())
             for name, m in nnet.model.named_modules()
             if name.startswith("hg.pre.") and isinstance(m, torch.nn.BatchNorm2d)}
    assert frozen and norms
    assert sorted(nnet.frozen) == sorted(frozen)
    optimised = {id(p) for group in nnet.optimizer.param_groups for p in group["params"]}
    nnet.train_mode()
    batch = batch_of(tiny_db, 2)
    for _ in range(2):
        nnet.train(batch)
    params = dict(nnet.model.named_parameters())
    for name, before in frozen.items():
        assert torch.equal(params[name], before), name
        assert id(params[name]) not in optimised and params[name] not in nnet.optimizer.state
    modules = dict(nnet.model.named_modules())
    for name, (mean, var) in norms.items():
        assert not modules[name].training
        assert torch.equal(modules[name].running_mean, mean), name
        assert torch.equal(modules[name].running_var, var), name
    moved = [n for n, p in params.items() if n not in frozen and p.requires_grad]
    assert any(not torch.equal(params[n], factory(tmp_path, tiny_db).model.state_dict()[n])
               for n in moved)


def test_a_freeze_prefix_that_matches_nothing_names_the_closest(tmp_path, tiny_db):
    with pytest.raises(ConfigError, match="'hg.pr' names no parameter.*hg.pre"):
        factory(tmp_path, tiny_db, freeze=["hg.pr"])
