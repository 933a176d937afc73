"""Conversions write the way snapshots do (issue 46, kind 1): an output is whole or absent, an
earlier conversion's split is replaced whole or not at all, an input is never an output, a
split is a name, a full disk names the file and the free space, a split without label files is
said at the start (and a training on no object at all is refused), and the converters apply
the loader's box and size rules, saying what they changed."""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

import cv2
import numpy as np
import pytest
from _train_helpers import write_config

from core.dbs import datasets
from core.dbs.converted import Problems
from core.dbs.shapes import ensure_shapes
from core.dbs.yolo import read_split as read_yolo
from core.utils import files
from cornernet.cli import main as cornernet


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    """The generated Shapes set, 24 training and 16 validation images: both splits name their
    pictures 000000.jpg, ... at different sizes, as the issue's case had them."""
    return ensure_shapes(tmp_path_factory.mktemp("shapes") / "shapes", 24, 16,
                         log=lambda line: None)


def _coco2yolo(shapes: Path, source: str, out: Path, *extra: str) -> int:
    return cornernet(["convert", "coco2yolo", str(shapes / "annotations" /
                                                  f"instances_{source}.json"),
                      str(shapes / "images" / source), str(out), "--split", "train", *extra])


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (links by their target), for a comparison before and after."""
    return {str(p.relative_to(folder)): (os.readlink(p).encode() if p.is_symlink()
                                         else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file() or p.is_symlink()}


def _read_back(data_yaml: Path) -> dict[str, tuple[str, list]]:
    """{image name: (the picture it is, its boxes [cls, x1, y1, x2, y2] rounded to 0.1 px)}
    as the YOLO reader sees the folder."""
    _, content = read_yolo(data_yaml, "train", Problems(strict=False))
    root = data_yaml.parent
    boxes: dict[int, list] = {image["id"]: [] for image in content["images"]}
    for ann in content["annotations"]:
        x, y, w, h = ann["bbox"]
        boxes[ann["image_id"]].append([ann["category_id"], round(x, 1), round(y, 1),
                                       round(x + w, 1), round(y + h, 1)])
    return {Path(image["file_name"]).name: (os.path.realpath(root / image["file_name"]),
                                            sorted(boxes[image["id"]]))
            for image in content["images"]}


def _expected(shapes: Path, split: str) -> dict[str, tuple[str, list]]:
    """The same, from the Shapes split's own json and pictures."""
    content = json.loads((shapes / "annotations" / f"instances_{split}.json").read_text())
    boxes: dict[int, list] = {image["id"]: [] for image in content["images"]}
    for ann in content["annotations"]:
        x, y, w, h = ann["bbox"]
        boxes[ann["image_id"]].append([ann["category_id"], round(x, 1), round(y, 1),
                                       round(x + w, 1), round(y + h, 1)])
    return {image["file_name"]: (os.path.realpath(shapes / "images" / split /
                                                  image["file_name"]), sorted(boxes[image["id"]]))
            for image in content["images"]}


def test_shapes_val_then_train_into_one_split_is_refused_or_replaces_it_whole(
        shapes, tmp_path, capsys):
    out = tmp_path / "yolo"
    assert _coco2yolo(shapes, "val", out) == 0
    assert _read_back(out / "data.yaml") == _expected(shapes, "val")
    before = _tree(out)
    capsys.readouterr()

    assert _coco2yolo(shapes, "train", out) == 2
    assert capsys.readouterr().err.splitlines() == [
        (f"error: {out / 'images' / 'train'} holds split 'train' of an earlier conversion; give "
        f"another output, or --exist-ok to replace it whole")]
    assert _tree(out) == before

    assert _coco2yolo(shapes, "train", out, "--exist-ok") == 0
    assert "split 'train' with 24 images" in capsys.readouterr().out
    seen = _read_back(out / "data.yaml")
    assert seen == _expected(shapes, "train")  # every picture train's, with train's boxes
    assert len(list((out / "images" / "train").iterdir())) == 24
    assert len(list((out / "labels" / "train").iterdir())) == 24
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def test_an_output_that_is_an_input_is_refused(shapes, tmp_path, capsys):
    assert _coco2yolo(shapes, "val", tmp_path / "yolo") == 0
    data_yaml = tmp_path / "yolo" / "data.yaml"
    text = data_yaml.read_text()
    capsys.readouterr()
    assert cornernet(["convert", "yolo2coco", str(data_yaml), "train", str(data_yaml)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        (f"error: {data_yaml} is an input of this conversion ({data_yaml}); write the output "
        f"somewhere else")]
    assert data_yaml.read_text() == text


def test_split_is_a_name_not_a_path(shapes, tmp_path, capsys):
    out = tmp_path / "a" / "b" / "yolo"
    assert cornernet(["convert", "coco2yolo", str(shapes / "annotations" / "instances_val.json"),
                      str(shapes / "images" / "val"), str(out), "--split", "../../escape"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        ("error: --split '../../escape' is not a name: use letters, digits, '_', '-' and '.' "
        "(train, val, test-2); it names images/<split>/ and labels/<split>/ in the output "
        "folder")]
    assert list(tmp_path.rglob("*")) == []


def test_a_full_disk_names_the_file_and_the_free_space_and_keeps_the_earlier_json(
        shapes, tmp_path, monkeypatch, capsys):
    assert _coco2yolo(shapes, "val", tmp_path / "yolo") == 0
    data_yaml, out = tmp_path / "yolo" / "data.yaml", tmp_path / "val.json"
    assert cornernet(["convert", "yolo2coco", str(data_yaml), "train", str(out)]) == 0
    earlier = out.read_bytes()
    capsys.readouterr()

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files._FdWriter, "write", full)
    monkeypatch.setattr(files, "disk_free", lambda folder: 3 * 1024)
    assert cornernet(["convert", "yolo2coco", str(data_yaml), "train", str(out),
                      "--exist-ok"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"error: disk full: cannot write {out} (3.0 KiB free there); the previous "
                      f"file is unchanged; free some space or convert to a folder on another "
                      f"disk")
    assert out.read_bytes() == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["val.json", "yolo"]


def test_a_stop_signal_mid_conversion_leaves_no_file_under_a_final_name(
        shapes, tmp_path, monkeypatch, capsys):
    """SIGTERM at the fifth picture, into a new folder and then over an earlier split."""
    out = tmp_path / "yolo"
    made = []
    link = os.symlink

    def link_then_stop(source, target):
        made.append(target)
        link(source, target)
        if len(made) % 5 == 0:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(os, "symlink", link_then_stop)
    assert _coco2yolo(shapes, "val", out) == 128 + signal.SIGTERM
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"nothing written: {out}, made for this conversion, was removed with the unfinished "
        f"split")
    assert not out.exists()

    monkeypatch.setattr(os, "symlink", link)
    assert _coco2yolo(shapes, "val", out) == 0
    before = _tree(out)
    capsys.readouterr()
    made.clear()
    monkeypatch.setattr(os, "symlink", link_then_stop)
    assert _coco2yolo(shapes, "train", out, "--exist-ok") == 128 + signal.SIGTERM
    said = capsys.readouterr()
    staging = made[0].parent.parent
    assert staging.parent == out and staging.name.startswith(".train.")
    assert said.out.splitlines()[-1] == (f"nothing written: {out} is as it was (the unfinished "
                                         f"split in {staging} was removed)")
    assert said.err.splitlines() == [("stopped by SIGTERM: an output takes its name only when "
                                     "whole: nothing half-written is left")]
    assert _tree(out) == before  # val's conversion, every file as it was; no temporary one


def test_a_killed_conversions_folder_is_removed_by_the_next_and_said(shapes, tmp_path, capsys):
    out = tmp_path / "yolo"
    left = out / ".train.999999999-1.tmp"  # a writer that is dead: no such pid
    for part in ("images", "labels"):  # killed as it built the split: a picture and a label
        (left / part).mkdir(parents=True)
    os.symlink(shapes / "images" / "val" / "000000.jpg", left / "images" / "000000.jpg")
    (left / "labels" / "000000.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    assert _coco2yolo(shapes, "val", out) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"removed {left}, left by an interrupted conversion")
    assert not left.exists()
    assert _read_back(out / "data.yaml") == _expected(shapes, "val")


def _killed_mid_swap(shapes: Path, tmp_path: Path, new_images_in: bool) -> Path:
    """tmp_path/yolo as `kill -9` between the renames of `_swap_in` leaves it: val's
    conversion into split 'train' is in place, and train's was being swapped over it (its
    images already in, or still in the staging folder, by `new_images_in`). Returns the
    staging folder, whose writer is dead."""
    out, other = tmp_path / "yolo", tmp_path / "other"
    assert _coco2yolo(shapes, "val", out) == 0
    assert _coco2yolo(shapes, "train", other) == 0
    staging = out / ".train.999999999-1.tmp"  # a writer that is dead: no such pid
    staging.mkdir()
    os.replace(out / "images" / "train", staging / "earlier-images")
    os.replace(other / "labels" / "train", staging / "labels")
    if new_images_in:
        os.replace(out / "labels" / "train", staging / "earlier-labels")
        os.replace(other / "images" / "train", out / "images" / "train")
    else:
        os.replace(other / "images" / "train", staging / "images")
    return staging


@pytest.mark.parametrize("moved", ["earlier images aside", "new images in"])
def test_a_conversion_killed_while_it_swaps_a_split_in_is_undone_or_finished(
        shapes, tmp_path, moved, capsys):
    """`kill -9` between the renames of `_swap_in`, made by hand: val's split is in place, and
    train's was being swapped in. The next conversion into the folder puts val's back (when
    none of train's took its place yet) or finishes train's: one conversion's, never a mix."""
    out = tmp_path / "yolo"
    staging = _killed_mid_swap(shapes, tmp_path, moved == "new images in")
    capsys.readouterr()
    assert cornernet(["convert", "coco2yolo", str(shapes / "annotations" / "instances_val.json"),
                      str(shapes / "images" / "val"), str(out), "--split", "val"]) == 0
    said = capsys.readouterr().out.splitlines()
    done, part = ("completed", "labels") if moved == "new images in" else ("restored", "images")
    assert said[0] == (f"{done} {out / part / 'train'} from {staging}, left by a conversion "
                       f"killed while it replaced split 'train'")
    assert said[1] == f"removed {staging}, left by an interrupted conversion"
    source = "train" if moved == "new images in" else "val"
    assert _read_back(out / "data.yaml") == _expected(shapes, source)
    assert not staging.exists()


def _no_labels(tmp_path: Path, shapes: Path) -> Path:
    """A YOLO data.yaml whose images have no labels/ folder at all."""
    root = tmp_path / "nolabels"
    (root / "images").mkdir(parents=True)
    os.symlink(shapes / "images" / "train", root / "images" / "train")
    (root / "data.yaml").write_text("train: images/train\nval: images/train\n"
                                    "names: [rectangle, ellipse, triangle, cross]\n")
    return root / "data.yaml"


def test_no_label_files_is_said_at_the_start_of_the_conversion(shapes, tmp_path, capsys):
    data_yaml = _no_labels(tmp_path, shapes)
    assert cornernet(["convert", "yolo2coco", str(data_yaml), "train",
                      str(tmp_path / "t.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = tmp_path / "nolabels" / "labels" / "train" / "000000.txt"
    assert lines[0] == (
        f"warning: {data_yaml}: split 'train': no label file for any of its 24 images (e.g. "
        f"{expected} is missing): an image without one counts as a background image, with no "
        f"objects; labels belong in the labels/ folder beside images/ (.../images/a.jpg -> "
        f".../labels/a.txt)")
    assert lines[1].startswith(f"wrote {tmp_path / 't.json'}: 24 images, 0 objects")


def test_most_images_without_a_label_file_are_said_by_the_loader(shapes, tmp_path):
    data_yaml = _no_labels(tmp_path, shapes)
    labels = tmp_path / "nolabels" / "labels" / "train"
    labels.mkdir(parents=True)
    for name in ("000000", "000001", "000002"):
        (labels / f"{name}.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    said: list[str] = []
    system = {"cache_dir": str(tmp_path / "cache")}
    from core.config import SystemConfig
    db = datasets["YOLO"]({"data_yaml": str(data_yaml), "categories": 4}, split="train",
                          sys_config=SystemConfig().update_config(system), log=said.append)
    warning = (f"warning: {data_yaml}: split 'train': label files for only 3 of its 24 images "
               f"(e.g. {labels / '000003.txt'} is missing)")
    assert next(line for line in said if line.startswith("warning:")).startswith(warning)
    assert db.load_problems[0].endswith(said[0])  # what `cornernet check` prints as loader:


def _no_labels_config(tmp_path: Path, shapes: Path, coco128: Path) -> Path:
    """The folder of a config NoLabels training on `_no_labels`' data.yaml."""
    data_yaml = _no_labels(tmp_path, shapes)
    folder = write_config(tmp_path, coco128, name="NoLabels", dataset="YOLO",
                          db={"categories": 4, "data_yaml": str(data_yaml), "image_dirs": None,
                              "annotation_files": None})
    config = json.loads((folder / "NoLabels.json").read_text())
    config["db"] = {k: v for k, v in config["db"].items() if v is not None}
    (folder / "NoLabels.json").write_text(json.dumps(config))
    return folder


def test_no_label_files_is_said_by_the_data_check(shapes, tmp_path, coco128, capsys):
    folder = _no_labels_config(tmp_path, shapes, coco128)
    assert cornernet(["check", "NoLabels", "--config-dir", str(folder), "--splits", "train",
                      "--crop-samples", "2", "--out", str(tmp_path / "check")]) == 0
    data_yaml = tmp_path / "nolabels" / "data.yaml"
    warning = f"warning: {data_yaml}: split 'train': no label file for any of its 24 images"
    printed = capsys.readouterr().out.splitlines()
    assert [line for line in printed if line.startswith(f"  loader: {warning}")] != []


def test_a_training_with_no_object_at_all_is_refused_in_one_line(shapes, tmp_path, coco128,
                                                                  capsys):
    folder = _no_labels_config(tmp_path, shapes, coco128)
    data_yaml = tmp_path / "nolabels" / "data.yaml"
    assert cornernet(["train", "NoLabels", "--config-dir", str(folder), "--workers", "1",
                      "--device", "cpu"]) == 2
    said = capsys.readouterr()
    assert "warning: " + str(data_yaml) + ": split 'train': no label file for any" in said.out
    assert said.err.splitlines() == [
        ("error: the training split 'train' (YOLO) has no object in its 24 images: nothing to "
        "learn; put its labels where the loader reads them (cornernet check NoLabels says what "
        "it found)")]
    assert not list((tmp_path / "cache").glob("nnet/NoLabels/*.pkl"))


def _voc(tmp_path: Path, size: tuple[int, int], box: tuple[int, ...]) -> Path:
    """A labelImg folder (xml beside the image, a list file) with one 64x48 image."""
    root = tmp_path / "voc"
    (root / "ImageSets" / "Main").mkdir(parents=True)
    cv2.imwrite(str(root / "a.jpg"), np.full((48, 64, 3), 128, np.uint8))
    (root / "ImageSets" / "Main" / "val.txt").write_text("a\n")
    (root / "a.xml").write_text(
        f"<annotation>\n<filename>a.jpg</filename>\n<size><width>{size[0]}</width>"
        f"<height>{size[1]}</height><depth>3</depth></size>\n<object><name>cat</name>\n"
        f"<bndbox><xmin>{box[0]}</xmin><ymin>{box[1]}</ymin><xmax>{box[2]}</xmax>"
        f"<ymax>{box[3]}</ymax></bndbox>\n</object>\n</annotation>\n")
    return root


def test_voc2coco_clips_as_the_loader_does_and_says_so(tmp_path, capsys):
    root = _voc(tmp_path, (64, 48), (40, 10, 80, 60))
    assert cornernet(["convert", "voc2coco", str(root), "val", str(tmp_path / "v.json")]) == 0
    content = json.loads((tmp_path / "v.json").read_text())
    assert [ann["bbox"] for ann in content["annotations"]] == [[40.0, 10.0, 24.0, 38.0]]
    assert capsys.readouterr().out.splitlines()[0] == (
        f"warning: boxes clipped to the image (they extended outside it): 1, e.g. "
        f"{root / 'a.xml'}:4: [40, 10, 80, 60] in the 64x48 image")  # the <object> line


def test_a_size_in_the_xml_that_the_image_contradicts_is_said(tmp_path, capsys):
    root = _voc(tmp_path, (640, 480), (4, 4, 20, 20))
    assert cornernet(["convert", "voc2coco", str(root), "val", str(tmp_path / "v.json")]) == 0
    content = json.loads((tmp_path / "v.json").read_text())
    assert (content["images"][0]["width"], content["images"][0]["height"]) == (64, 48)
    assert capsys.readouterr().out.splitlines()[0] == (
        f"warning: image sizes the xml contradicts: 1, e.g. {root / 'a.xml'}: <size> says "
        f"640x480 but a.jpg is 64x48: the image's size is used and the boxes are clipped to "
        f"it; check that they were drawn on this image")


def test_what_a_strict_run_keeps_and_says_loads_again_from_the_cache(tmp_path):
    """A clip or another extension is said, never refused: the second load of a strict run,
    from the dataset cache, takes them as the first did (it refused them as errors)."""
    root = _voc(tmp_path, (64, 48), (40, 10, 80, 60))
    (root / "a.xml").write_text((root / "a.xml").read_text().replace("a.jpg", "a.png"))
    from core.config import SystemConfig
    system = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache"),
                                           "strict_images": True})
    for _ in range(2):
        said: list[str] = []
        db = datasets["VOC"]({"voc_root": str(root), "names": ["cat"], "categories": 1},
                             split="val", sys_config=system, log=said.append)
        assert db.detections(0).tolist() == [[40.0, 10.0, 64.0, 48.0, 1.0]]
        assert [line.split(":")[0] for line in said] == [
            "images read under another extension than their xml's filename",
            "boxes clipped to the image (they extended outside it)"]


def test_a_split_killed_while_swapped_over_is_put_back_before_the_exist_check(shapes, tmp_path,
                                                                              capsys):
    """`kill -9` while a second conversion into split 'train' swapped its split over the
    first: the earlier split is put back first, so a third conversion into it without
    --exist-ok is refused as for any earlier split, and replaces nothing."""
    out = tmp_path / "yolo"
    staging = _killed_mid_swap(shapes, tmp_path, new_images_in=False)
    capsys.readouterr()
    assert _coco2yolo(shapes, "train", out) == 2
    said = capsys.readouterr()
    assert said.out.splitlines()[0] == (f"restored {out / 'images' / 'train'} from {staging}, "
                                        f"left by a conversion killed while it replaced split "
                                        f"'train'")
    assert "holds split 'train' of an earlier conversion" in said.err
    assert _read_back(out / "data.yaml") == _expected(shapes, "val")
    assert not staging.exists()
