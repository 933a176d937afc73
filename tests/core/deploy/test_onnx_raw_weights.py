"""`tools/export.py --raw-weights` end to end, and a real kill -9 of an export while it writes.

One CornerNet_Tiny snapshot trained with a weight average (system.ema_decay) on coco128: its
trained weights are those of the session's export (`spread_export`: `spread_weights`, real pairs
of class 1), its average lies halfway between them and the initial ones. It is exported once per
module with --raw-weights, by tools/export.py in the test process; the export killed while it
writes is a real process.

The graph torch.onnx traces depends on the weights handed to it and the decode settings, input
sizes and opset, nothing else: here they are the session export's, so that export's graph is
this one's and the exporter is handed it instead of 20 s of CPU tracing the same thing again
(checked: the weights' digest, the settings and the opset are compared first). Everything else
runs: the weights --raw-weights chooses, their digest and the metadata, the onnxruntime check of
the graph against torch on those weights, the write.
"""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from _onnx import snapshot_folder
from _tiny_coco import ROOT, inproc, make_tiny_coco, script_env
from _tools import load_tool

from core.config import load_config
from core.dbs import datasets
from core.deploy.onnx_graph import opset_of, output_names, snapshot_weights, weights_digest
from core.nnet.py_factory import NetworkFactory

onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[onnx]'")
pytest.importorskip("onnxruntime", reason="the onnx extra: pip install -e '.[onnx]'")
pytest.importorskip("onnxscript", reason="the onnx extra: pip install -e '.[onnx]'")

IMAGE = "000000000529.jpg"
# The session's export takes 20 s of CPU; on a shared machine the wall time can be ten times that.
EXPORT_TIMEOUT = 1200
pytestmark = [pytest.mark.timeout(EXPORT_TIMEOUT + 300), pytest.mark.slow]  # a real process


def configs(root):
    return root / "configs"


def traced_as(session_file):
    """An `export_onnx` that gives the graph of `session_file` (an export of the same weights,
    settings and opset: what tracing them again would give) with the metadata of this export."""
    session = onnx.load(str(session_file))
    recorded = {p.key: json.loads(p.value) for p in session.metadata_props}

    def export_onnx(graph, example, opset, meta, max_side):
        assert weights_digest(graph.model.state_dict()) == recorded["digest"]
        assert graph.decode_kwargs == recorded["decode"] and max_side == recorded["max_side"]
        assert opset == opset_of(session) and tuple(example.shape[:2]) == (2, 3)
        proto = onnx.ModelProto()
        proto.CopyFrom(session)
        del proto.metadata_props[:]
        onnx.helper.set_model_props(proto, meta)
        onnx.checker.check_model(proto, full_check=True)
        return proto.SerializeToString(), output_names(graph.model)

    return export_onnx


@pytest.fixture(scope="module")
def exported(spread_export, coco128, tmp_path_factory):
    """(root, export's stdout, the snapshot file) of a raw-weights export of iteration 0."""
    root = make_tiny_coco(coco128, tmp_path_factory.mktemp("raw"))
    path = configs(root) / "CocoTiny.json"
    config = json.loads(path.read_text())
    config["system"].update(ema_decay=0.5, ema_warmup=0)
    path.write_text(json.dumps(config))
    system_config, db_config = load_config("CocoTiny", configs(root))
    db = datasets["COCO"](db_config, split=None, sys_config=system_config)
    nnet = NetworkFactory(system_config, db, device="cpu")
    trained = torch.load(snapshot_folder(spread_export[0]) / "CocoTiny_0.pkl", weights_only=True)
    nnet.model.load_state_dict(trained["model"])  # spread_weights, the session export's
    nnet.ema.update(nnet.model)  # one step: the average is half initial, half trained
    nnet.save_params(0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("core.deploy.exporter.export_onnx",
                      traced_as(snapshot_folder(spread_export[0]) / "CocoTiny_0.onnx"))
        done = inproc("tools/export.py", "CocoTiny", "--testiter", 0, "--raw-weights",
                      "--config-dir", configs(root), "--image", coco128 / "images" / IMAGE)
    assert done.returncode == 0, done.stderr
    return root, done.stdout, system_config.snapshot_file(0)


def onnx_path(root):
    return root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.onnx"


def test_the_raw_export_holds_the_trained_weights_not_their_average(exported):
    root, stdout, snapshot = exported
    assert "within the tolerance" in stdout and "wrote" in stdout
    assert "(raw weights of iteration 0)" in stdout
    meta = {p.key: json.loads(p.value) for p in onnx.load(str(onnx_path(root))).metadata_props}
    saved = torch.load(snapshot, weights_only=True)
    raw = weights_digest(snapshot_weights(saved, "raw"))
    average = weights_digest(snapshot_weights(saved, "ema"))
    assert meta["weights"] == "raw" and meta["iteration"] == 0
    assert meta["digest"] == raw != average


def evaluate(root, runtime):
    """test.py --raw-weights in `runtime`: (stdout, metrics.json, {image id: detections})."""
    done = inproc("test.py", "CocoTiny", "--testiter", 0, "--config-dir", configs(root),
                  "--device", "cpu", "--images", 6, "--runtime", runtime, "--raw-weights")
    assert done.returncode == 0, done.stderr
    out = root / "results" / "CocoTiny" / "0" / "val"
    by_image = {}
    for entry in json.loads((out / "results.json").read_text()):
        by_image.setdefault(entry["image_id"], []).append(
            [*entry["bbox"], entry["score"], entry["category_id"]])
    return (done.stdout, json.loads((out / "metrics.json").read_text()),
            {key: np.array(rows) for key, rows in by_image.items()})


def test_onnxruntime_raw_weights_are_filed_as_raw_and_equal_torchs_raw_weights(exported):
    root, _, _ = exported
    _, torch_metrics, torch_dets = evaluate(root, "torch")
    stdout, onnx_metrics, onnx_dets = evaluate(root, "onnxruntime")
    assert "(onnxruntime)" in stdout and "weights: the trained weights" in stdout
    assert torch_metrics["weights"] == onnx_metrics["weights"] == "raw"
    assert sorted(onnx_dets) == sorted(torch_dets) and sum(map(len, torch_dets.values())) > 20
    for image_id, ours in torch_dets.items():
        theirs = onnx_dets[image_id]
        assert len(theirs) == len(ours), image_id
        # Rows ordered by score then box (the order of equal scores may differ).
        ours = ours[np.lexsort((ours[:, 0], -ours[:, 4]))]
        theirs = theirs[np.lexsort((theirs[:, 0], -theirs[:, 4]))]
        np.testing.assert_allclose(theirs[:, 4], ours[:, 4], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(theirs[:, :4], ours[:, :4], rtol=1e-4, atol=1e-2)
        assert (theirs[:, 5] == ours[:, 5]).all()
    for name, value in torch_metrics["metrics"].items():
        assert abs(onnx_metrics["metrics"][name] - value) <= 0.002, name


# The export run as a real process, its write slowed down so that the kill lands in it: the
# graph is the module's (no minutes of export again), the check runs for real, and the write
# stops half way, synced, until the process is killed.
KILLED_WHILE_WRITING = """
import os, runpy, sys, time
from pathlib import Path
import core.deploy.exporter
import core.utils.files as files
graph, marker = Path(sys.argv[1]).read_bytes(), Path(sys.argv[2])
core.deploy.exporter.export_onnx = lambda *args: (graph, ["detections"])
write = files._FdWriter.write
def half_then_wait(self, data):
    view = memoryview(data).cast("B")
    write(self, view[:len(view) // 2])
    os.fsync(self.fd)
    marker.write_text("writing")
    time.sleep(600)
files._FdWriter.write = half_then_wait
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_kill_9_during_the_write_keeps_the_previous_export_and_the_next_removes_the_temp(
        exported, coco128, monkeypatch, tmp_path):
    root, _, _ = exported
    out = tmp_path / "exports" / "CocoTiny_0.onnx"
    out.parent.mkdir()
    out.write_bytes(b"the previous export")
    graph = onnx_path(root).read_bytes()
    marker = tmp_path / "writing"
    args = ["CocoTiny", "--testiter", "0", "--raw-weights", "--config-dir", str(configs(root)),
            "--out", str(out), "--image", str(coco128 / "images" / IMAGE)]
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_WHILE_WRITING, str(onnx_path(root)), str(marker),
         str(ROOT / "tools" / "export.py"), *args],
        cwd=ROOT, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), process.communicate(timeout=60)
    temps = list(out.parent.glob(".CocoTiny_0.onnx.*.tmp"))
    assert len(temps) == 1 and temps[0].stat().st_size == len(graph) // 2
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL

    assert out.read_bytes() == b"the previous export"
    assert temps[0].exists()  # a dead writer's: the next export removes it

    tool = load_tool("export")
    monkeypatch.setattr("core.deploy.exporter.export_onnx", lambda *args: (graph, ["detections"]))
    assert tool.run(tool.parse_args(args)).files == (out,)
    assert [path.name for path in out.parent.iterdir()] == [out.name]
    assert out.read_bytes() == graph
