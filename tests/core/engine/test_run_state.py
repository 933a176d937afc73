"""Each stateful part of a training run owns its state (`state_dict` / `load_state_dict`), and
`Run` composes them in the snapshot layout every snapshot has had: a part written and loaded
again holds what it held, and a snapshot written through the Saver has exactly the old keys.
The evaluation during training runs the weights in training in test.py's network."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch
from _old_snapshot import LOOP_STATE, SYSTEM, old_snapshot
from _tiny_nnet import batch_of, factory

from core.deploy.network import InferenceNetwork
from core.engine.evaluation import inference_network
from core.engine.metrics import DataCounts, Throughput
from core.engine.run import DataPosition, Run
from core.engine.snapshots import Best
from core.engine.steps import TrainStep
from tests._dense_reference import coco128_db


def share(*sizes: int) -> SimpleNamespace:
    return SimpleNamespace(sizes=tuple(sizes), batch_size=sum(sizes))


def test_best_record_round_trips_and_none_stays_none():
    best = Best(path=None)
    best.update(30, 0.25, lambda path: None)
    again = Best(path=None, record={"iteration": 1, "AP": 0.9})
    again.load_state_dict(best.state_dict())
    assert again.record == {"iteration": 30, "AP": 0.25}
    again.load_state_dict(Best(path=None).state_dict())
    assert again.record is None


def test_data_counts_round_trip_and_count_on_from_the_loaded_values():
    counts = DataCounts(lambda line: None)
    counts.add({"skipped": ["a.jpg", "b.jpg"], "dropped_objects": 3})
    again = DataCounts(lambda line: None)
    again.load_state_dict({**counts.state_dict(), "skipped_steps": 9})  # others' keys ignored
    again.add({"skipped": ["c.jpg"], "dropped_objects": 1})
    assert again.state_dict() == {"skipped_images": 3, "dropped_objects": 4}
    again.load_state_dict({})
    assert again.state_dict() == {"skipped_images": 0, "dropped_objects": 0}


def test_skipped_steps_round_trip():
    step = TrainStep(nnet=None, policy="skip", log=lambda line: None)
    step.load_state_dict({"skipped_steps": 5, "skipped_images": 2})
    assert step.skipped == 5 and step.state_dict() == {"skipped_steps": 5}


def test_the_throughput_clock_continues_from_the_loaded_seconds():
    speed = Throughput()
    speed.load_state_dict({"elapsed": 100.0})
    time.sleep(0.05)
    elapsed = speed.state_dict()["elapsed"]
    assert 100.05 <= elapsed < 130.0  # 30 s of slack for a loaded machine
    assert Throughput().state_dict()["elapsed"] < 30.0


def test_data_position_loads_the_position_and_keeps_this_runs_dealing():
    said = []
    position = DataPosition(share(2, 2), world=2, batch_size=4, log=said.append)
    position.load_state_dict({"next_batch": 7, "world_size": 1, "batch_size": 4,
                              "chunks": [4]})
    position.taken()
    assert position.state_dict() == {"next_batch": 8, "world_size": 2, "batch_size": 4,
                                     "chunks": [2, 2]}
    assert said == [("note: snapshot 7 was trained with the chunks [4], this run uses [2, 2]: "
                     "the data and the objective after it differ from an uninterrupted run")]
    said.clear()
    position.load_state_dict({"next_batch": 3, "chunks": [2, 2]})
    assert position.next_batch == 3 and not said


def quiet(line: str) -> None:
    pass


def loop_run(nnet, start: int = 0, sizes: tuple[int, ...] = (4,)) -> Run:
    log = quiet
    return Run(system_config=nnet.system_config, nnet=nnet, share=share(*sizes), rank=0,
               distributed=False, start=start, workers=1, sample=None, probe=None,
               make_train_db=None, make_val_db=None,
               best=Best(nnet.system_config.snapshot_file("best")), evaluate=None,
               step=TrainStep(nnet, "skip", log), counts=DataCounts(log), speed=Throughput(),
               position=DataPosition(share(*sizes), 1, sum(sizes), log, next_batch=start),
               stop=None, log=log)


@pytest.fixture(scope="module")
def db(coco128, tmp_path_factory):
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


def test_an_old_snapshots_loop_state_goes_to_each_part(tmp_path, db):
    run = loop_run(factory(tmp_path, db, **SYSTEM), start=2)
    run.load_state_dict(LOOP_STATE)
    assert run.best.record == {"iteration": 2, "AP": 0.125}
    assert run.speed.elapsed() >= 12.5 and run.step.skipped == 0
    assert run.counts.values() == {"skipped_images": 0, "dropped_objects": 0}
    assert run.position.next_batch == 2
    state = run.state_dict()
    assert state.keys() == LOOP_STATE.keys()
    assert state["best"] == LOOP_STATE["best"] and state["data"] == LOOP_STATE["data"]
    assert state["counts"] == {"skipped_images": 0, "dropped_objects": 0, "skipped_steps": 0}


@pytest.mark.slow  # 2.4 s serially on 2 cores: the "not slow" loop keeps tests under 2 s
def test_a_saver_snapshot_has_the_old_layout_and_resumes_every_part(tmp_path, db):
    nnet = factory(tmp_path, db, **SYSTEM)
    nnet.train(batch_of(db, 4))
    run = loop_run(nnet)
    run.counts.add({"skipped": ["x.jpg"], "dropped_objects": 2})
    run.step.skipped = 3
    for _ in range(5):
        run.position.taken()
    run.saver.evaluated(5, 0.5)  # a new best: <Cfg>_best.pkl through the saver
    run.saver.save(5)
    written = torch.load(nnet.system_config.snapshot_file(5), weights_only=True)
    assert written.keys() == old_snapshot(nnet, 5).keys() | {"classes"}
    assert written["best"] == {"iteration": 5, "AP": 0.5}
    assert written["counts"] == {"skipped_images": 1, "dropped_objects": 2, "skipped_steps": 3}
    assert written["data"] == {"next_batch": 5, "world_size": 1, "batch_size": 4, "chunks": [4]}
    best = torch.load(run.best.path, weights_only=True)
    assert best["best"] == {"iteration": 5, "AP": 0.5} and best["iteration"] == 5

    resumed = loop_run(factory(tmp_path, db, seed=3, **SYSTEM), start=5)
    resumed.load_state_dict(written)
    assert resumed.state_dict()["counts"] == written["counts"]
    assert resumed.state_dict()["data"] == written["data"]
    assert resumed.best.record == written["best"]
    assert resumed.speed.elapsed() >= written["time"]


def test_the_weights_in_training_evaluate_as_test_py_runs_their_snapshot(tmp_path, db):
    """With EMA on: the average runs, the result equals the network test.py builds from a
    snapshot written now, and building it draws nothing from the training RNG."""
    nnet = factory(tmp_path, db, **SYSTEM)
    for seed in range(2):
        nnet.train(batch_of(db, 4, seed=seed))
    rng = torch.get_rng_state()
    network = inference_network(nnet)
    assert torch.equal(torch.get_rng_state(), rng)
    assert network.evaluated_weights == "ema"
    path = nnet.save_params(2)
    from_file = InferenceNetwork.from_file(path, device="cpu")
    image = torch.rand(1, 3, 63, 63, generator=torch.Generator().manual_seed(0))
    got, want = network.test(image)[0], from_file.test(image)[0]
    assert torch.equal(got, want)
    raw = InferenceNetwork.from_file(path, device="cpu", raw_weights=True).test(image)[0]
    assert not torch.equal(got, raw)  # the average is what ran, not the raw weights
    assert torch.equal(inference_network(nnet, raw_weights=True).test(image)[0], raw)
