"""The weight average (system.ema_decay): its arithmetic, snapshots, and which weights test."""

from __future__ import annotations

import math

import pytest
import torch
from _tiny_nnet import batch_of, factory

from core.config import ConfigError, SystemConfig
from core.engine.evaluation import inference_network


@pytest.fixture(scope="module")
def db(coco128, tmp_path_factory):
    from tests._dense_reference import coco128_db
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """float32 sums in another order: relative 1e-5 of the tensor's mean magnitude; integer
    buffers exactly."""
    if not b.is_floating_point():
        return torch.equal(a, b)
    scale = float(b.abs().mean()) + 1e-12
    return bool(((a - b).abs() <= 1e-5 * scale + 1e-5 * b.abs()).all())


def test_average_after_steps_equals_the_hand_computed_one_with_warmup(tmp_path, db):
    decay, warmup, steps = 0.9, 2, 4
    nnet = factory(tmp_path, db, ema_decay=decay, ema_warmup=warmup)
    expected = {k: v.clone() for k, v in nnet.model.state_dict().items()}
    for k in range(1, steps + 1):
        nnet.train(batch_of(db, 4, seed=k))
        d = decay * (1 - math.exp(-k / warmup))
        for key, value in nnet.model.state_dict().items():
            expected[key] = (d * expected[key] + (1 - d) * value if value.is_floating_point()
                             else value.clone())
    assert nnet.ema.steps == steps
    averaged = nnet.ema.module.state_dict()
    moved = 0
    for key, value in expected.items():
        assert close(averaged[key], value), key
        if value.is_floating_point() and not torch.equal(value, nnet.model.state_dict()[key]):
            moved += 1
    assert moved > 100  # the average is not the last weights (weights and BN buffers move)
    # BN buffers are averaged too: they start at 0 and move with the model's
    assert any(key.endswith("running_mean") and bool(averaged[key].abs().sum() > 0)
               for key in averaged)


def test_decay_warms_up_as_yolox_and_is_constant_without_warmup(tmp_path, db):
    warm = factory(tmp_path, db, ema_decay=0.9998).ema
    assert warm.decay_at(1) == pytest.approx(0.9998 * (1 - math.exp(-1 / 2000)))
    assert warm.decay_at(20000) == pytest.approx(0.9998, rel=1e-4)
    assert factory(tmp_path, db, ema_decay=0.99, ema_warmup=0).ema.decay_at(1) == 0.99


def test_off_by_default_and_bad_values_are_named():
    assert SystemConfig().ema_decay is None
    for value in (0, 1, 1.5):
        with pytest.raises(ConfigError, match="system.ema_decay must lie between 0 and 1"):
            SystemConfig().update_config({"ema_decay": value})
    with pytest.raises(ConfigError, match="system.ema_warmup must be 0"):
        SystemConfig().update_config({"ema_warmup": -1})


def test_snapshot_round_trip_continues_the_average_exactly(tmp_path, db):
    straight = factory(tmp_path / "a", db, ema_decay=0.9, ema_warmup=3)
    for k in range(1, 5):
        straight.train(batch_of(db, 4, seed=k))
    first = factory(tmp_path / "b", db, ema_decay=0.9, ema_warmup=3)
    for k in range(1, 3):
        first.train(batch_of(db, 4, seed=k))
    first.save_params(2)
    resumed = factory(tmp_path / "b", db, seed=5, ema_decay=0.9, ema_warmup=3)
    resumed.load_params(2)
    assert resumed.ema.steps == 2
    for k in range(3, 5):
        resumed.train(batch_of(db, 4, seed=k))
    a, b = straight.ema.state_dict(), resumed.ema.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_test_path_runs_the_average_unless_raw_is_asked(tmp_path, db):
    """What evaluation during training runs (an inference network of the factory's weights):
    the average once it has a step, the trained weights when asked or before."""
    nnet = factory(tmp_path, db, ema_decay=0.5, ema_warmup=0)
    image = torch.rand(1, 3, 128, 128)
    assert inference_network(nnet).evaluated_weights == "raw"  # nothing averaged yet
    nnet.train_mode()
    nnet.train(batch_of(db, 4))
    with torch.no_grad():
        nnet.ema.module.tl_heats[-1][-1].bias += 1.0  # tell the two apart
        expected_average = nnet.ema.module.eval()(image, test=True)[0]
        expected_raw = nnet.model.eval()(image, test=True)[0]
    averaged = inference_network(nnet)
    assert averaged.evaluated_weights == "ema"
    assert torch.equal(averaged.test(image)[0], expected_average)
    raw = inference_network(nnet, raw_weights=True)
    assert raw.evaluated_weights == "raw"
    assert torch.equal(raw.test(image)[0], expected_raw)
    assert not torch.equal(raw.test(image)[0], expected_average)


def test_a_snapshot_without_an_average_starts_it_at_its_weights(tmp_path, db):
    plain = factory(tmp_path, db, seed=3)
    plain.save_params(1)
    nnet = factory(tmp_path, db, seed=4, ema_decay=0.9)
    nnet.load_params(1, model_only=True)
    assert nnet.ema.steps == 0 and inference_network(nnet).evaluated_weights == "raw"
    for key, value in plain.model.state_dict().items():
        assert torch.equal(nnet.ema.module.state_dict()[key], value), key


def test_an_update_is_device_work_only_no_copy_between_devices_nor_a_read_to_the_host():
    """On a GPU a tensor copied in from the CPU, or a value read back, makes the host wait for
    the device at every step. The model here lives on the meta device: every op the update
    dispatches is recorded with the devices it touches."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from core.nnet.ema import WeightAverage

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            tensors = [t for t in torch.utils._pytree.tree_leaves((args, kwargs, out))
                       if isinstance(t, torch.Tensor)]
            self.seen.append((str(func), {t.device.type for t in tensors}))
            return out

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).to("meta")
    average = WeightAverage(model, decay=0.9, warmup=10)
    with Record() as record:
        average.update(model)
    assert average.steps == 1 and int(average.state_dict()["n_averaged"]) == 2
    device_ops = [(op, devices) for op, devices in record.seen if devices != {"cpu"}]
    assert device_ops and all(devices == {"meta"} for _, devices in device_ops), record.seen
    assert not any("_local_scalar_dense" in op for op, _ in record.seen), record.seen
