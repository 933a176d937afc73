"""tools/export.py and `--runtime onnxruntime`: the exported graph gives torch's detections.

One CornerNet_Tiny snapshot on coco128 (80 classes) is exported once per session
(`spread_export` in tests/_onnx.py, shared with test_deploy); its weights (`spread_weights`)
give maps that vary with the image and real pairs of class 1 (person). This module works on a
copy of it. The scripts (tools/export.py, test.py, demo.py) run in the test process; the
export's own process is tested in test_onnx_raw_weights.
"""

import json
import shutil

import cv2
import numpy as np
import pytest
import torch
from _onnx import IMAGE, copy_export, open_db
from _tiny_coco import inproc
from _tools import load_tool

from core.deploy.onnx_graph import compare_outputs
from core.deploy.onnx_runtime import OnnxNetwork
from core.deploy.runtimes import open_network
from core.errors import UsageError
from core.inference.cornernet import decode_kwargs, network_input, resize_and_pad
from core.nnet.py_factory import NetworkFactory
from cornernet import Detector, Result
from cornernet.commands import predict as demo

onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[onnx]'")
pytest.importorskip("onnxruntime", reason="the onnx extra: pip install -e '.[onnx]'")
pytest.importorskip("onnxscript", reason="the onnx extra: pip install -e '.[onnx]'")

# Exporting takes 30 s of CPU; on a shared machine the wall time can be ten times that.
pytestmark = [pytest.mark.timeout(1500), pytest.mark.slow]  # a real export, test.py runs


def export(*args: object):
    return inproc("tools/export.py", *args)


@pytest.fixture(scope="module")
def exported(spread_export, coco128, tmp_path_factory):
    """(root, export's stdout): this module's copy of the session's export."""
    return copy_export(spread_export, coco128, tmp_path_factory.mktemp("onnx")), spread_export[1]


def test_export_checks_the_file_and_reports_differences_within_tolerance(spread_export):
    root, stdout = spread_export  # the export's own folder (read only)
    path = root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.onnx"
    assert "onnx.checker passed" in stdout
    assert IMAGE in stdout and "within the tolerance" in stdout
    model = onnx.load(str(path))
    meta = {p.key: json.loads(p.value) for p in model.metadata_props}
    assert meta["config"] == "CocoTiny" and meta["categories"] == 80
    assert meta["decode"] == {"K": 20, "kernel": 3, "ae_threshold": 100, "num_dets": 100}
    assert meta["size_rule"] == {"stride": 4, "multiple": 32}
    assert meta["iteration"] == 0 and meta["weights"] == "raw"
    assert meta["max_side"] == 512 * 4 and len(meta["digest"]) == 64
    assert not list(path.parent.glob(".*.tmp"))
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims[1] == 3 and all(isinstance(d, str) for d in (dims[0], dims[2], dims[3]))
    assert [o.name for o in model.graph.output] == ["detections"]


@pytest.mark.parametrize("scale", [0.25, 0.4])  # inputs 255x127 and 383x255
def test_onnxruntime_equals_torch_on_a_real_image_batch_of_two(exported, coco128, scale):
    root, _ = exported
    system_config, db = open_db(root)
    torch_net, _ = open_network("torch", system_config, db, 0, "cpu")
    onnx_net, _ = open_network("onnxruntime", system_config, db, 0, "cpu")
    canvas = resize_and_pad(cv2.imread(str(coco128 / "images" / IMAGE)), scale)[0]
    batch = network_input(np.stack((canvas, cv2.flip(canvas, 1))), db.mean, db.std, "cpu")
    settings = decode_kwargs(db.configs)

    expected = torch_net.test(batch, **settings)[0].numpy()
    got = onnx_net.test(batch, **settings)[0].numpy()

    assert got.shape == expected.shape == (2, 100, 8)
    report = compare_outputs([got], [expected])
    assert report["ok"], report
    assert min(report["valid"]) >= 10  # real detections were compared
    assert report["boxes"] < 1e-3 and report["scores"] < 1e-4


def test_test_py_gives_the_same_ap_in_both_runtimes(exported):
    root, _ = exported
    metrics = {}
    for runtime in ("torch", "onnxruntime"):
        done = inproc("test.py", "CocoTiny", "--testiter", 0, "--config-dir", root / "configs",
                      "--device", "cpu", "--images", 12, "--runtime", runtime, "--vis", 2)
        assert done.returncode == 0, done.stderr
        assert f"({runtime})" in done.stdout and "images/s" in done.stdout
        out = root / "results" / "CocoTiny" / "0" / "val"
        metrics[runtime] = json.loads((out / "metrics.json").read_text())["metrics"]
        assert len(list((out / "vis").iterdir())) == 2
    for name, value in metrics["torch"].items():
        assert abs(metrics["onnxruntime"][name] - value) <= 0.002, name


def test_demo_draws_the_same_detections_in_both_runtimes(exported, coco128):
    root, _ = exported
    lines = {}
    for runtime in ("torch", "onnxruntime"):
        out = root / f"demo-{runtime}"
        demo.run(demo.parse_args([
            "CocoTiny", "--testiter", "0", "--config-dir", str(root / "configs"), "--device",
            "cpu", "--runtime", runtime, "--out", str(out), "--thresh", "0", "--images",
            str(coco128 / "images" / IMAGE), str(coco128 / "images" / "000000000531.jpg")]))
        lines[runtime] = [Result.from_json(line) for line in
                          (out / "detections.jsonl").read_text().splitlines()]
    assert len(lines["torch"]) == len(lines["onnxruntime"]) == 2
    for ours, theirs in zip(lines["torch"], lines["onnxruntime"]):
        assert len(ours) > 0
        same_detections(ours, theirs)


def same_detections(ours, theirs):
    """The same boxes, scores and classes within the export tolerance (the order of equal
    scores may differ)."""
    assert len(ours) == len(theirs)
    order_a, order_b = np.lexsort((ours.boxes[:, 0], -ours.scores)), np.lexsort(
        (theirs.boxes[:, 0], -theirs.scores))
    np.testing.assert_allclose(theirs.scores[order_b], ours.scores[order_a], rtol=1e-4,
                               atol=1e-3)
    np.testing.assert_allclose(theirs.boxes[order_b], ours.boxes[order_a], rtol=1e-4, atol=1e-3)
    assert (theirs.classes[order_b] == ours.classes[order_a]).all()


def test_detector_from_the_onnx_file_alone_equals_the_snapshot(exported, coco128):
    root, _ = exported
    snapshot = root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.pkl"
    image = coco128 / "images" / IMAGE
    from_onnx = Detector.from_onnx(snapshot.with_suffix(".onnx"), thresh=0.0)
    assert from_onnx.system_config.snapshot_name == "CocoTiny"  # the metadata's record
    assert from_onnx.names[0] == "person"
    same_detections(next(Detector.from_snapshot(snapshot, "cpu", thresh=0.0).predict(image)),
                    next(from_onnx.predict(image)))


def one_line_error(done, *words):
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_export_without_a_snapshot_is_one_line(exported):
    root, _ = exported
    done = export("CocoTiny", "--testiter", 7, "--config-dir", root / "configs")
    one_line_error(done, "no snapshot for iteration 7", "CocoTiny_7.pkl", "CocoTiny_0.pkl")


def test_runtime_without_an_exported_file_names_the_export_command(exported):
    root, _ = exported
    done = inproc("test.py", "CocoTiny", "--testiter", 0, "--config-dir", root / "configs",
                  "--runtime", "onnxruntime", "--onnx", root / "nowhere.onnx", "--images", 1)
    one_line_error(done, "nowhere.onnx", "python tools/export.py CocoTiny --testiter 0")


def test_onnx_file_of_another_config_is_one_line(exported):
    root, _ = exported
    config = json.loads((root / "configs" / "CocoTiny.json").read_text())
    (root / "configs" / "OtherTiny.json").write_text(json.dumps(config))
    done = inproc("test.py", "OtherTiny", "--testiter", 0, "--config-dir", root / "configs",
                  "--runtime", "onnxruntime", "--images", 1, "--onnx",
                  root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.onnx")
    one_line_error(done, "exported from config CocoTiny with 80 classes", "not OtherTiny")


def test_onnx_file_of_another_class_count_is_refused(exported):
    root, _ = exported
    path = root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.onnx"
    with pytest.raises(UsageError, match="with 80 classes, not CocoTiny with 4"):
        OnnxNetwork(path, "CocoTiny", 4)


def test_truncated_onnx_file_is_one_line(exported):
    root, _ = exported
    whole = (root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.onnx").read_bytes()
    cut = root / "cut.onnx"
    cut.write_bytes(whole[:len(whole) // 2])
    done = inproc("demo.py", "CocoTiny", "--testiter", 0, "--config-dir", root / "configs",
                  "--runtime", "onnxruntime", "--onnx", cut, "--out", root / "cut",
                  "--images", root / "configs" / "CocoTiny.json")
    one_line_error(done, "cut.onnx is not a readable ONNX file", "tools/export.py")


def test_an_input_size_the_network_cannot_take_names_the_sizes_that_fit(exported):
    root, _ = exported
    network = OnnxNetwork(root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.onnx", "CocoTiny",
                          80)
    settings = {"K": 20, "kernel": 3, "ae_threshold": 100, "num_dets": 100}
    with pytest.raises(UsageError, match=r"\(1, 3, 100, 127\).*sides in 29\.\.32, 61\.\.64"):
        network.test(torch.zeros(1, 3, 100, 127), **settings)
    assert network.test(torch.zeros(1, 3, 95, 127), **settings)[0].shape == (1, 100, 8)
    with pytest.raises(UsageError, match="export the snapshot again"):
        network.test(torch.zeros(1, 3, 95, 127), **{**settings, "K": 10})


def test_a_retrained_snapshots_stale_export_is_refused_in_one_line(exported):
    root, _ = exported
    snapshots = root / "cache" / "nnet" / "CocoTiny"
    shutil.copy(snapshots / "CocoTiny_0.pkl", root / "kept.pkl")
    try:
        system_config, db = open_db(root)
        nnet = NetworkFactory(system_config, db, device="cpu")
        nnet.load_params(0)
        with torch.no_grad():
            next(nnet.model.parameters()).add_(0.01)
        nnet.save_params(0)  # iteration 0 trained again; its .onnx is the old one's
        done = inproc("test.py", "CocoTiny", "--testiter", 0, "--config-dir", root / "configs",
                      "--runtime", "onnxruntime", "--images", 1)
    finally:
        shutil.copy(root / "kept.pkl", snapshots / "CocoTiny_0.pkl")
    one_line_error(done, "CocoTiny_0.onnx is stale", "iteration 0's earlier weights",
                   "CocoTiny_0.pkl (iteration 0)", "python tools/export.py CocoTiny --testiter 0")
    assert not (root / "results" / "CocoTiny" / "0" / "val" / "partial.jsonl").exists()


def test_another_iterations_onnx_is_refused_naming_both_iterations(exported):
    root, _ = exported
    snapshots = root / "cache" / "nnet" / "CocoTiny"
    shutil.copy(snapshots / "CocoTiny_0.pkl", snapshots / "CocoTiny_200.pkl")
    done = inproc("test.py", "CocoTiny", "--testiter", 200, "--config-dir", root / "configs",
                  "--runtime", "onnxruntime", "--onnx", snapshots / "CocoTiny_0.onnx",
                  "--images", 1)
    one_line_error(done, "exported from iteration 0, not iteration 200 (--testiter 200)")


def test_a_failing_export_leaves_the_previous_file_and_no_temporary_one(exported, coco128,
                                                                       monkeypatch):
    root, _ = exported
    system_config, db = open_db(root)
    nnet = NetworkFactory(system_config, db, device="cpu")
    nnet.load_params(0)
    with torch.no_grad():
        next(nnet.model.parameters()).add_(0.5)
    nnet.save_params(5)
    out = root / "kept" / "CocoTiny_5.onnx"
    out.parent.mkdir()
    out.write_bytes(b"the previous good export")
    tool = load_tool("export")
    # The graph the export produces is iteration 0's: it cannot reproduce iteration 5's torch
    # outputs, so the check fails for real (and no minutes are spent exporting again).
    old = (root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.onnx").read_bytes()
    monkeypatch.setattr("core.deploy.exporter.export_onnx", lambda *args: (old, ["detections"]))
    with pytest.raises(RuntimeError, match="does not reproduce torch.*was not written"):
        tool.run(tool.parse_args(["CocoTiny", "--testiter", "5", "--config-dir",
                                   str(root / "configs"), "--out", str(out), "--image",
                                   str(coco128 / "images" / IMAGE)]))
    assert out.read_bytes() == b"the previous good export"
    assert [path.name for path in out.parent.iterdir()] == [out.name]


def test_an_input_larger_than_the_scan_covers_is_refused(exported):
    root, _ = exported
    network = OnnxNetwork(root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.onnx", "CocoTiny",
                          80)
    network.meta["max_side"] = 96  # as if exported with --max-map 24
    settings = {"K": 20, "kernel": 3, "ae_threshold": 100, "num_dets": 100}
    assert network.test(torch.zeros(1, 3, 95, 95), **settings)[0].shape == (1, 100, 8)
    with pytest.raises(UsageError, match=r"exact for inputs up to 96 pixels a side, not "
                                         r"\(1, 3, 95, 127\).*larger --max-map"):
        network.test(torch.zeros(1, 3, 95, 127), **settings)


def test_set_with_an_onnx_file_alone_is_used_and_a_bogus_key_is_one_line(exported, coco128):
    """--set goes through the one path that opens a detector, an exported file's too: the
    export records test_scales [0.25]; [0.5] changes the detections, a bogus key is refused."""
    root, _ = exported
    onnx_file = root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.onnx"
    texts = {}
    for label, sets in (("plain", []), ("half", ["--set", "db.test_scales=[0.5]"])):
        done = inproc("demo.py", "--onnx", onnx_file, "--runtime", "onnxruntime", "--device",
                      "cpu", "--thresh", 0, "--images", coco128 / "images" / IMAGE,
                      "--out", root / f"set-{label}", *sets)
        assert done.returncode == 0, done.stderr
        texts[label] = (root / f"set-{label}" / "detections.jsonl").read_text()
    assert texts["plain"] != texts["half"]
    done = inproc("demo.py", "--onnx", onnx_file, "--runtime", "onnxruntime", "--images",
                  coco128 / "images" / IMAGE, "--out", root / "set-bogus",
                  "--set", "db.bogus_key=1")
    assert done.returncode == 2 and "--set db.bogus_key=1: unknown key" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
