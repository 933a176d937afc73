"""Export and benchmark from Python: `cornernet.export`, `Detector.export` and
`cornernet.benchmark` build the commands' options as values (no argv), with the command line's
defaults, and the exports write the files `cornernet export` writes.

The must-show case: `Detector.from_snapshot(s).export(path)` and `cornernet.export(...)` each
give a file that `Detector.from_onnx` opens and that finds the boxes of `cornernet export`'s
file (the session's export, `spread_export` in tests/_onnx.py) on the same image.
"""

from __future__ import annotations

import dataclasses
import json

import cv2
import numpy as np
import pytest
from _onnx import IMAGE, copy_export, snapshot_folder

import cornernet
from core.deploy.comparison import below_min_ap
from core.errors import UsageError
from cornernet import Detector
from cornernet.commands import benchmark as bench_command
from cornernet.commands import export as export_command


@pytest.fixture
def captured(monkeypatch):
    """The options value each command's `run` is called with (nothing runs)."""
    calls = []

    def run(options, log=print):
        calls.append(options)
        return []

    monkeypatch.setattr(export_command, "run", run)
    monkeypatch.setattr(bench_command, "run", run)
    return calls


def test_each_export_default_is_the_same_from_the_command_line_and_the_api(captured):
    cornernet.export("CocoTiny")
    assert captured[-1] == export_command.parse_args(["CocoTiny"]) == \
        export_command.ExportOptions(cfg_file="CocoTiny")
    fields = {field.name for field in dataclasses.fields(export_command.ExportOptions)}
    assert {"opset", "max_map", "raw_weights", "image", "out", "openvino", "testiter",
            "config_dir", "overrides", "debug"} <= fields
    assert captured[-1].opset == 18 and captured[-1].max_map == 512 and captured[-1].out is None


def test_export_keywords_are_the_command_lines_options_and_the_rest_config_settings(
        captured, tmp_path):
    cornernet.export("CocoTiny", "7", path=tmp_path / "m.onnx", opset=19, raw_weights=True,
                     config_dir=tmp_path, db__test_scales=[0.5])
    assert captured[-1] == export_command.parse_args([
        "CocoTiny", "--testiter", "7", "--out", str(tmp_path / "m.onnx"), "--opset", "19",
        "--raw-weights", "--config-dir", str(tmp_path), "--set", "db.test_scales=[0.5]"])
    assert captured[-1].testiter == 7 and captured[-1].overrides == (("db.test_scales", [0.5]),)
    cornernet.export("CocoTiny", runtime="openvino")
    assert captured[-1].target == "openvino" == export_command.parse_args(
        ["CocoTiny", "--openvino"]).target


def test_each_benchmark_default_is_the_same_from_the_command_line_and_the_api(captured):
    cornernet.benchmark("CocoTiny")
    parsed = bench_command.parse_args(["CocoTiny"])
    assert captured[-1] == parsed == bench_command.BenchmarkOptions(cfg_file="CocoTiny")
    assert parsed.threads[0] == 1 and parsed.reps == 3 and parsed.calib_images == 300
    assert parsed.keep_float == "heads" and parsed.rows is None and parsed.batch is None
    cornernet.benchmark("CocoTiny", "best", rows=["torch:fp32"], threads=[1], images=2,
                        device="cpu", reps=1, system__snapshot_name="Other")
    assert captured[-1] == bench_command.parse_args([
        "CocoTiny", "--testiter", "best", "--rows", "torch:fp32", "--threads", "1", "--images",
        "2", "--device", "cpu", "--reps", "1", "--set", "system.snapshot_name=Other"])


@pytest.mark.parametrize("build, says", [
    (lambda: export_command.ExportOptions(cfg_file="C", opset=7),
     "--opset 7: this export writes opsets 18 to 23"),
    (lambda: export_command.ExportOptions(cfg_file="C", max_map=0), "--max-map must be at least"),
    (lambda: export_command.ExportOptions(cfg_file="C", openvino=True, runtime="onnxruntime"),
     "--openvino writes the files of runtime openvino, not onnxruntime"),
    (lambda: bench_command.BenchmarkOptions(cfg_file="C", threads=[0]),
     "--threads must be at least 1"),
    (lambda: bench_command.BenchmarkOptions(cfg_file="C", rows=["torch:fp64"]),
     "--rows torch:fp64: not a row"),
    (lambda: bench_command.BenchmarkOptions(cfg_file="C", reps=0), "--reps must be at least 1"),
    (lambda: cornernet.benchmark("C", "last"), "snapshot 'last': expected an iteration"),
])
def test_the_apis_values_are_held_to_the_command_lines_checks(build, says):
    with pytest.raises(UsageError, match=says):
        build()


def test_the_benchmark_options_are_frozen_and_lists_become_tuples():
    options = bench_command.BenchmarkOptions(cfg_file="C", threads=[1, 2], batch=[1, 8])
    assert options.threads == (1, 2) and options.batch == (1, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.device = "cpu"  # type: ignore[misc]


def test_min_ap_counts_rows_below_it_and_rows_named_but_not_measured():
    rows = [{"runtime": "torch", "precision": "fp32", "AP": 0.5},
            {"runtime": "onnxruntime", "precision": "int8", "AP": 0.3},
            {"runtime": "openvino", "precision": "f32", "AP": None}]
    assert below_min_ap(rows, 0.4, named=False) == ["onnxruntime int8"]
    assert below_min_ap(rows, 0.4, named=True) == ["onnxruntime int8", "openvino f32"]
    assert below_min_ap(rows, 0.1, named=False) == []


def test_an_export_for_a_runtime_that_runs_snapshots_is_one_line():
    from core.deploy.exporter import target

    with pytest.raises(UsageError, match="runtime torch runs the snapshot itself.*export for "
                                         "onnxruntime or openvino"):
        target("torch", None)
    with pytest.raises(UsageError, match="--precision int8 is not one of --runtime "
                                         "onnxruntime's"):
        target(None, "int8")
    assert target(None, None)[0].name == "onnxruntime" and target(None, None)[1] == "fp32"


def _meta(path):
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return {prop.key: json.loads(prop.value) for prop in model.metadata_props}


@pytest.mark.slow  # two real exports: 30 s of CPU each
@pytest.mark.timeout(1500)
def test_detector_and_api_exports_find_the_boxes_of_the_commands_file(spread_export, coco128,
                                                                      tmp_path, capsys):
    pytest.importorskip("onnxscript", reason="the onnx extra: pip install -e '.[onnx]'")
    root = copy_export(spread_export, coco128, tmp_path)
    out = tmp_path / "exports"
    out.mkdir()
    command_file = snapshot_folder(root) / "CocoTiny_0.onnx"  # what `cornernet export` wrote
    image_path = coco128 / "images" / IMAGE

    detector = Detector.from_snapshot(snapshot_folder(root) / "CocoTiny_0.pkl", device="cpu")
    report = detector.export(out / "m.onnx", image=image_path)
    assert report.files == (out / "m.onnx",) and report.passed
    assert report.identity == {key: _meta(command_file)[key] for key in
                               ("iteration", "weights", "digest", "max_side")}
    assert capsys.readouterr().out == ""  # the detector's export returns its report, quietly

    api = cornernet.export("CocoTiny", 0, path=out / "api.onnx", config_dir=root / "configs",
                           image=image_path)
    assert api.files == (out / "api.onnx",) and api.identity == report.identity
    shown = capsys.readouterr().out  # as cornernet export prints it
    assert "onnx.checker passed" in shown and f"wrote {out / 'api.onnx'}" in shown

    image = cv2.imread(str(image_path))
    expected = Detector.from_onnx(command_file, thresh=0.0).detect(image)
    assert len(expected.scores) > 0
    for path in (out / "m.onnx", out / "api.onnx"):
        meta = _meta(path)
        assert meta["config"] == "CocoTiny" and meta["classes"] == _meta(command_file)["classes"]
        found = Detector.from_onnx(path, thresh=0.0).detect(image)
        # decode rows' tolerance (shared/reference/README.md section 6): classes exact
        np.testing.assert_array_equal(found.classes, expected.classes)
        np.testing.assert_allclose(found.boxes, expected.boxes, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(found.scores, expected.scores, rtol=1e-5, atol=1e-5)


def test_every_api_entry_takes_path_overrides_and_refuses_a_value_given_twice(captured,
                                                                              tmp_path):
    """`out=` is export's option as `path=` is; `overrides=` joins the keyword settings; a
    snapshot given as its argument and as `testiter=` is refused, not silently chosen."""
    cornernet.export("CocoTiny", out=tmp_path / "a.onnx")
    assert captured[-1].out == tmp_path / "a.onnx"
    cornernet.benchmark("CocoTiny", overrides={"db.test_scales": [0.5]}, max_iter=3)
    assert captured[-1].overrides == (("db.test_scales", [0.5]), ("max_iter", 3))
    with pytest.raises(UsageError, match="testiter is given twice"):
        cornernet.benchmark("CocoTiny", "best", testiter=7)
    with pytest.raises(UsageError, match="out is given twice"):
        cornernet.export("CocoTiny", path=tmp_path / "a.onnx", out=tmp_path / "b.onnx")


@pytest.mark.parametrize("call, says", [
    (lambda: cornernet.evaluate("CornerNet_Tiny", split="val"),
     "split='val': expected one of training, validation, testing"),
    (lambda: cornernet.evaluate("CornerNet_Tiny", backend="foo"), "backend='foo': expected"),
    (lambda: cornernet.evaluate("CornerNet_Tiny", runtime="tensorrt"), "runtime='tensorrt'"),
])
def test_the_api_is_held_to_the_command_lines_choices(call, says):
    with pytest.raises(UsageError, match=says):
        call()
