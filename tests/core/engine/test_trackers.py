"""MLflow and W&B receive every metrics line and the report; a broken tracker is one warning."""

from __future__ import annotations

import json
import socket
import struct
import sys

import pytest
from _train_helpers import write_config

from core.engine.curves import NO_MATPLOTLIB
from core.engine.trackers import open_trackers, read_run_ids, wanted

PNG = b"\x89PNG\r\n\x1a\n"
REPORT = ("metrics.png", "pr_curves.png", "per_class_ap.png", "confusion_matrix.png")


def _train():
    from cornernet.commands import train

    return train


def _run(folder, *extra) -> int:
    return _train().main(["Tiny128", "--config-dir", str(folder), "--workers", "1",
                          "--device", "cpu", *extra])


def _lines(folder) -> dict[int, dict[str, float]]:
    """metrics.jsonl's numbers by iteration, as the trackers should hold them."""
    out = {}
    for text in (folder / "metrics.jsonl").read_text().splitlines():
        line = json.loads(text)
        iteration = line.pop("iteration")
        out[iteration] = {k: float(v) for k, v in line.items()
                                      if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return out


def _wandb_history(run_dir) -> dict[int, dict[str, float]]:
    """The history records of an offline W&B run file (its leveldb-style log of protobufs)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = next(run_dir.glob("run-*.wandb")).read_bytes()
    pos, block, pending, out = 7, 32768, b"", {}
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (kind == 0 and length == 0):
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                         for i in record.history.item}
                step = int(items.pop("_step"))
                out.setdefault(step, {}).update({k: float(v) for k, v in items.items()
                                                 if not k.startswith("_")})
    return out


@pytest.mark.slow  # two short runs in-process with an evaluation: about 40 s
def test_mlflow_and_wandb_get_every_line_and_the_report(coco128, tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 wants it for file:// stores
    (tmp_path / "wandb").mkdir()
    uri = (tmp_path / "mlruns").as_uri()
    settings = {"eval_iter": 2, "eval_images": 2, "val_iter": 0, "batch_pictures": False,
                "run_report": True, "trackers": ["mlflow", "wandb"], "mlflow_uri": uri,
                "mlflow_experiment": "tiny", "wandb_project": "tiny"}
    folder = write_config(tmp_path, coco128, db={"test_scales": [0.25], "num_dets": 100},
                          **settings)
    assert _run(folder) == 0
    run_folder = tmp_path / "cache" / "nnet" / "Tiny128"
    ids = json.loads((run_folder / "trackers.json").read_text())
    # resumed from the snapshot of iteration 4 and trained to 6: the same tracked runs go on
    config = json.loads((folder / "Tiny128.json").read_text())
    config["system"]["max_iter"] = 6
    (folder / "Tiny128.json").write_text(json.dumps(config))
    assert _run(folder, "--iter", "4") == 0
    assert json.loads((run_folder / "trackers.json").read_text()) == ids
    lines = _lines(run_folder)
    assert sorted(lines) == [1, 2, 3, 4, 5, 6] and "AP" in lines[2] and "best_AP" in lines[2]
    for name in REPORT:
        assert (run_folder / name).read_bytes().startswith(PNG), name

    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    run = client.get_run(ids["mlflow"])
    assert run.data.params["system.batch_size"] == "4"
    assert run.data.params["db.input_size"] == "[128, 128]"
    for key in ("loss", "lr", "AP", "best_AP", "images_per_s"):
        logged = {m.step: m.value for m in client.get_metric_history(ids["mlflow"], key)}
        assert logged == {it: v[key] for it, v in lines.items() if key in v}, key
    assert {f.path for f in client.list_artifacts(ids["mlflow"], "report")} == {
        f"report/{name}" for name in REPORT}

    runs = list((tmp_path / "wandb" / "wandb").glob(f"offline-run-*-{ids['wandb']}"))
    assert len(runs) == 2  # the first run and its resumption, one W&B id
    history: dict[int, dict] = {}
    for run_dir in runs:
        for step, values in _wandb_history(run_dir).items():
            history.setdefault(step, {}).update(values)
    assert history == lines
    for name in REPORT:  # each part uploads the report as it stands at its end
        assert all((d / "files" / name).read_bytes().startswith(PNG) for d in runs), name


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # 3 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_a_missing_package_or_a_server_down_is_one_warning_each(coco128, tmp_path, monkeypatch,
                                                             capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # and no report pictures
    folder = write_config(tmp_path, coco128, max_iter=2, val_iter=0, batch_pictures=False,
                          run_report=True, trackers=["mlflow", "wandb"],
                          mlflow_uri=f"http://127.0.0.1:{_closed_port()}")
    assert _run(folder) == 0
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("warning: mlflow could not be opened")
    assert warnings[1].startswith("warning: wandb is not installed") and \
        'pip install -e ".[wandb]"' in warnings[1]
    assert "iteration 2: loss" in out
    assert [line for line in out.splitlines() if "needs matplotlib" in line] == [
        NO_MATPLOTLIB.format(plot="python tools/plot_metrics.py")]
    assert not (tmp_path / "cache" / "nnet" / "Tiny128" / "metrics.png").exists()


@pytest.mark.slow  # two iterations in-process: 2 s
def test_no_run_report_nor_events_when_the_config_turns_them_off(coco128, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboard")
    folder = write_config(tmp_path, coco128, max_iter=2, val_iter=0, batch_pictures=False,
                          eval_iter=2, eval_images=2,
                          db={"test_scales": [0.25], "num_dets": 100}, run_report=False,
                          tensorboard=False)
    assert _run(folder) == 0
    out = capsys.readouterr().out
    run_folder = tmp_path / "cache" / "nnet" / "Tiny128"
    assert "iteration 2: loss" in out and "run report" not in out
    assert not (run_folder / "tb").exists()
    # the evaluation wrote its own pictures into its results folder; none reached the run's
    assert list(tmp_path.glob("results/**/pr_curves.png"))
    assert (run_folder / "metrics.jsonl").is_file()
    assert not [name for name in REPORT if (run_folder / name).exists()]


def test_trackers_by_config_or_environment():
    assert wanted({"trackers": ["wandb"]}, {}) == ["wandb"]
    assert wanted({"trackers": None}, {"CORNERNET_TRACKERS": "wandb, mlflow"}) == [
        "mlflow", "wandb"]
    assert wanted({}, {}) == []


@pytest.mark.parametrize("text", ['{"mlflow": "abc', "not json at all", "[1, 2]",
                                  '{"mlflow": 3}'])
def test_a_damaged_run_ids_file_is_set_aside_and_named(tmp_path, text):
    path = tmp_path / "trackers.json"
    path.write_text(text)
    heard = []
    assert read_run_ids(path, heard.append) == {}
    assert not path.exists() and (tmp_path / "trackers.aside1.json").read_text() == text
    assert len(heard) == 1 and "trackers.aside1.json" in heard[0] and str(path) in heard[0]
    path.write_text(text)  # a second one takes the next free name, the first is kept
    read_run_ids(path, heard.append)
    assert (tmp_path / "trackers.aside2.json").read_text() == text
    path.write_text('{"mlflow": "0123abc"}')
    assert read_run_ids(path, heard.append) == {"mlflow": "0123abc"} and len(heard) == 2


@pytest.mark.slow  # a short run and its resume in-process, with an MLflow file store: ~10 s
def test_a_resume_with_a_damaged_trackers_json_goes_on_with_a_warning(coco128, tmp_path,
                                                                     monkeypatch, capsys):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    folder = write_config(tmp_path, coco128, max_iter=2, val_iter=0, batch_pictures=False,
                          trackers=["mlflow"], mlflow_uri=(tmp_path / "mlruns").as_uri())
    assert _run(folder) == 0
    run_folder = tmp_path / "cache" / "nnet" / "Tiny128"
    (run_folder / "trackers.json").write_text('{"mlflow": "a1b2')  # cut short by a full disk
    config = json.loads((folder / "Tiny128.json").read_text())
    config["system"]["max_iter"] = 3
    (folder / "Tiny128.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert _run(folder, "--iter", "2") == 0
    out = capsys.readouterr().out
    assert "trackers.aside1.json" in out and "warning:" in out
    assert (run_folder / "trackers.aside1.json").read_text() == '{"mlflow": "a1b2'
    assert set(json.loads((run_folder / "trackers.json").read_text())) == {"mlflow"}
    assert max(json.loads(line)["iteration"]
               for line in (run_folder / "metrics.jsonl").read_text().splitlines()) == 3


def test_tensorboard_named_as_a_tracker_is_the_built_in_writer_not_a_warning(tmp_path):
    said = []
    opened = open_trackers({"trackers": ["tensorboard"]}, {}, tmp_path, 0, said.append)
    assert opened == [] and said == []
    open_trackers({"trackers": ["tensorbord"]}, {}, tmp_path, 0, said.append)
    assert len(said) == 1 and "not one of mlflow, wandb, tensorboard" in said[0]
