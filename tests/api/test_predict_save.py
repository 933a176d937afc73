"""`Detector.predict(source, save_to=)` writes what `cornernet predict --out` writes (the command
is that call): the same file names, the same JSON lines, the same pictures and videos; and it
yields the results it yields without `save_to`."""

from __future__ import annotations

import shutil

import cv2
import numpy as np
import pytest
from _tiny_coco import make_tiny_coco

from cornernet import Detector
from cornernet.commands import predict
from cornernet.sources import DRAWN

PHOTOS = ("000000000529.jpg", "000000000531.jpg")


@pytest.fixture(scope="module")
def tiny(coco128, tmp_path_factory):
    return make_tiny_coco(coco128, tmp_path_factory.mktemp("save"))


def inputs(coco128, folder):
    """Two pictures of one stem (x.jpg, x.png), one unreadable picture and a 3-frame video."""
    folder.mkdir()
    shutil.copy(coco128 / "images" / PHOTOS[0], folder / "x.jpg")
    cv2.imwrite(str(folder / "x.png"), cv2.imread(str(coco128 / "images" / PHOTOS[1])))
    (folder / "broken.jpg").write_bytes(b"not a picture")
    writer = cv2.VideoWriter(str(folder / "clip.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 5.0,
                             (96, 72))
    picture = cv2.resize(cv2.imread(str(coco128 / "images" / PHOTOS[0])), (96, 72))
    for k in range(3):
        writer.write(np.roll(picture, 8 * k, axis=1))
    writer.release()
    return [str(folder / name) for name in ("x.jpg", "broken.jpg", "clip.mp4", "x.png")]


def frames_of(path):
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, image = capture.read()
        if not ok:
            break
        frames.append(image.astype(np.int16))
    capture.release()
    return frames


@pytest.mark.slow  # the same 6 frames detected three times: 6-10 s of CPU
def test_predict_save_to_writes_the_files_of_the_command(tiny, coco128, tmp_path):
    sources = inputs(coco128, tmp_path / "in")
    snapshot = tiny / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.pkl"
    by_command, by_api = tmp_path / "command", tmp_path / "api"
    assert predict.main(["--snapshot", str(snapshot), "--device", "cpu", "--thresh", "0",
                         "--images", *sources, "--out", str(by_command)]) == 0

    detector = Detector.from_snapshot(snapshot, "cpu", thresh=0.0)
    said: list[str] = []
    saved = list(detector.predict(sources, save_to=by_api, log=said.append))
    written = detector.saved
    plain = list(detector.predict(sources))
    assert detector.saved is None  # what the last call wrote: nothing

    names = sorted(p.name for p in by_command.iterdir())
    assert names == [DRAWN, "clip.mp4", "detections.jsonl", "x_jpg.jpg", "x_png.jpg"]
    assert sorted(p.name for p in by_api.iterdir()) == names
    for name in (DRAWN, "detections.jsonl"):
        assert (by_api / name).read_text() == (by_command / name).read_text(), name
    for name in ("x_jpg.jpg", "x_png.jpg"):
        drawn, expected = cv2.imread(str(by_api / name)), cv2.imread(str(by_command / name))
        assert drawn.shape == expected.shape
        assert np.abs(drawn.astype(np.int16) - expected).max() <= 2, name
    video, expected = frames_of(by_api / "clip.mp4"), frames_of(by_command / "clip.mp4")
    assert len(video) == len(expected) == 3
    assert all(np.abs(a - b).max() <= 2 for a, b in zip(video, expected))

    # the results: those without save_to, one JSON line each, in order
    assert [r.to_json() for r in saved] == [r.to_json() for r in plain]
    assert (by_api / "detections.jsonl").read_text() == "".join(
        r.to_json() + "\n" for r in plain)
    assert [(r.source, r.frame) for r in saved] == [
        (sources[0], 0), (sources[2], 0), (sources[2], 1), (sources[2], 2), (sources[3], 0)]
    assert sum(len(r) for r in saved) > 0  # boxes were drawn, not just the pictures copied
    # what was written, as the command's summary says it
    assert written.files == (by_api / "x_jpg.jpg", by_api / "clip.mp4", by_api / "x_png.jpg")
    assert written.frames == 5 and written.unreadable == (sources[1],)
    assert written.json_lines == by_api / "detections.jsonl"
    assert [line.split(" -> ")[-1] for line in said if " -> " in line] == [
        str(path) for path in written.files]
    assert any(line.startswith("skipped: ") and "broken.jpg" in line for line in said)


@pytest.mark.slow  # one picture detected twice: 2-4 s of CPU
def test_a_second_save_into_the_folder_keeps_the_first_ones_files(tiny, coco128, tmp_path):
    detector = Detector.from_snapshot(tiny / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.pkl",
                                      "cpu", thresh=0.0)
    picture = str(coco128 / "images" / PHOTOS[0])
    first = list(detector.predict(picture, save_to=tmp_path))
    first_json = (tmp_path / "detections.jsonl").read_text()
    list(detector.predict(picture, save_to=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        DRAWN, "000000000529-2.jpg", "000000000529.jpg", "detections-2.jsonl",
        "detections.jsonl"]
    assert (tmp_path / "detections.jsonl").read_text() == first_json
    assert (tmp_path / "detections-2.jsonl").read_text() == first[0].to_json() + "\n"
