"""Prediction at the front door: one bad source never stops a run, no output is written over,
no setting is ignored, and the API checks its arguments when the object is made.

Sources and outputs are checked without a model where they can be; the runs are demo.py in the
test process (`run_script`) on CocoTiny's untrained snapshot at 128 px."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from _faults import one_line_error
from _inproc import run_script
from _tiny_coco import make_tiny_coco

from core.errors import UsageError
from core.utils import files, hints
from core.utils.files import DiskFull
from core.utils.images import read_image
from core.utils.threads import usable_cpus
from cornernet import Detector, Result
from cornernet.detector import DEFAULT_THRESH
from cornernet.outputs import Outputs, run_folder
from cornernet.sources import expand, frames

PHOTOS = ("000000000529.jpg", "000000000531.jpg")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(coco128, tmp_path_factory):
    return make_tiny_coco(coco128, tmp_path_factory.mktemp("trust"))


def snapshot_of(root):
    return root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.pkl"


def photos(coco128, folder, names=PHOTOS):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(coco128 / "images" / name, folder / name)
    return folder


def predict(tiny, *args, cwd=None):
    """`cornernet predict --snapshot <CocoTiny> --thresh 0 ...` in this process."""
    return run_script("demo.py", "--snapshot", snapshot_of(tiny), "--thresh", 0.0,
                      "--device", "cpu", *args, cwd=cwd)


# ----------------------------------------------------------------------------- sources
def test_a_broken_video_first_in_a_folder_is_one_named_error_and_the_pictures_follow(
        coco128, tmp_path):
    folder = photos(coco128, tmp_path / "shots")
    (folder / "-broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 cut short")
    got = list(frames(folder))
    assert [(Path(f.source).name, f.image is None) for f in got] == [
        ("-broken.mp4", True), (PHOTOS[0], False), (PHOTOS[1], False)]
    assert "-broken.mp4" in got[0].error


def test_a_digits_only_folder_is_a_folder_not_a_camera(coco128, tmp_path, monkeypatch):
    photos(coco128, tmp_path / "2024")
    monkeypatch.chdir(tmp_path)
    assert [p.name for p in expand("2024")] == list(PHOTOS)
    assert expand("7") == [7]  # nothing named 7 here: camera 7


def test_an_input_named_twice_is_read_once(coco128, tmp_path, monkeypatch):
    folder = photos(coco128, tmp_path / "shots")
    monkeypatch.chdir(tmp_path)
    one = folder / PHOTOS[0]
    got = expand([str(one), "shots/" + PHOTOS[0], one, "shots", str(tmp_path / "shots/*.jpg")])
    assert got == [one, Path("shots") / PHOTOS[1]]  # the first time each is named


def test_a_source_that_is_nothing_is_one_line_before_any_reading(tmp_path):
    with pytest.raises(UsageError, match="no such file, folder, camera or stream"):
        expand([tmp_path, str(tmp_path / "missing.jpg")])
    with pytest.raises(UsageError, match="expected a path"):
        expand(3.5)


def test_a_broken_video_among_pictures_is_named_and_the_pictures_are_drawn(tiny, coco128,
                                                                          tmp_path):
    folder = photos(coco128, tmp_path / "shots")
    broken = folder / "-broken.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42 cut short")
    done = predict(tiny, "--images", folder, folder / PHOTOS[0], "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert "drew 2 of 3 inputs" in done.stdout and f"unreadable: {broken}" in done.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".demo-drawn", *PHOTOS, "detections.jsonl"]  # the photo named twice: drawn once
    assert len((tmp_path / "out" / "detections.jsonl").read_text().splitlines()) == 2


def test_nothing_readable_fails_and_names_each_source(tiny, tmp_path):
    (tmp_path / "a.mp4").write_bytes(b"not a video")
    (tmp_path / "b.jpg").write_bytes(b"not a picture")
    done = predict(tiny, "--images", tmp_path / "a.mp4", tmp_path / "b.jpg",
                   "--out", tmp_path / "out")
    one_line_error(done, "none of the 2 inputs")
    assert "a.mp4" in done.stdout and "b.jpg" in done.stdout


def test_a_glob_reaching_the_output_folder_never_draws_on_its_own_pictures(tiny, coco128,
                                                                          tmp_path):
    photos(coco128, tmp_path / "shots")
    first = predict(tiny, "--images", tmp_path / "shots", "--out", tmp_path / "drawn")
    assert first.returncode == 0, first.stderr
    again = predict(tiny, "--images", str(tmp_path / "**" / "*.jpg"), "--out", tmp_path / "new")
    assert again.returncode == 0, again.stderr
    assert "drew 2 of 2 inputs" in again.stdout
    assert sorted(json.loads(line)["source"] for line in
                  (tmp_path / "new" / "detections.jsonl").read_text().splitlines()) == [
        str(tmp_path / "shots" / name) for name in PHOTOS]


def test_a_recursive_glob_over_a_link_loop_lists_each_file_once_and_finishes(tmp_path,
                                                                             monkeypatch):
    # loop/self -> loop and loop/sub/back -> loop: Python's recursive glob follows both until
    # the path is too long (minutes). A link into a folder not reached before is followed.
    (tmp_path / "loop" / "sub").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    for name in ("loop/a.jpg", "loop/sub/b.jpg", "data/c.jpg"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "loop" / "self").symlink_to(".")
    (tmp_path / "loop" / "sub" / "back").symlink_to("..")
    (tmp_path / "loop" / "sub" / "data").symlink_to("../../data")
    monkeypatch.chdir(tmp_path)

    def too_slow(signum, frame):
        raise TimeoutError("the glob still runs after 10 s")

    old = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(10)
    try:
        got = expand("loop/**/*.jpg")
        everywhere = expand("**/*.jpg")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert got == [Path("loop/a.jpg"), Path("loop/sub/b.jpg"), Path("loop/sub/data/c.jpg")]
    # data/ is reached first, so the link loop/sub/data into it is not followed again
    assert everywhere == [Path("data/c.jpg"), Path("loop/a.jpg"), Path("loop/sub/b.jpg")]


def test_a_fifo_named_as_an_image_is_said_to_be_no_regular_file(tmp_path):
    fifo = tmp_path / "camera.jpg"
    os.mkfifo(fifo)
    with pytest.raises(UsageError) as caught:
        expand(str(fifo))
    assert str(caught.value) == (f"{fifo}: not a regular file but a FIFO (named pipe); name a "
                                 "picture, video, folder or glob")


def test_threads_above_the_cpus_are_capped_and_said_by_predict(tiny, coco128, tmp_path):
    done = predict(tiny, "--images", coco128 / "images" / PHOTOS[0], "--out", tmp_path / "out",
                   "--threads", 999)
    assert done.returncode == 0, done.stderr
    cpus = usable_cpus()
    assert (f"note: --threads 999 is more than the {cpus} usable CPUs: {cpus} threads"
            in done.stdout)


# ----------------------------------------------------------------------------- outputs
def test_each_run_without_out_gets_a_new_folder(tmp_path):
    runs = tmp_path / "runs" / "predict"
    assert run_folder(None, runs=runs) == runs
    (runs / "detections.jsonl").parent.mkdir(parents=True)
    (runs / "detections.jsonl").write_text("{}\n")
    assert run_folder(None, runs=runs) == tmp_path / "runs" / "predict2"
    (tmp_path / "runs" / "predict2").mkdir()  # empty: taken as it is
    assert run_folder(None, runs=runs) == tmp_path / "runs" / "predict2"


def test_a_file_size_limit_mid_line_leaves_only_whole_json_lines(tmp_path):
    # A disk that fills mid-write, made here by RLIMIT_FSIZE: the file keeps whole lines only.
    code = (
        "import json, signal, resource, sys\n"
        "from pathlib import Path\n"
        "from cornernet.outputs import Outputs\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (10000, 10000))\n"
        "outputs = Outputs(Path(sys.argv[1]), [], 0.3)\n"
        "try:\n"
        "    for k in range(1000):\n"
        "        outputs.json.write(json.dumps({'frame': k, 'pad': 'x' * 50}) + '\\n')\n"
        "except OSError as err:\n"
        "    print('stopped:', err)\n"
        "finally:\n"
        "    outputs.json.close()\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=False,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "stopped: cannot write" in done.stdout + done.stderr, done.stdout + done.stderr
    text = (tmp_path / "detections.jsonl").read_text()
    assert text.endswith("\n")
    frames_kept = [json.loads(line)["frame"] for line in text.splitlines()]
    assert frames_kept == list(range(len(frames_kept))) and len(frames_kept) > 100


def test_a_full_disk_names_the_json_lines_file_and_the_free_space(tmp_path, monkeypatch):
    outputs = Outputs(tmp_path, [], 0.3)
    outputs.json.write('{"frame": 0}\n')
    real_write = os.write

    def full(fd, data):  # half the line fits, then the disk is full
        if len(data) > 8:
            return real_write(fd, bytes(data)[:8])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    monkeypatch.setattr(files, "disk_free", lambda folder: 3 * 2 ** 20)
    with pytest.raises(DiskFull) as caught:
        outputs.json.write('{"frame": 1, "boxes": []}\n')
    monkeypatch.undo()
    outputs.close()
    assert str(caught.value) == (
        f"disk full: cannot write {tmp_path / 'detections.jsonl'} (3.0 MiB free there); it "
        "holds the 1 whole lines written before; free some space or name another --out")
    assert (tmp_path / "detections.jsonl").read_text() == '{"frame": 0}\n'


def test_a_second_run_without_out_keeps_the_first_runs_outputs(tiny, coco128, tmp_path):
    image = coco128 / "images" / PHOTOS[0]
    first = predict(tiny, "--images", image, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    kept = {p.name: p.read_bytes() for p in (tmp_path / "runs" / "predict").iterdir()}
    second = predict(tiny, "--images", image, "--set", "db.test_scales=[0.5]", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "runs" / "predict").iterdir()} == kept
    assert (tmp_path / "runs" / "predict2" / PHOTOS[0]).is_file()
    assert f"in {Path('runs', 'predict2')};" in second.stdout


def test_an_out_with_earlier_outputs_is_refused_naming_exist_ok(tmp_path):
    (tmp_path / "detections.jsonl").write_text("{}\n")
    with pytest.raises(UsageError, match="--out .* holds an earlier run's outputs .*--exist-ok"):
        run_folder(tmp_path)
    assert run_folder(tmp_path, exist_ok=True) == tmp_path
    assert (tmp_path / "detections.jsonl").read_text() == "{}\n"


# ----------------------------------------------------------------------------- settings
def test_set_with_a_snapshot_file_changes_the_result(tiny, coco128, tmp_path):
    image = coco128 / "images" / PHOTOS[0]
    plain = predict(tiny, "--images", image, "--out", tmp_path / "plain")
    half = predict(tiny, "--images", image, "--out", tmp_path / "half",
                   "--set", "db.test_scales=[0.5]")
    assert plain.returncode == half.returncode == 0, plain.stderr + half.stderr
    first, second = ((tmp_path / name / "detections.jsonl").read_text()
                     for name in ("plain", "half"))
    assert first != second  # the snapshot records [0.25]: --set was used
    api = Detector.from_snapshot(snapshot_of(tiny), "cpu", overrides=["test_scales=[0.5]"],
                                 thresh=0.0)
    assert api.settings.configs["test_scales"] == [0.5]
    written, got = Result.from_json(second), api.detect(read_image(image), str(image))
    assert len(written) == len(got) > 0  # the command and the API: one way of opening
    np.testing.assert_allclose(np.sort(written.scores), np.sort(got.scores), rtol=1e-5,
                               atol=1e-5)


def test_a_bogus_set_key_with_a_snapshot_file_is_one_line(tiny, coco128, tmp_path):
    done = predict(tiny, "--images", coco128 / "images" / PHOTOS[0], "--out", tmp_path / "o",
                   "--set", "db.bogus_key=1")
    one_line_error(done, "--set db.bogus_key=1", "unknown key")
    assert not (tmp_path / "o" / "detections.jsonl").exists()


def test_the_command_and_the_api_share_one_default_threshold(tiny):
    from cornernet.commands import predict
    args = predict.parse_args(["--snapshot", "x.pkl", "--images", "a.jpg"])
    assert args.thresh == DEFAULT_THRESH == Detector.__init__.__defaults__[0]
    assert args.out is None  # runs/predict, runs/predict2, ...


# ----------------------------------------------------------------------------- the API
@pytest.fixture(scope="module")
def detector(tiny):
    return Detector.from_snapshot(snapshot_of(tiny), "cpu", thresh=0.0)


@pytest.mark.parametrize("thresh", [math.nan, "0.5", -0.1, 1.5, True, None, math.inf])
def test_a_threshold_that_cannot_be_right_is_refused_when_made(detector, thresh):
    with pytest.raises(UsageError, match=r"thresh \(--thresh\)"):
        Detector(detector.network, detector.system_config, detector.settings.configs,
                 thresh=thresh)


def test_names_and_ids_must_cover_every_class(detector):
    configs = detector.settings.configs
    with pytest.raises(UsageError, match="names: expected a list of 80 .* got 2"):
        Detector(detector.network, detector.system_config, configs, names=["a", "b"])
    with pytest.raises(UsageError, match="names: expected a list of 80 .* got a str"):
        Detector(detector.network, detector.system_config, configs, names="person")
    with pytest.raises(UsageError, match="category_ids: expected a list of 80"):
        Detector(detector.network, detector.system_config, configs, category_ids=[1])
    named = Detector(detector.network, detector.system_config, configs,
                     names=[f"n{c}" for c in range(80)])
    assert named.names[0] == "n0" and named.category_ids == detector.category_ids


def test_overrides_as_one_string_are_refused(tiny):
    with pytest.raises(UsageError, match="expected a list of 'KEY=VALUE' texts"):
        Detector.from_snapshot(snapshot_of(tiny), "cpu", overrides="db.test_scales=[0.5]")


def test_frames_skipped_exists_before_predict(detector):
    fresh = Detector(detector.network, detector.system_config, detector.settings.configs)
    assert fresh.frames_skipped == []


def test_a_file_that_is_no_onnx_model_is_one_line(tmp_path):
    pytest.importorskip("onnxruntime")
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"this is no protobuf \x00\xff")
    with pytest.raises(UsageError) as caught:
        Detector.from_onnx(fake)
    message = str(caught.value)
    # the export command in the user's form: `python tools/export.py` in this checkout
    assert "\n" not in message and str(fake) in message and hints.command("export") in message


def test_odd_strides_gray_and_bgra_images_are_converted(detector, coco128):
    image = read_image(coco128 / "images" / PHOTOS[0])
    base = detector.detect(image)
    flipped = image[:, ::-1]  # a negative stride
    assert detector.detect(flipped) == detector.detect(np.ascontiguousarray(flipped))
    assert len(base) > 0
    gray = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    as_bgr = detector.detect(cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR))
    assert detector.detect(gray) == as_bgr == detector.detect(gray[:, :, None])
    bgra = cv2.cvtColor(image, cv2.COLOR_BGR2BGRA)
    assert detector.detect(bgra) == base


@pytest.mark.parametrize("array, words", [
    (np.zeros((64, 64, 3), np.float32), "dtype float32"),
    (np.zeros((64, 64, 3), np.uint16), "dtype uint16"),
    (np.zeros((64, 64, 2), np.uint8), "shape (64, 64, 2)"),
    (np.zeros((0, 64, 3), np.uint8), "an empty image"),
])
def test_other_images_are_one_line_naming_the_dtype_or_shape(detector, array, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        next(detector.predict(array))


def test_to_json_of_a_result_holding_nan_is_valid_json_with_null():
    result = Result(boxes=np.asarray([[1, 2, np.nan, 4]], np.float32),
                    scores=np.asarray([np.inf], np.float32), classes=np.asarray([1]),
                    names=["person"], category_ids=np.asarray([1]), source="x.jpg")
    text = result.to_json()
    data = json.loads(text, parse_constant=lambda word: pytest.fail(f"{word} is not JSON"))
    assert data["boxes"] == [[1.0, 2.0, None, 4.0]] and data["scores"] == [None]
    back = Result.from_json(text)
    assert np.isnan(back.boxes[0, 2]) and np.isnan(back.scores[0]) and back.boxes[0, 3] == 4


def test_threads_that_are_no_number_are_refused_when_made(tiny):
    with pytest.raises(UsageError) as caught:
        Detector.from_snapshot(snapshot_of(tiny), "cpu", threads=True)
    assert str(caught.value) == ("threads (--threads) True: expected a whole number of at "
                                 "least 1, got bool")


def test_category_ids_given_twice_are_refused_naming_the_classes(detector):
    ids = list(range(1, 81))
    ids[3] = ids[1] = ids[0]
    with pytest.raises(UsageError) as caught:
        Detector(detector.network, detector.system_config, detector.settings.configs,
                 category_ids=ids)
    assert str(caught.value) == ("category_ids: 1 is the id of classes 1, 2, 4; each class "
                                 "needs an id of its own (COCO results are matched to classes "
                                 "by id)")


@pytest.mark.parametrize("image, what", [
    (np.zeros((8, 8, 3), np.float32), "dtype float32, shape (8, 8, 3)"),
    (np.zeros((8, 8), np.uint8), "dtype uint8, shape (8, 8)"),
])
def test_draw_on_an_image_it_cannot_draw_on_is_one_line_saying_what_it_takes(image, what):
    result = Result(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, int), [],
                    np.zeros(0, int), "x")
    with pytest.raises(UsageError) as caught:
        result.draw(image)
    assert str(caught.value) == (f"Result.draw: the image must be (H, W, 3) uint8 BGR (0..255), "
                                 f"as the detector takes it, got {what}; convert it, e.g. with "
                                 "np.clip(image, 0, 255).astype(np.uint8)")
