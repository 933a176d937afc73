"""Datasets as the exporters write them, each read with the objects per class counted by hand,
or refused with one line that says what to change: a Roboflow YOLO export (`../train/images`,
a `roboflow:` block), a Label Studio export (`path:`, names as a block list), a data.yaml with a
byte-order mark and a wrapped names list, CRLF line ends, a Windows drive path, and Pascal VOC
as a devkit, without ImageSets and as labelImg's flat folder."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from _exports import VOC_OBJECTS, grey_image, hand_counted_devkit, labelimg_xml

from core.config import ConfigError, SystemConfig
from core.dbs import DatasetError, datasets
from core.dbs.converted import Problems
from core.dbs.voc import read_split as read_voc
from core.dbs.yolo import read_split as read_yolo


def _per_class(content: dict) -> dict[str, int]:
    names = {c["id"]: c["name"] for c in content["categories"]}
    return dict(Counter(names[a["category_id"]] for a in content["annotations"]))


def _yolo(data_yaml: Path, split: str) -> dict[str, int]:
    problems = Problems(strict=True)
    return _per_class(read_yolo(data_yaml, split, problems)[1])


def _roboflow(root: Path) -> Path:
    """Roboflow's YOLOv8 export as downloaded: data.yaml beside train/ valid/ test/, each with
    images/ and labels/, file names with Roboflow's `_jpg.rf.<hash>` suffix."""
    labels = {"train": {"a_jpg.rf.0f1e": ["0 0.5 0.5 0.2 0.2", "1 0.3 0.3 0.1 0.1"],
                        "b_jpg.rf.9c2d": ["1 0.5 0.5 0.4 0.4", "1 0.6 0.6 0.2 0.2",
                                          "0 0.2 0.7 0.1 0.2"]},
              "valid": {"c_jpg.rf.77aa": ["0 0.5 0.5 0.5 0.5"], "d_jpg.rf.1b2c": []},
              "test": {"e_jpg.rf.3d4e": ["1 0.4 0.4 0.2 0.3"]}}
    for split, files in labels.items():
        for stem, lines in files.items():
            grey_image(root / split / "images" / f"{stem}.jpg")
            label = root / split / "labels" / f"{stem}.txt"
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text("".join(line + "\n" for line in lines))
    (root / "README.roboflow.txt").write_text("exported via roboflow.com\n")
    (root / "data.yaml").write_text(
        "train: ../train/images\nval: ../valid/images\ntest: ../test/images\n\nnc: 2\n"
        "names: ['helmet', 'head']\n\nroboflow:\n  workspace: acme\n  project: hard-hats\n"
        "  version: 3\n  license: CC BY 4.0\n"
        "  url: https://universe.roboflow.com/acme/hard-hats/dataset/3\n")
    return root / "data.yaml"


def test_a_roboflow_export_reads_as_downloaded(tmp_path):
    data_yaml = _roboflow(tmp_path / "Hard-Hats-3")
    assert _yolo(data_yaml, "train") == {"helmet": 2, "head": 3}
    assert _yolo(data_yaml, "val") == {"helmet": 1}
    assert _yolo(data_yaml, "test") == {"head": 1}
    system = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache")})
    db = datasets["YOLO"]({"data_yaml": str(data_yaml), "categories": 2}, split="train",
                          sys_config=system)
    assert db.db_inds.size == 2


def test_a_missing_split_folder_names_the_key_the_file_and_the_root(tmp_path):
    data_yaml = _roboflow(tmp_path / "ds")
    text = data_yaml.read_text().replace("../valid/images", "../validation/images")
    data_yaml.write_text(text)
    with pytest.raises(DatasetError) as err:
        read_yolo(data_yaml, "val", Problems(strict=True))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{data_yaml}: val: '../validation/images' is ")
    assert f"the root is {data_yaml.parent}, from no path: key" in message


def test_a_label_studio_export_with_path_and_a_block_list_of_names(tmp_path):
    """Label Studio's YOLO export (classes.txt, notes.json, images/, labels/) in a folder of
    its own naming, with a data.yaml beside it naming it by a relative `path:`."""
    export = tmp_path / "project-1-at-2024-05-01-10-00-4f3c2a1b"
    rows = {"1f0a-street.jpg": ["0 0.5 0.5 0.3 0.3", "1 0.2 0.2 0.1 0.1", "1 0.8 0.8 0.1 0.1"],
            "2b7c-yard.jpg": ["2 0.5 0.5 0.9 0.9"], "3c8d-empty.jpg": []}
    for name, lines in rows.items():
        grey_image(export / "images" / name)
        label = export / "labels" / name.replace(".jpg", ".txt")
        label.parent.mkdir(parents=True, exist_ok=True)
        label.write_text("\n".join(lines))
    (export / "classes.txt").write_text("Car\nPerson\nTraffic Light\n")
    (export / "notes.json").write_text('{"categories": [], "info": {}}')
    data_yaml = tmp_path / "data.yaml"
    data_yaml.write_text(f"path: {export.name}\ntrain: images\nval: images\n"
                         f"names:\n  - Car\n  - Person\n  - Traffic Light\n")
    assert _yolo(data_yaml, "train") == {"Car": 1, "Person": 2, "Traffic Light": 1}


def test_a_byte_order_mark_a_wrapped_names_list_and_crlf(tmp_path):
    data_yaml = _roboflow(tmp_path / "ds")
    text = ("path: .  # the root\r\ntrain: train/images\r\nval: valid/images\r\n"
            "names: ['helmet',\r\n        'head']  # wrapped by an editor\r\nnc: 2\r\n")
    data_yaml.write_bytes(b"\xef\xbb\xbf" + text.encode())
    for label in (tmp_path / "ds").rglob("labels/*.txt"):
        label.write_bytes(label.read_bytes().replace(b"\n", b"\r\n"))
    assert _yolo(data_yaml, "train") == {"helmet": 2, "head": 3}
    assert _yolo(data_yaml, "val") == {"helmet": 1}
    (tmp_path / "ds" / "val.txt").write_bytes(
        b"\xef\xbb\xbfvalid/images/c_jpg.rf.77aa.jpg\r\nvalid/images/d_jpg.rf.1b2c.jpg\r\n")
    data_yaml.write_bytes(data_yaml.read_bytes().replace(b"valid/images", b"val.txt"))
    assert _yolo(data_yaml, "val") == {"helmet": 1}


@pytest.mark.parametrize("text, says", [
    ("path: C:/Yolo/hats\ntrain: hats/train/images\nnames: [a, b]\n",
     r"data.yaml: path: 'C:/Yolo/hats' is a Windows drive path, not a folder on this machine"),
    ("train: D:\\Yolo\\hats\\train\\images\nnames: [a, b]\n",
     r"data.yaml: train: 'D:\\\\Yolo\\\\hats\\\\train\\\\images' is a Windows drive path"),
    ("train: train/images\nnames: [a, b]\nnc: 3\n",
     r"data.yaml: nc is 3 but names lists 2 classes; make them agree"),
    ("train: train/images\nnames: {0: a, 2: b}\n", r"data.yaml: names as a map must have"),
    ("train: train/images\nnames: [helmet, no, vest]\n",
     (r"data.yaml: names: item 1 reads as YAML's False \(an unquoted yes, no, on, off, true, "
     r"false, null or ~\); quote it")),
])
def test_a_path_or_names_it_cannot_use_is_one_line_naming_the_key(tmp_path, text, says):
    data_yaml = _roboflow(tmp_path / "ds")
    data_yaml.write_text(text)
    with pytest.raises(DatasetError, match=says) as err:
        read_yolo(data_yaml, "train", Problems(strict=True))
    assert "\n" not in str(err.value)


def test_a_split_that_is_not_a_key_lists_the_splits_without_the_roboflow_block(tmp_path):
    data_yaml = _roboflow(tmp_path / "ds")
    with pytest.raises(ConfigError, match=r"\(its splits: train, val, test\)"):
        read_yolo(data_yaml, "minival", Problems(strict=True))


def _voc(root: Path, split: str, names: list[str] | None = None) -> dict[str, int]:
    return _per_class(read_voc(root, split, names, Problems(strict=True))[1])


def test_a_voc_devkit_with_image_sets(tmp_path):
    hand_counted_devkit(tmp_path / "VOC2007", image_sets=True)
    assert _voc(tmp_path / "VOC2007", "train") == {"cat": 1, "dog": 3, "bird": 1}
    assert _voc(tmp_path / "VOC2007", "val") == {"cat": 1}
    system = SystemConfig().update_config({"cache_dir": str(tmp_path / "cache")})
    db = datasets["VOC"]({"voc_root": str(tmp_path / "VOC2007"), "categories": 3},
                         split="train", sys_config=system)
    assert db.db_inds.size == 2


def test_a_voc_devkit_without_image_sets_says_which_list_file_to_create(tmp_path):
    hand_counted_devkit(tmp_path / "VOC", image_sets=False)
    with pytest.raises(ConfigError) as err:
        _voc(tmp_path / "VOC", "train")
    assert str(err.value) == (
        f"split 'train': {tmp_path / 'VOC'} has no ImageSets/Main/train.txt and no folder "
        f"train/ of xml files (folders of xml there: Annotations); create "
        f"ImageSets/Main/train.txt listing the split's xml names without .xml, one a line, or "
        f"name one of those folders in system.train_split, val_split or test_split")
    (tmp_path / "VOC" / "ImageSets" / "Main").mkdir(parents=True)
    (tmp_path / "VOC" / "ImageSets" / "Main" / "train.txt").write_text("a\r\nb\r\n")  # CRLF
    assert _voc(tmp_path / "VOC", "train") == {"cat": 1, "dog": 3, "bird": 1}


def test_labelimg_xml_beside_the_images_and_roboflow_split_folders(tmp_path):
    flat = tmp_path / "labelimg"
    for stem, objects in VOC_OBJECTS.items():
        grey_image(flat / f"{stem}.jpg")
        labelimg_xml(flat / f"{stem}.xml", f"{stem}.jpg", objects, windows_path=True)
    (flat / "ImageSets" / "Main").mkdir(parents=True)
    (flat / "ImageSets" / "Main" / "train.txt").write_text("a\nc\n")
    assert _voc(flat, "train") == {"cat": 2, "dog": 1}  # names from all three files
    roboflow = tmp_path / "roboflow-voc"
    for split, stems in {"train": ["a", "b"], "valid": ["c"]}.items():
        for stem in stems:
            name = f"{stem}_jpg.rf.5e6f.jpg"
            grey_image(roboflow / split / name)
            labelimg_xml(roboflow / split / name.replace(".jpg", ".xml"), name, VOC_OBJECTS[stem])
    assert _voc(roboflow, "train") == {"cat": 1, "dog": 3, "bird": 1}
    assert _voc(roboflow, "valid", ["bird", "cat", "dog"]) == {"cat": 1}


def test_an_image_of_another_extension_is_read_and_named(tmp_path):
    root = tmp_path / "VOC"
    hand_counted_devkit(root, image_sets=True)
    (root / "JPEGImages" / "b.jpg").rename(root / "JPEGImages" / "b.png")
    problems = Problems(strict=False)
    content = read_voc(root, "train", None, problems)[1]
    assert [image["file_name"] for image in content["images"]] == ["JPEGImages/a.jpg",
                                                                   "JPEGImages/b.png"]
    assert _per_class(content) == {"cat": 1, "dog": 3, "bird": 1}
    assert problems.messages() == [
        (f"images read under another extension than their xml's filename: 1, e.g. "
         f"{root / 'Annotations' / 'b.xml'}: <filename> says b.jpg, read b.png")]
    (root / "JPEGImages" / "b.png").unlink()
    with pytest.raises(DatasetError, match=r"b.xml: <filename> b.jpg is not in .*JPEGImages "
                                           r"\(nor b with another image extension\)"):
        read_voc(root, "train", None, Problems(strict=True))
