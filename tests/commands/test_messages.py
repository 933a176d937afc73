"""Messages a person can act on: a loader's line said once however often a run loads its
split; a JPEG decoder's warning naming its image, once; images that no annotation names
counted; duplicate images with conflicting labels named with their files."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from _exports import seeded_yolo
from _train_helpers import REPO

from core.utils.images import read_image


def _clipped_in_both_splits(root: Path) -> Path:
    """The 64 px YOLO set of `seeded_yolo`, with one box clipped in each split."""
    data_yaml = seeded_yolo(root, 64, 4, (8, 30))
    for split in ("train", "val"):
        label = root / "labels" / split / f"{split}0.txt"
        label.write_text(label.read_text() + "0 0.95 0.5 0.3 0.3\n")
    return data_yaml


@pytest.mark.slow  # a two-iteration training run with validation and an evaluation, in-process
def test_a_loader_line_is_said_once_in_a_run_that_loads_each_split_three_times(tmp_path):
    from _inproc import run_script

    data_yaml = _clipped_in_both_splits(tmp_path / "ds")
    trained = run_script(REPO / "train.py", "CornerNet_Tiny", "--workers", "1", "--set",
                         "system.dataset=YOLO", f"db.data_yaml={data_yaml}",
                         f"system.cache_dir={tmp_path / 'cache'}",
                         f"system.result_dir={tmp_path / 'results'}", "system.max_iter=2",
                         "system.eval_iter=2", "system.val_iter=1", "system.batch_size=2",
                         "db.input_size=[64,64]", "db.output_sizes=[[16,16]]")
    assert trained.returncode == 0, trained.stderr[-2000:]
    said = trained.stdout + trained.stderr
    for split in ("train", "val"):
        lines = [line for line in said.splitlines() if "clipped to the image" in line
                 and f"labels/{split}/{split}0.txt" in line]
        assert len(lines) == 1, (split, lines)
        assert "boxes clipped to the image (they extended outside it): 1, e.g. " in lines[0]


def _extraneous_bytes(path: Path) -> Path:
    """A real JPEG with 2 bytes between two segments, before the start-of-scan marker: libjpeg
    decodes it and warns "Corrupt JPEG data: 2 extraneous bytes before marker 0xda"."""
    image = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    data = cv2.imencode(".jpg", image)[1].tobytes()
    scan = data.index(b"\xff\xda")
    path.write_bytes(data[:scan] + b"\x12\x34" + data[scan:])
    return path


def _said_about(path: Path) -> str:
    return (f'warning: image {path}: the JPEG decoder says "Corrupt JPEG data: 2 extraneous '
            f'bytes before marker 0xda" (the image is used as decoded; re-save it to clear this)')


def test_a_decoder_warning_names_its_image_once(tmp_path, capfd):
    paths = [_extraneous_bytes(tmp_path / name) for name in ("odd.jpg", "odder.jpg")]
    first, again = read_image(paths[0]), read_image(paths[0])
    assert first.shape == (64, 64, 3) and np.array_equal(first, again)
    read_image(paths[1])
    err = capfd.readouterr().err
    assert err.splitlines() == [_said_about(path) for path in paths]


def test_an_image_without_a_warning_says_nothing(tmp_path, capfd):
    path = tmp_path / "fine.jpg"
    cv2.imwrite(str(path), np.zeros((16, 16, 3), np.uint8))
    read_image(path)
    print("after", file=sys.stderr)  # stderr works again after the decode
    assert capfd.readouterr().err == "after\n"


@pytest.mark.slow  # a two-iteration training run, in-process, with a prefetch worker
def test_a_decoder_warning_in_training_is_said_once_naming_the_image(tmp_path, capfd):
    from _inproc import run_script

    data_yaml = seeded_yolo(tmp_path / "ds", 64, 2, (8, 30))
    odd = _extraneous_bytes(tmp_path / "ds" / "images" / "train" / "train1.jpg")
    trained = run_script(REPO / "train.py", "CornerNet_Tiny", "--workers", "1", "--set",
                         "system.dataset=YOLO", f"db.data_yaml={data_yaml}",
                         f"system.cache_dir={tmp_path / 'cache'}",
                         f"system.result_dir={tmp_path / 'results'}", "system.max_iter=3",
                         "system.eval_iter=0", "system.val_iter=0", "system.batch_size=2",
                         "db.input_size=[64,64]", "db.output_sizes=[[16,16]]")
    assert trained.returncode == 0, trained.stderr[-2000:]
    said = (trained.stdout + trained.stderr + capfd.readouterr().err).splitlines()
    assert [line for line in said if "JPEG" in line] == [_said_about(odd)]


def _unnamed(count: int, example: Path) -> str:
    return (f"images that no xml file names (in no split, not used): {count}, e.g. {example}: "
            f"no annotation file names it")


def test_images_that_no_xml_names_are_counted(tmp_path):
    from _exports import VOC_OBJECTS, grey_image, hand_counted_devkit
    from _exports import labelimg_xml as _xml

    from core.dbs.converted import Problems
    from core.dbs.voc import read_split

    devkit = tmp_path / "VOC"
    hand_counted_devkit(devkit, image_sets=True)
    for name in ("x.jpg", "y.png"):
        grey_image(devkit / "JPEGImages" / name)
    for split in ("train", "val"):  # both splits take their images from JPEGImages/
        problems = Problems(strict=True)
        read_split(devkit, split, None, problems)
        assert problems.messages() == [_unnamed(2, devkit / "JPEGImages" / "x.jpg")]
    flat = tmp_path / "labelimg"  # xml beside the images; "b" was never labelled
    for stem in ("a", "b"):
        grey_image(flat / f"{stem}.jpg")
    _xml(flat / "a.xml", "a.jpg", VOC_OBJECTS["a"])
    (flat / "ImageSets" / "Main").mkdir(parents=True)
    (flat / "ImageSets" / "Main" / "train.txt").write_text("a\n")
    problems = Problems(strict=True)
    read_split(flat, "train", None, problems)
    assert problems.messages() == [_unnamed(1, flat / "b.jpg")]


def test_what_another_thread_writes_during_a_decode_stays_on_stderr(capfd):
    from core.utils.images import _decoders_own

    caught = (b"\r 40%|####      | 4/10 [00:01<00:01]Corrupt JPEG data: 2 extraneous bytes "
              b"before marker 0xd9\nPremature end of JPEG file\n")
    # a progress bar redrawn without a newline shares its line with the decoder's first one
    assert _decoders_own(caught) == ("Corrupt JPEG data: 2 extraneous bytes before marker "
                                     "0xd9\nPremature end of JPEG file")
    assert capfd.readouterr().err == "\r 40%|####      | 4/10 [00:01<00:01]"
    assert _decoders_own(b"Corrupt JPEG data: bad Huffman code\n") == (
        "Corrupt JPEG data: bad Huffman code")
    assert capfd.readouterr().err == ""


def test_the_check_counts_images_that_no_split_names(tmp_path):
    import json

    from core.config import SystemConfig
    from core.data.check import unnamed_images
    from core.dbs import datasets

    images = tmp_path / "images"
    images.mkdir()
    for name in ("a.jpg", "b.jpg", "c.png"):
        cv2.imwrite(str(images / name), np.zeros((8, 8, 3), np.uint8))
    (images / "notes.txt").write_text("not an image")
    files = {}
    for split, name in (("train", "a.jpg"), ("val", "c.png")):
        files[split] = tmp_path / f"{split}.json"
        files[split].write_text(json.dumps({
            "images": [{"id": 1, "file_name": name, "width": 8, "height": 8}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4],
                             "area": 16, "iscrowd": 0}],
            "categories": [{"id": 1, "name": "thing"}]}))
    system = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache"),
                                           "train_split": "train"})
    config = {"categories": 1, "image_dirs": {s: str(images) for s in files},
              "annotation_files": {s: str(f) for s, f in files.items()}}
    dbs = [datasets["COCO"](config, split=split, sys_config=system) for split in files]
    assert unnamed_images(dbs) == {"count": 1, "examples": [str(images / "b.jpg")]}
    assert unnamed_images(dbs[:1]) == {"count": 2, "examples": [str(images / "b.jpg"),
                                                                str(images / "c.png")]}
