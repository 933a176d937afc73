"""`--data` end to end: each exporter's layout trained as exported from an empty folder, then
tested and used for prediction by the run's name from that folder; `cornernet check` takes
`--data` and `--set`.

What each command finds is on disk, so they run in this process (a process start costs seconds,
two torch imports with the fork server's): the layouts train through train.py's command line
here, and one run, trained on another export than it is tested on, trains as a user starts it,
`python -m cornernet.cli train` in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _exports import EXPORTS, roboflow_coco
from _inproc import Completed, run_script

from cornernet.commands import check

ROOT = Path(__file__).resolve().parents[2]


def _cornernet(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "cornernet.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def _in_process(script: str, args: list[str], cwd: Path) -> Completed:
    """`python <script> <args>` (test.py: `cornernet test`, demo.py: `cornernet predict`) run in
    this process from `cwd`."""
    return run_script(script, *args, cwd=cwd)


@pytest.mark.slow  # two iterations, a test and a prediction in-process: about 2 s
@pytest.mark.parametrize("layout", sorted(EXPORTS))
def test_an_export_trains_as_exported_then_tests_and_predicts_by_name(tmp_path, layout):
    export = EXPORTS[layout](tmp_path / "downloads" / f"my-{layout}")
    empty = tmp_path / "work"
    empty.mkdir()
    trained = _in_process("train.py", [
        "CornerNet_Tiny", "--data", str(export.path), "--name", "t", "--workers", "1", "--set",
        "system.max_iter=2", "system.batch_size=2", "system.display=1",
        f"system.cache_dir={empty / 'cache'}", f"system.result_dir={empty / 'results'}"], empty)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (f"read as {export.dataset}: {len(export.names)} classes "
            f"({', '.join(export.names)})") in trained.stdout
    record = json.loads((empty / "cache" / "nnet" / "t" / "config.json").read_text())
    assert record["db"]["categories"] == len(export.names)
    assert (record["system"]["model"], record["system"]["snapshot_name"]) == ("CornerNet_Tiny",
                                                                              "t")
    held = len(export.splits) == 1
    assert ("held out for validation" in trained.stdout) == held
    assert (empty / "cache" / "nnet" / "t" / "t_2.pkl").is_file()

    tested = _in_process("test.py", ["t"], empty)
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert "AP=" in tested.stdout
    image = next(p for p in sorted(export.path.rglob("*.jpg")))
    predicted = _in_process("demo.py", ["t", "--images", str(image)], empty)
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    assert f"{image}: " in predicted.stdout


@pytest.mark.slow
def test_check_takes_data_and_set(tmp_path):
    export = roboflow_coco(tmp_path / "rf", k=4)
    common = ["CornerNet_Tiny", "--data", str(export.path), "--no-fit", "--crop-samples", "4",
              "--out", str(tmp_path / "out"), "--set", f"system.cache_dir={tmp_path / 'cache'}"]
    plain = check.run(check.parse_args(common))["splits"]["train"]["settings"]["changes"]
    assert plain["test_scales"] == [0.2] and plain["rand_scale_min"] == 3.0
    changed = check.run(check.parse_args(common + ["db.test_scales=[0.2]"]))
    changes = changed["splits"]["train"]["settings"]["changes"]
    assert "test_scales" not in changes and changes["rand_scale_min"] == 3.0


@pytest.mark.slow  # a process of its own: the cornernet command from a fresh interpreter
def test_a_run_is_tested_on_another_export_of_its_classes(tmp_path):
    from _exports import label_studio, voc_devkit

    trained_on = label_studio(tmp_path / "ls")
    other = voc_devkit(tmp_path / "VOCdevkit")
    three = roboflow_coco(tmp_path / "rf")
    empty = tmp_path / "work"
    empty.mkdir()
    trained = _cornernet(["train", "CornerNet_Tiny", "--data", str(trained_on.path), "--name",
                          "ls", "--workers", "1", "--set", "system.max_iter=2",
                          "system.batch_size=2", f"system.cache_dir={empty / 'cache'}",
                          f"system.result_dir={empty / 'results'}"], empty)
    assert trained.returncode == 0, trained.stderr[-3000:]
    tested = _in_process("test.py", ["ls", "--data", str(other.path)], empty)
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert "a VOC devkit, read as VOC: 2 classes (circle, square)" in tested.stdout
    metrics = empty / "results" / "ls" / "2" / "val" / "data-VOCdevkit" / "metrics.json"
    assert metrics.is_file()
    refused = _in_process("test.py", ["ls", "--data", str(three.path)], empty)
    assert refused.returncode == 2
    assert "3 classes (shapes, circle, square) but ls detects 2" in refused.stderr


@pytest.mark.slow
def test_the_api_trains_on_an_export_and_resumes_it_by_name(tmp_path, monkeypatch):
    from _exports import labelimg

    import cornernet

    export = labelimg(tmp_path / "shots")
    done = cornernet.train("CornerNet_Tiny", data=export.path, name="api", workers=1,
                           max_iter=2, batch_size=2, cache_dir=str(tmp_path / "cache"),
                           result_dir=str(tmp_path / "results"))
    assert done.status == 0
    assert "api_2.pkl" in [p.name for p in done.snapshots]
    record = json.loads((tmp_path / "cache" / "nnet" / "api" / "data.json").read_text())
    assert record["layout"] == "labelImg folders (xml beside the images, no lists)"
    assert record["holdout"]["train_images"] + record["holdout"]["val_images"] == 6
    monkeypatch.chdir(tmp_path)  # the run's record: ./cache/nnet/api/config.json
    resumed = cornernet.train("api", resume="2", workers=1, max_iter=3)
    assert resumed.status == 0 and resumed.iteration == 3
    assert {"api_2.pkl", "api_3.pkl"} <= {p.name for p in resumed.snapshots}
