"""cornernet's Python API: Detector from a snapshot alone gives test.py's boxes; results
round-trip through JSON; numpy images equal their files; --set is checked like the JSON."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import torch
from _inproc import run_script
from _tiny_coco import ROOT, make_tiny_coco

from core.config import ConfigError, load_config
from core.utils.images import read_image
from cornernet import Detector, Result
from cornernet.commands import test as test_script

IMAGE = "000000000529.jpg"


@pytest.fixture(scope="module")
def tiny(coco128, tmp_path_factory):
    return make_tiny_coco(coco128, tmp_path_factory.mktemp("api"))


def snapshot_of(root):
    return root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.pkl"


@pytest.mark.slow  # test.py's main and a detector: 7 s of CPU
def test_detector_from_the_snapshot_alone_gives_test_py_detections(tiny, coco128):
    args = test_script.parse_args(["CocoTiny", "--testiter", "0", "--device", "cpu",
                                   "--config-dir", str(tiny / "configs"), "--images", "3",
                                   "--set", "db.test_flipped=false"])
    test_script.run(args)
    written = json.loads((tiny / "results" / "CocoTiny" / "0" / "val" /
                          "results.json").read_text())
    image_id = written[0]["image_id"]
    expected = sorted((d for d in written if d["image_id"] == image_id),
                      key=lambda d: -d["score"])
    # The snapshot records test_flipped true; the test ran with --set false: same here.
    system_config, db_config = load_config("CocoTiny", tiny / "configs",
                                           overrides=["db.test_flipped=false"])
    from core.deploy.network import InferenceNetwork
    network = InferenceNetwork.from_file(snapshot_of(tiny), system_config, db_config, "cpu")
    detector = Detector(network, system_config, db_config, thresh=0.0)
    name = next(p for p in (coco128 / "images").iterdir() if int(p.stem) == image_id)
    got = detector.detect(read_image(name)).to_coco(image_id)
    got.sort(key=lambda d: -d["score"])
    assert len(got) == len(expected) > 0
    # results.json rounds boxes to 0.01 pixel and scores to 1e-4
    np.testing.assert_allclose([d["bbox"] for d in got], [d["bbox"] for d in expected],
                               atol=0.006)
    np.testing.assert_allclose([d["score"] for d in got], [d["score"] for d in expected],
                               atol=6e-5)
    assert [d["category_id"] for d in got] == [d["category_id"] for d in expected]


def test_snapshot_alone_uses_its_recorded_config_and_names(tiny, coco128):
    detector = Detector.from_snapshot(snapshot_of(tiny), device="cpu", thresh=0.0)
    assert detector.system_config.snapshot_name == "CocoTiny"
    assert detector.names[0] == "person"  # the recorded annotation file names the classes
    result = next(detector.predict(coco128 / "images" / IMAGE))
    assert len(result) > 0 and result.source.endswith(IMAGE) and result.frame == 0
    assert set(result.names) <= set(detector.names)
    height, width = read_image(coco128 / "images" / IMAGE).shape[:2]
    assert (result.boxes[:, [0, 2]] <= width).all() and (result.boxes[:, [1, 3]] <= height).all()


def test_a_numpy_image_equals_its_file(tiny, coco128):
    detector = Detector.from_snapshot(snapshot_of(tiny), device="cpu", thresh=0.0)
    path = coco128 / "images" / IMAGE
    from_file = next(detector.predict(str(path)))
    from_array = next(detector.predict(read_image(path)))
    assert from_array.source == "array 0"
    np.testing.assert_array_equal(from_array.boxes, from_file.boxes)
    np.testing.assert_array_equal(from_array.scores, from_file.scores)
    np.testing.assert_array_equal(from_array.classes, from_file.classes)


@pytest.mark.slow  # nine detections: 7 s of CPU
def test_a_list_a_folder_and_a_glob_give_one_result_per_image(tiny, coco128, tmp_path):
    detector = Detector.from_snapshot(snapshot_of(tiny), device="cpu")
    # Three coco128 pictures at 80x60: what is checked is which images come out, in which
    # order.
    images = [tmp_path / "list" / p.name for p in sorted((coco128 / "images").iterdir())[:3]]
    images[0].parent.mkdir()
    for image in images:
        picture = cv2.resize(read_image(coco128 / "images" / image.name), (80, 60))
        cv2.imwrite(str(image), picture)
        (tmp_path / image.name).write_bytes(image.read_bytes())
    by_list = [r.source for r in detector.predict([str(p) for p in images])]
    by_folder = [r.source for r in detector.predict(tmp_path)]
    by_glob = [r.source for r in detector.predict(str(tmp_path / "*.jpg"))]
    assert by_list == list(map(str, images))
    assert by_folder == by_glob == [str(tmp_path / p.name) for p in images]


def test_to_json_round_trips(tiny, coco128):
    detector = Detector.from_snapshot(snapshot_of(tiny), device="cpu", thresh=0.0)
    result = next(detector.predict(coco128 / "images" / IMAGE))
    back = Result.from_json(result.to_json())
    assert back == result  # every field but the image, float32 values exactly
    assert back.to_json() == result.to_json()
    drawn = result.draw()
    assert drawn.shape == result.image.shape and not np.array_equal(drawn, result.image)


def test_a_snapshot_trained_with_sync_bn_and_fp16_evaluates_on_cpu(tiny):
    snapshot = torch.load(snapshot_of(tiny), weights_only=True)
    snapshot["config"]["system"].update(sync_bn=True, amp="fp16")
    path = tiny / "gpu_trained.pkl"
    torch.save(snapshot, path)
    detector = Detector.from_snapshot(path, device="cpu", thresh=0.0)
    assert detector.system_config.sync_bn and detector.network.device.type == "cpu"
    plain = Detector.from_snapshot(snapshot_of(tiny), device="cpu", thresh=0.0)
    image = np.full((96, 128, 3), 127, np.uint8)
    np.testing.assert_array_equal(detector.detect(image).scores, plain.detect(image).scores)


def test_set_with_a_typo_names_the_closest_key():
    with pytest.raises(ConfigError, match="unknown key system.max_itr; did you mean "
                                          "'system.max_iter'"):
        load_config("CornerNet_Tiny", overrides=["system.max_itr=2"])
    with pytest.raises(ConfigError, match="--set: db.input_size must be list"):
        load_config("CornerNet_Tiny", overrides=["db.input_size=3"])
    system_config, db_config = load_config("CornerNet_Tiny", overrides=[
        "system.max_iter=2", "db.input_size=[255,255]", "opt_algo=sgd"])
    assert (system_config.max_iter, db_config["input_size"], system_config.opt_algo) == (
        2, [255, 255], "sgd")


def test_set_typo_is_one_line_and_exit_2_from_train_py():
    done = run_script("train.py", "CornerNet_Tiny", "--set", "system.batchsize=8")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [(
        "error: --set system.batchsize=8: unknown key system.batchsize; did you mean "
        "'system.batch_size'?")]


def test_every_core_package_is_in_the_wheel():
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"])
    on_disk = {str(p.parent.relative_to(ROOT)).replace("/", ".")
               for p in (ROOT / "core").rglob("__init__.py")}
    assert on_disk <= listed, sorted(on_disk - listed)


def test_cornernet_help_lists_the_subcommands(capsys):
    from cornernet.cli import main

    assert main(["--help"]) == 0
    shown = capsys.readouterr().out
    for name in ("train", "test", "predict", "export", "analyze", "check", "convert",
                 "benchmark", "submit", "plot"):
        assert f"  {name} " in shown


def test_every_snapshot_command_takes_best():
    from cornernet.commands import export
    from cornernet.commands import predict as demo

    assert demo.parse_args(["Cfg", "--testiter", "best", "--images", "x", "--out", "o"]
                           ).testiter == "best"
    assert test_script.parse_args(["Cfg", "--testiter", "best.aside2"]).testiter == "best.aside2"
    assert export.parse_args(["Cfg", "--testiter", "7"]).testiter == 7


def test_the_readme_is_a_front_door_linking_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 130
    for page in (ROOT / "docs").glob("*.md"):
        assert f"(docs/{page.name})" in readme, page.name


@pytest.mark.slow  # test.py's main: 4.5 s of CPU
def test_test_py_names_decode_with_the_weight_average(tiny, capsys):
    """The averaged weights are loaded into the model that the decode timer watches."""
    snapshot = torch.load(snapshot_of(tiny), weights_only=True)
    snapshot["ema"] = {f"module.{key}": value for key, value in snapshot["model"].items()}
    snapshot["ema"]["n_averaged"] = torch.tensor(5)
    torch.save(snapshot, tiny / "cache" / "nnet" / "CocoTiny" / "CocoTiny_7.pkl")
    test_script.run(test_script.parse_args([
        "CocoTiny", "--testiter", "7", "--device", "cpu", "--config-dir", str(tiny / "configs"),
        "--images", "2"]))
    shown = capsys.readouterr().out
    assert "weights: the average of the weights" in shown
    summary = next(line for line in shown.splitlines() if "images/s" in line)
    assert "decode" in summary and "network" in summary


@pytest.mark.slow
def test_train_and_evaluate_from_python_return_what_the_scripts_print(tmp_path):
    """The result is read from the run's files, and the process is as before: Ctrl-C's handler,
    torch's threads; a second run runs, and its metrics file continues the one it resumes."""
    import signal

    import cornernet

    def handler(signum, frame):
        pass

    before = signal.signal(signal.SIGINT, handler)
    threads = torch.get_num_threads()
    try:
        where = {"cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path / "data"),
                 "result_dir": str(tmp_path / "results")}
        done = cornernet.train("CornerNet_Tiny", workers=1, device="cpu", max_iter=2,
                               snapshot=2, eval_iter=2, val_iter=0, num_train_images=16,
                               num_val_images=4, **where)
        assert signal.getsignal(signal.SIGINT) is handler
        assert torch.get_num_threads() == threads
        assert done.status == 0 and done.iteration == 2
        assert [p.name for p in done.snapshots] == ["CornerNet_Tiny_2.pkl",
                                                    "CornerNet_Tiny_best.pkl"]
        assert done.best.name == "CornerNet_Tiny_best.pkl" and done.best_ap is not None
        assert done.metrics["iteration"] == 2 and done.metrics["AP"] == done.best_ap
        assert [e["iteration"] for e in done.evaluations] == [2]
        metrics = cornernet.evaluate("CornerNet_Tiny", 2, device="cpu", num_val_images=4,
                                     num_train_images=16, **where)
        assert metrics["AP"] == pytest.approx(done.metrics["AP"], abs=1e-4)
        again = cornernet.train("CornerNet_Tiny", workers=1, device="cpu", resume="2",
                                max_iter=3, snapshot=3, eval_iter=0, val_iter=0,
                                num_train_images=16, num_val_images=4, **where)
        assert again.status == 0 and again.iteration == 3
        assert again.evaluations == done.evaluations and again.best_ap == done.best_ap
        assert signal.getsignal(signal.SIGINT) is handler
        assert torch.get_num_threads() == threads
    finally:
        signal.signal(signal.SIGINT, before)
