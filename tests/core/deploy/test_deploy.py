"""--runtime openvino, the INT8 files and tools/benchmark.py on one exported CornerNet_Tiny.

One snapshot on coco128 (80 classes, `spread_weights`: maps that vary with the image, real
pairs of class 1) is exported once per session, in-process (`spread_export` in tests/_onnx.py,
shared with test_onnx_export); this module works on a copy of it.
"""

import importlib
import json
import sys

import cv2
import numpy as np
import onnx
import pytest
import torch
from _onnx import IMAGE, copy_export, open_db, snapshot_folder
from _tools import ROOT, load_tool

from core.config import load_config
from core.deploy.onnx_graph import compare_outputs
from core.deploy.onnx_runtime import OnnxNetwork, quantize_onnxruntime
from core.deploy.openvino_runtime import (
    MissingOpenVino,
    OpenVinoNetwork,
    quantize_openvino,
    write_openvino_ir,
)
from core.deploy.quantize import calibration_inputs, int8_file
from core.deploy.runtimes import open_network
from core.errors import UsageError
from core.inference.cornernet import decode_kwargs, network_input, resize_and_pad

pytest.importorskip("onnxruntime", reason="the onnx extra: pip install -e '.[onnx]'")
pytest.importorskip("onnxscript", reason="the onnx extra: pip install -e '.[onnx]'")

pytestmark = [pytest.mark.timeout(1500), pytest.mark.slow]  # a real export


@pytest.fixture
def ov():
    return pytest.importorskip("openvino", reason="the openvino extra: pip install -e "
                                                  "'.[openvino]' (OpenVINO tests skipped)")


@pytest.fixture(scope="module")
def exported(spread_export, coco128, tmp_path_factory):
    """(root, ONNX file): this module's copy of the session's export."""
    root = copy_export(spread_export, coco128, tmp_path_factory.mktemp("deploy"))
    return root, snapshot_folder(root) / "CocoTiny_0.onnx"


def batch_of_two(coco128, db, scale):
    canvas = resize_and_pad(cv2.imread(str(coco128 / "images" / IMAGE)), scale)[0]
    return network_input(np.stack((canvas, cv2.flip(canvas, 1))), db.mean, db.std, "cpu")


@pytest.mark.parametrize("scale", [0.25, 0.4])  # inputs 255x127 and 383x255
def test_openvino_f32_equals_onnxruntime_on_a_batch_of_two(exported, coco128, ov, scale):
    root, _ = exported
    system_config, db = open_db(root)
    onnx_net, _ = open_network("onnxruntime", system_config, db, 0, "cpu")
    ov_net, _ = open_network("openvino", system_config, db, 0, "cpu", precision="f32")
    batch = batch_of_two(coco128, db, scale)
    settings = decode_kwargs(db.configs)

    expected = onnx_net.test(batch, **settings)[0].numpy()
    got = ov_net.test(batch, **settings)[0].numpy()

    assert ov_net.precision == "f32"
    assert got.shape == expected.shape == (2, 100, 8)
    report = compare_outputs([got], [expected])
    assert report["ok"], report
    assert min(report["valid"]) >= 10  # real detections were compared


def test_an_openvino_ir_keeps_the_metadata_and_the_detections(exported, coco128, ov):
    root, path = exported
    system_config, db = open_db(root)
    xml = write_openvino_ir(path)
    assert xml.with_suffix(".bin").stat().st_size > 0.75 * path.stat().st_size  # float32
    ir_net, _ = open_network("openvino", system_config, db, 0, "cpu", xml)
    onnx_net, _ = open_network("onnxruntime", system_config, db, 0, "cpu")
    batch = batch_of_two(coco128, db, 0.25)
    settings = decode_kwargs(db.configs)
    report = compare_outputs([ir_net.test(batch, **settings)[0].numpy()],
                             [onnx_net.test(batch, **settings)[0].numpy()])
    assert report["ok"] and min(report["valid"]) >= 10, report
    cut = root / "cut.xml"
    cut.write_text(xml.read_text()[:1000])
    with pytest.raises(UsageError, match="cut.xml is not a readable ONNX or OpenVINO IR file"):
        OpenVinoNetwork(cut, "CocoTiny", 80)


def test_a_truncated_or_foreign_file_is_one_line_in_both_runtimes(exported, ov, tmp_path):
    _, path = exported
    whole = path.read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(whole[:len(whole) // 2])
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["image"], ["detections"])], "foreign",
        [onnx.helper.make_tensor_value_info("image", onnx.TensorProto.FLOAT, [1, 3, 4, 4])],
        [onnx.helper.make_tensor_value_info("detections", onnx.TensorProto.FLOAT, [1, 3, 4, 4])])
    foreign = tmp_path / "foreign.onnx"
    onnx.save(onnx.helper.make_model(graph), str(foreign))
    for runtime in (OnnxNetwork, OpenVinoNetwork):
        with pytest.raises(UsageError) as err:
            runtime(cut, "CocoTiny", 80)
        assert "cut.onnx is not a readable ONNX" in str(err.value)
        assert "\n" not in str(err.value) and "tools/export.py" in str(err.value)
        with pytest.raises(UsageError, match="exported from config [?] with [?] classes, not "
                                             "CocoTiny with 80") as err:
            runtime(foreign, "CocoTiny", 80)
        assert "\n" not in str(err.value)


def test_openvino_refuses_other_decode_settings(exported, ov):
    _, path = exported
    network = OpenVinoNetwork(path, "CocoTiny", 80)
    with pytest.raises(UsageError, match="export the snapshot again"):
        network.test(torch.zeros(1, 3, 95, 127), K=10, kernel=3, ae_threshold=100,
                     num_dets=100)


def test_int8_files_record_their_calibration_and_keep_the_identity(exported, coco128, ov):
    root, path = exported
    system_config, db = open_db(root)
    inputs = calibration_inputs(db, 0.25, 4)
    assert len(inputs) == 4 and all(x.shape[:2] == (1, 3) for x in inputs)
    batch = batch_of_two(coco128, db, 0.25)
    settings = decode_kwargs(db.configs)
    reference = open_network("onnxruntime", system_config, db, 0, "cpu")[0].test(
        batch, **settings)[0].numpy()
    for runtime, quantize in (("onnxruntime", quantize_onnxruntime),
                              ("openvino", quantize_openvino)):
        out = int8_file(path, runtime)
        record = quantize(path, out, inputs, "val", 0.25)
        # The file is refused unless it holds this snapshot: its identity came along.
        network, _ = open_network(runtime, system_config, db, 0, "cpu", out)
        assert network.meta["calibration"] == record
        assert record["images"] == 4 and record["split"] == "val" and record["scale"] == 0.25
        assert record["keep_float"] == "heads" and len(record["float_layers"]) == 6
        assert out.stat().st_size < path.stat().st_size / 2  # int8 weights
        got = network.test(batch, **settings)[0].numpy()
        assert got.shape == reference.shape
        # Quantized, not equal (and untrained maps hold many near ties, so the order of the
        # boxes may change); but the ten best scores stay close to the float ones.
        top = np.sort(got[:, :, 4], axis=1)[:, -10:]
        np.testing.assert_allclose(top, np.sort(reference[:, :, 4], axis=1)[:, -10:], atol=0.05)


def test_benchmark_rows_json_and_a_missing_runtime(exported, monkeypatch, tmp_path, capsys):
    root, _ = exported
    benchmark = load_tool("benchmark")
    monkeypatch.setitem(sys.modules, "openvino", None)  # as if it were not installed
    with pytest.raises(MissingOpenVino):
        OpenVinoNetwork(root / "x.onnx", "CocoTiny", 80)
    argv = ["CocoTiny", "--testiter", "0", "--config-dir", str(root / "configs"), "--images",
            "2", "--threads", "1", "--reps", "1", "--calib-images", "2", "--calib-split", "val",
            "--rows", "torch:fp32", "onnxruntime:fp32", "openvino:f32", "--json",
            str(tmp_path / "rows.json")]
    assert benchmark.main(argv) == 0
    out = capsys.readouterr().out
    assert "CPU: " in out and "instruction sets" in out and "| runtime | precision |" in out
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [(r["runtime"], r["precision"]) for r in rows] == [
        ("torch", "fp32"), ("onnxruntime", "fp32"), ("openvino", "f32")]
    for row in rows:
        assert set(row) == {"runtime", "precision", "AP", "AP50", "ms", "size_mb", "check"}
    torch_row, onnx_row, ov_row = rows
    assert torch_row["check"] == onnx_row["check"] == "passed"
    assert onnx_row["AP"] == pytest.approx(torch_row["AP"], abs=1e-3)
    assert set(onnx_row["ms"]) == {"1"} and onnx_row["ms"]["1"] > 0
    assert onnx_row["size_mb"] > 1
    assert ov_row["check"].startswith("not available: openvino is not installed")
    assert ov_row["AP"] is None and ov_row["ms"] == {}
    # --min-ap on a row that was asked for and could not be measured fails.
    assert benchmark.main([*argv[:-2], "--min-ap", "0"]) == 1
    assert benchmark.main([*argv[:-5], "torch:fp32", "--min-ap", "2"]) == 1


def test_benchmark_exports_a_missing_onnx_file_in_process(spread_export, coco128, tmp_path,
                                                         monkeypatch):
    """The branch of `prepare_files` that runs the export (core's `export_snapshot`, in this
    process, no argv built) when the .onnx is missing (the export itself, with these values,
    is spread_export's); its failure is each exported row's check, the torch rows need no
    file."""
    from core.deploy import exporter
    from core.deploy.comparison import prepare_files
    from core.errors import ConfigError

    root = copy_export(spread_export, coco128, tmp_path)
    (snapshot_folder(root) / "CocoTiny_0.onnx").unlink()
    started = []

    def export(system_config, db_config, testiter, *args, **kwargs):
        started.append((system_config.snapshot_name, testiter, args, kwargs))
        raise ConfigError("boom")

    monkeypatch.setattr(exporter, "export_snapshot", export)
    system_config, db_config = load_config("CocoTiny", root / "configs")
    rows = ["torch:fp32", "onnxruntime:fp32", "openvino:int8"]
    files = prepare_files(system_config, db_config, 0, rows)
    assert started == [("CocoTiny", 0, (), {})]  # the snapshot's export, every default
    assert files == {"onnxruntime:fp32": "failed: export: boom",
                     "openvino:int8": "failed: export: boom"}
    started.clear()
    assert prepare_files(system_config, db_config, 0, ["torch:fp32"]) == {}
    assert started == []  # torch rows alone export nothing


def test_bench_deploy_profile_and_its_static_timing_run_on_an_exported_file(exported, ov,
                                                                           monkeypatch, capsys):
    """bench_deploy --profile's two measurements on a real exported file: OpenVINO's time per
    layer type (every type listed, so the shares add up to 100 %, convolutions among them) and
    the file compiled for the dynamic input the runtime uses against a static one, both run."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    bench_deploy = importlib.import_module("bench_deploy")
    _, path = exported
    bench_deploy.profile(path, 127, 1, top=1000)
    ms = bench_deploy.static_against_dynamic(path, 127, 1, reps=1)
    out = capsys.readouterr().out
    head, _, slowest = out.partition("  slowest layers:")
    shares = {line.split("%")[1].strip(): float(line.split("ms")[1].split("%")[0])
              for line in head.splitlines()[1:]}
    assert any(kind.startswith("Convolution") for kind in shares), shares
    assert sum(shares.values()) == pytest.approx(100, abs=1)
    assert len(slowest.strip().splitlines()) >= 3
    assert set(ms) == {"dynamic", "static"} and min(ms.values()) > 0
    assert f"{path.name} at 1 thread(s), 127x127: {ms['dynamic']:.1f} ms" in out
