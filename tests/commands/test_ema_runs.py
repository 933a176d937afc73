"""The weight average through the scripts: test.py --testiter best, train.py's evaluation,
resume, and two processes. The scripts run in this process (`run_script`, `run_train(...,
inproc=True)`); of the two ranks, one is a spawned process and the other this one."""

from __future__ import annotations

import datetime
import json

import pytest
import torch
import torch.multiprocessing as mp
from _inproc import run_script
from _tiny_coco import make_tiny_coco
from _tiny_nnet import batch_of, tiny_config
from _train_helpers import copy_snapshot, run_train, write_config

from core.data.chunks import deal
from core.nnet.py_factory import NetworkFactory


def _results(root, testiter):
    folder = root / "results" / "CocoTiny" / str(testiter) / "val"
    return (json.loads((folder / "results.json").read_text()),
            json.loads((folder / "metrics.json").read_text()))


@pytest.mark.slow
def test_testiter_best_evaluates_the_average_and_raw_weights_on_request(coco128, tmp_path):
    root = make_tiny_coco(coco128, tmp_path)
    config_file = root / "configs" / "CocoTiny.json"
    config = json.loads(config_file.read_text())
    config["system"]["ema_decay"] = 0.9
    config_file.write_text(json.dumps(config))
    folder = root / "cache" / "nnet" / "CocoTiny"
    snapshot = torch.load(folder / "CocoTiny_0.pkl", weights_only=True)
    # The best snapshot: its average is snapshot 0's weights (which find people), its raw
    # weights are those without the bias toward class 1 (which find something else).
    averaged = {f"module.{k}": v.clone() for k, v in snapshot["model"].items()}
    averaged["n_averaged"] = torch.tensor(4)
    raw = {k: v.clone() for k, v in snapshot["model"].items()}
    for key, value in raw.items():
        if ("tl_heats" in key or "br_heats" in key) and key.endswith(".bias") and \
                value.shape == (80,):
            value[0] -= 8
    snapshot["config"]["system"]["ema_decay"] = 0.9
    torch.save({**snapshot, "model": raw, "ema": averaged, "best": {"iteration": 0, "AP": 0.0}},
               folder / "CocoTiny_best.pkl")

    args = ("test.py", "CocoTiny", "--config-dir", root / "configs", "--images", 3,
            "--device", "cpu")
    plain = run_script(*args, "--testiter", 0)
    assert plain.returncode == 0, plain.stderr
    assert "weights: the trained weights" in plain.stdout  # snapshot 0 has no average
    best = run_script(*args, "--testiter", "best")
    assert best.returncode == 0, best.stderr
    assert "weights: the average of the weights" in best.stdout
    assert _results(root, "best")[0] == _results(root, 0)[0]
    assert _results(root, "best")[1]["weights"] == "ema"
    raw_run = run_script(*args, "--testiter", "best", "--raw-weights")
    assert raw_run.returncode == 0, raw_run.stderr
    detections, metrics = _results(root, "best")
    assert metrics["weights"] == "raw"
    assert detections != _results(root, 0)[0]
    assert {d["category_id"] for d in detections} != {1}


@pytest.mark.slow
def test_training_evaluates_the_average_and_resumes_it_exactly(coco128, tmp_path):
    system = {"max_iter": 6, "snapshot": 3, "stepsize": 4, "ema_decay": 0.9, "ema_warmup": 2,
              "eval_iter": 3, "eval_images": 4, "val_iter": 0}
    db = {"top_k": 20, "num_dets": 100, "test_scales": [0.25]}
    straight_dir = write_config(tmp_path, coco128, db=db, **system)
    straight = run_train(straight_dir, inproc=True)
    assert straight.returncode == 0, straight.stdout + straight.stderr
    lines = [json.loads(line) for line in
             (tmp_path / "cache" / "nnet" / "Tiny128" / "metrics.jsonl").read_text().splitlines()]
    evaluated = [line for line in lines if "AP" in line]
    assert [line["iteration"] for line in evaluated] == [3, 6]
    assert all(line["eval_weights"] == "ema" for line in evaluated)
    assert all("per_class" not in line for line in lines)  # the summary only
    written = json.loads(
        (tmp_path / "results" / "Tiny128" / "3" / "val" / "metrics.json").read_text())
    assert written["weights"] == "ema" and len(written["per_class"]) == 80
    best = torch.load(tmp_path / "cache" / "nnet" / "Tiny128" / "Tiny128_best.pkl",
                      weights_only=True)
    assert int(best["ema"]["n_averaged"]) == best["iteration"] + 1

    resumed_dir = write_config(tmp_path / "resumed", coco128, db=db, **system)
    copy_snapshot(tmp_path / "cache", tmp_path / "resumed" / "cache", "Tiny128", 3)
    resumed = run_train(resumed_dir, "--iter", "3", inproc=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    a = torch.load(tmp_path / "cache" / "nnet" / "Tiny128" / "Tiny128_6.pkl", weights_only=True)
    b = torch.load(tmp_path / "resumed" / "cache" / "nnet" / "Tiny128" / "Tiny128_6.pkl",
                   weights_only=True)
    assert int(a["ema"]["n_averaged"]) == 7 and a["ema"].keys() == b["ema"].keys()
    for key, value in a["ema"].items():
        assert torch.equal(value, b["ema"][key]), key


def _rank(rank: int, tmp_path, coco128, url: str) -> None:
    from tests._dense_reference import coco128_db
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=url, world_size=2, rank=rank,
                                         timeout=datetime.timedelta(seconds=120))
    try:
        db = coco128_db(coco128, "CornerNet_Tiny", tmp_path / f"dbs{rank}", categories=80)
        system = tiny_config(tmp_path, ema_decay=0.8, ema_warmup=1)
        share = deal(system.batch_size, system.chunk_sizes, rank, 2)
        torch.manual_seed(0)
        nnet = NetworkFactory(system, db, device="cpu", distributed=True, share=share)
        start = sum(share.sizes[:share.first])
        for step in range(3):
            batch = batch_of(db, 4, seed=step)
            nnet.train({k: v[start:start + sum(share.mine)] for k, v in batch.items()})
        torch.save(nnet.ema.state_dict(), tmp_path / f"ema{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_processes_hold_the_same_average(coco128, tmp_path):
    """Rank 1 is a spawned process, rank 0 this one (its threads and random state kept)."""
    url = f"file://{tmp_path / 'rendezvous'}"
    other = mp.get_context("spawn").Process(target=_rank, args=(1, tmp_path, coco128, url))
    other.start()
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng():
            _rank(0, tmp_path, coco128, url)
    finally:
        torch.set_num_threads(threads)
        other.join(timeout=120)
        if other.exitcode is None:
            other.kill()
            other.join()
    assert other.exitcode == 0
    first, second = (torch.load(tmp_path / f"ema{r}.pt", weights_only=True) for r in (0, 1))
    assert int(first["n_averaged"]) == 4
    for key, value in first.items():
        assert torch.equal(value, second[key]), key
    moved = [k for k in first if k.endswith("running_var")]
    assert moved and not all(torch.equal(first[k], torch.ones_like(first[k])) for k in moved)
