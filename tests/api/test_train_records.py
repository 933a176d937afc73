"""`TrainResult` is read from the files the run's rank 0 wrote (core/engine/records.py), so it is
the same whichever launcher ran the training: this process, spawned ranks, torchrun or srun."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import cornernet
from core.engine import records
from cornernet.commands import train as command

REPO = Path(__file__).resolve().parents[2]
NAME = "CornerNet_Tiny"
EVALUATED = {"AP": 0.25, "AP50": 0.5, "AP75": 0.2, "APs": -1.0, "APm": 0.3, "APl": 0.1}


def _write_run(folder: Path, last: int, best: int, aps: dict[int, float]) -> None:
    """What rank 0 of a run leaves: numbered snapshots, the best one with its record, and
    metrics.jsonl with a loss on every line and an evaluation's AP on some."""
    folder.mkdir(parents=True, exist_ok=True)
    for iteration in (last // 2, last):
        torch.save({"iteration": iteration}, folder / f"{NAME}_{iteration}.pkl")
    torch.save({"iteration": best, "best": {"iteration": best, "AP": aps[best]}},
               folder / f"{NAME}_best.pkl")
    lines = [{"iteration": it, "loss": 1.0 / it,
              **({**EVALUATED, "AP": aps[it], "best_AP": aps[best], "best_iteration": best}
                 if it in aps else {})} for it in range(1, last + 1)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_result_is_what_the_run_folder_says_not_what_the_process_saw(tmp_path,
                                                                          monkeypatch):
    """The command's run only writes files here, as a rank in another process would."""
    where = {"cache_dir": str(tmp_path / "cache"), "result_dir": str(tmp_path / "results")}
    folder = tmp_path / "cache" / "nnet" / NAME

    def run(options, log=print):
        _write_run(folder, last=4, best=2, aps={2: 0.25, 4: 0.125})
        return 0

    monkeypatch.setattr(command, "run", run)
    done = cornernet.train(NAME, **where)
    assert done.status == 0 and done.iteration == 4
    assert [p.name for p in done.snapshots] == [f"{NAME}_2.pkl", f"{NAME}_4.pkl",
                                                f"{NAME}_best.pkl"]
    assert done.best == folder / f"{NAME}_best.pkl" and done.best_ap == 0.25
    assert [e["iteration"] for e in done.evaluations] == [2, 4]
    assert done.metrics == {"iteration": 4, **EVALUATED, "AP": 0.125, "best_AP": 0.25,
                            "best_iteration": 2}


def test_an_earlier_runs_files_are_not_this_runs_records(tmp_path):
    """A run that failed before its loop wrote nothing: the folder's older metrics, best and
    snapshots are not said to be this run's (the snapshots are still listed)."""
    folder = tmp_path / NAME
    _write_run(folder, last=4, best=4, aps={4: 0.5})
    before = records.state(folder)
    found = records.read(folder, NAME, before)
    assert (found["metrics"], found["evaluations"], found["best"], found["best_ap"],
            found["iteration"]) == (None, [], None, None, None)
    assert len(found["snapshots"]) == 3
    (folder / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "loss": 2.0}) + "\n")
    again = records.read(folder, NAME, before)  # the loop started again and rewrote it
    assert again["iteration"] == 1 and again["best_ap"] == 0.5 and again["evaluations"] == []


def test_no_folder_is_no_records(tmp_path):
    assert records.read(tmp_path / "none", NAME, records.state(tmp_path / "none")) == {
        "snapshots": [], "best": None, "best_ap": None, "metrics": None, "evaluations": [],
        "iteration": None}


SCRIPT = """\
    import os
    import pickle
    import sys

    import cornernet

    if __name__ == "__main__":  # the prefetch workers import this script again
        root = sys.argv[1]
        done = cornernet.train(
            "CornerNet_Tiny", distributed=True, workers=1, device="cpu", max_iter=2,
            snapshot=2, eval_iter=2, val_iter=0, display=1, batch_size=2, batch_pictures=False,
            num_train_images=4, num_val_images=2, db__input_size=[64, 64],
            db__output_sizes=[[16, 16]], cache_dir=root + "/cache",
            result_dir=root + "/results", data_dir=root + "/data")
        with open(f"{root}/rank{os.environ['RANK']}.pkl", "wb") as out:
            pickle.dump(done, out)
    """


@pytest.mark.slow
def test_train_under_torchrun_returns_rank_0s_snapshots_and_metrics(tmp_path):
    """Two CPU processes started by torchrun, each calling `cornernet.train`: rank 0's result
    holds the snapshots, the evaluation and the last iteration that its files record."""
    script = tmp_path / "train_two.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node=2", str(script), str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "processes: 2" in done.stdout
    result = pickle.loads((tmp_path / "rank0.pkl").read_bytes())
    folder = tmp_path / "cache" / "nnet" / NAME
    assert result.status == 0 and result.iteration == 2
    assert [p.name for p in result.snapshots] == [f"{NAME}_2.pkl", f"{NAME}_best.pkl"]
    assert all(path.is_file() and path.parent == folder for path in result.snapshots)
    assert result.metrics["iteration"] == 2 and "AP" in result.metrics
    assert result.best == folder / f"{NAME}_best.pkl" and result.best_ap == result.metrics["AP"]
    assert [e["iteration"] for e in result.evaluations] == [2]
    assert pickle.loads((tmp_path / "rank1.pkl").read_bytes()).status == 0
