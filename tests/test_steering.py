"""Steering a run: warm-up formula, gradient clipping, freezing, snapshots (latest, pruning,
best), and the non-finite step policy."""

from __future__ import annotations

import math

import pytest
import torch

from core.config import ConfigError, SystemConfig
from core.nnet.py_factory import NetworkFactory, NonFiniteLoss
from core.schedule import learning_rate_at
from core.snapshots import Best, latest, numbered, prune, set_aside_later_best
from core.steps import RECENT, TrainStep
from tests.test_precision import batch_of, factory, tiny_config


@pytest.fixture(scope="module")
def db(coco128, tmp_path_factory):
    from tests._dense_reference import coco128_db
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


def schedule(**system):
    return SystemConfig().update_config({"learning_rate": 0.01, "decay_rate": 10,
                                         "stepsize": 100, **system})


def test_warmup_rises_linearly_from_the_factor_then_follows_the_steps():
    config = schedule(warmup_iters=4, warmup_factor=0.2)
    rates = [learning_rate_at(i, config) for i in (1, 2, 3, 4, 5, 100, 101)]
    expected = [0.01 * 0.2, 0.01 * 0.4, 0.01 * 0.6, 0.01 * 0.8, 0.01, 0.01, 0.001]
    assert rates == pytest.approx(expected, rel=1e-12)


def test_without_warmup_the_rate_is_the_originals_step_decay():
    config = schedule()
    assert [learning_rate_at(i, config) for i in (1, 100, 101, 201)] == \
        pytest.approx([0.01, 0.01, 0.001, 0.0001], rel=1e-12)


def test_warmup_crossing_a_decay_step_multiplies_both():
    config = schedule(stepsize=2, warmup_iters=4, warmup_factor=0.5)
    assert learning_rate_at(3, config) == pytest.approx(0.001 * (0.5 + 0.5 * 2 / 4), rel=1e-12)


def test_clipped_gradient_norm_never_exceeds_the_limit(tmp_path, db):
    batch = batch_of(db, 2)
    free = factory(tmp_path, db)
    free.train(batch)
    unclipped = float(free.grad_norm)
    limit = unclipped / 10
    clipped = factory(tmp_path, db, clip_grad_norm=limit)
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


def test_frozen_parameters_stay_bit_identical_and_leave_the_optimizer(tmp_path, db):
    nnet = factory(tmp_path, db, opt_algo="adam", freeze=["hg.pre"])
    frozen = {name: p.detach().clone() for name, p in nnet.model.named_parameters()
              if name.startswith("hg.pre.")}
    norms = {name: (m.running_mean.clone(), m.running_var.clone())
             for name, m in nnet.model.named_modules()
             if name.startswith("hg.pre.") and isinstance(m, torch.nn.BatchNorm2d)}
    assert frozen and norms
    assert sorted(nnet.frozen) == sorted(frozen)
    optimised = {id(p) for group in nnet.optimizer.param_groups for p in group["params"]}
    nnet.train_mode()
    batch = batch_of(db, 2)
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
    moved = [n for n, p in params.items() if n not in frozen and p.requires_grad]
    assert any(not torch.equal(params[n], factory(tmp_path, db).model.state_dict()[n])
               for n in moved)


def test_a_freeze_prefix_that_matches_nothing_names_the_closest(tmp_path, db):
    with pytest.raises(ConfigError, match="'hg.pr' names no parameter.*hg.pre"):
        factory(tmp_path, db, freeze=["hg.pr"])


def snapshot_config(tmp_path):
    return tiny_config(tmp_path)


def test_latest_passes_over_a_damaged_newest_snapshot(tmp_path, db):
    nnet = factory(tmp_path, db)
    for it in (2, 4, 6):
        nnet.save_params(it)
    nnet.system_config.snapshot_file(6).write_bytes(b"torn")
    said = []
    assert latest(nnet.system_config, said.append) == 4
    assert any("P_6.pkl" in line and "does not load" in line for line in said)


def test_latest_without_snapshots_starts_from_scratch_and_says_so(tmp_path):
    said = []
    assert latest(snapshot_config(tmp_path), said.append) == 0
    assert "starting from scratch" in said[0]


def test_pruning_keeps_the_newest_and_never_the_best_file(tmp_path, db):
    nnet = factory(tmp_path, db)
    for it in (1, 2, 3, 4):
        nnet.save_params(it)
    best = Best(nnet.system_config.snapshot_file("best"), None)
    best.update(1, 0.3, lambda path: nnet.save_params(1, {"best": best.record}, path=path))
    removed = prune(nnet.system_config, keep=2)
    assert [p.name for p in removed] == ["P_1.pkl", "P_2.pkl"]
    assert list(numbered(nnet.system_config)) == [3, 4]
    assert best.path.is_file()
    assert prune(nnet.system_config, keep=None) == []


def test_best_is_replaced_only_by_a_higher_ap():
    saved = []
    best = Best(path=None, record=None)
    assert best.update(5, 0.2, saved.append)
    assert not best.update(10, 0.1, saved.append)
    assert not best.update(15, 0.2, saved.append)
    assert best.update(20, 0.4, saved.append)
    assert best.record == {"iteration": 20, "AP": 0.4} and len(saved) == 2


def test_an_ap_of_minus_one_is_never_the_best():
    """COCO's -1 means nothing could be scored (an empty split): not a result to keep."""
    saved = []
    best = Best(path=None, record=None)
    assert not best.update(5, -1.0, saved.append)
    assert best.record is None and not saved


class Diverging:
    """A factory whose steps are non-finite from step `first_bad` on."""

    def __init__(self, first_bad):
        self.calls, self.first_bad = 0, first_bad

    def train(self, batch):
        self.calls += 1
        if self.calls >= self.first_bad:
            raise NonFiniteLoss({"focal": math.nan})
        return torch.tensor(1.0), {}


def test_skip_policy_counts_skips_and_stops_when_most_recent_steps_fail():
    said = []
    step = TrainStep(Diverging(first_bad=4), "skip", said.append)
    for it in range(1, 4):
        assert step(None, it) is not None
    skipped = 0
    with pytest.raises(NonFiniteLoss) as err:
        for it in range(4, 100):
            assert step(None, it) is None
            skipped += 1
    assert skipped == RECENT // 2  # the next skip made it more than half of the last RECENT
    assert err.value.iteration == 4 + RECENT // 2
    assert step.skipped == RECENT // 2 + 1


def test_stop_policy_raises_with_the_iteration():
    step = TrainStep(Diverging(first_bad=1), "stop", print)
    with pytest.raises(NonFiniteLoss) as err:
        step(None, 7)
    assert err.value.iteration == 7 and step.skipped == 0


def test_factory_reports_grad_norm_equal_to_the_gradients(tmp_path, db):
    nnet: NetworkFactory = factory(tmp_path, db)
    nnet.optimizer.step = lambda *a, **k: None  # keep the gradients to compare
    nnet.train(batch_of(db, 2))
    grads = [p.grad for p in nnet.model.parameters() if p.grad is not None]
    assert float(nnet.grad_norm) == pytest.approx(
        math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads)), rel=1e-5)


def test_a_skipped_non_finite_step_leaves_the_batch_norm_statistics_untouched(tmp_path, db):
    nnet = factory(tmp_path, db, nonfinite_loss="skip")
    nnet.train_mode()
    with torch.no_grad():
        nnet.model.hg.pre[0].conv.weight[0, 0, 0, 0] = float("nan")
    before = [b.clone() for b in nnet.model.buffers()]
    with pytest.raises(NonFiniteLoss):
        nnet.train(batch_of(db, 2))
    for now, was in zip(nnet.model.buffers(), before):
        assert torch.equal(now, was)


def test_a_best_snapshot_from_after_the_resumed_iteration_is_moved_aside(tmp_path, db):
    nnet = factory(tmp_path, db)
    path = nnet.system_config.snapshot_file("best")
    nnet.save_params(8, {"best": {"iteration": 8, "AP": 0.5}}, path=path)
    said = []
    set_aside_later_best(path, 10, said.append)
    assert path.is_file() and not said
    assert set_aside_later_best(path, 6, said.append) == path.with_name("P_best.aside1.pkl")
    assert not path.exists() and "P_best.pkl" in said[0] and "P_best.aside1.pkl" in said[0]
    assert torch.load(path.with_name("P_best.aside1.pkl"), weights_only=True)["best"] == \
        {"iteration": 8, "AP": 0.5}
    nnet.save_params(9, {"best": {"iteration": 9, "AP": 0.6}}, path=path)
    assert set_aside_later_best(path, 0, said.append).name == "P_best.aside2.pkl"
