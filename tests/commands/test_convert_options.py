"""`cornernet convert`'s options: one frozen value per conversion, its defaults the declared
ones, and the usage mistakes of its subcommands ending as they always did."""

from __future__ import annotations

from pathlib import Path

import pytest

from cornernet.commands import convert


@pytest.mark.parametrize("argv, value", [
    (["yolo2coco", "data.yaml", "train", "out.json"],
     convert.YoloToCoco(data_yaml=Path("data.yaml"), split="train", out=Path("out.json"))),
    (["voc2coco", "VOC", "val", "out.json"],
     convert.VocToCoco(voc_root=Path("VOC"), split="val", out=Path("out.json"))),
    (["coco2yolo", "a.json", "images", "yolo"],
     convert.CocoToYolo(annotations=Path("a.json"), images=Path("images"), out=Path("yolo"))),
])
def test_each_conversion_s_defaults_are_the_declared_ones(argv, value):
    parsed = convert.parse_args(argv)
    assert parsed == value and type(parsed) is type(value)
    assert not parsed.exist_ok and not parsed.debug


def test_the_options_given_are_the_value_s():
    assert convert.parse_args(["voc2coco", "VOC", "val", "out.json", "--names", "cat", "dog",
                               "--exist-ok"]) == convert.VocToCoco(
        voc_root=Path("VOC"), split="val", out=Path("out.json"), names=("cat", "dog"),
        exist_ok=True)
    parsed = convert.parse_args(["coco2yolo", "a.json", "images", "yolo", "--split", "val",
                                 "--copy"])
    assert (parsed.split, parsed.copy, parsed.command) == ("val", True, "coco2yolo")


@pytest.mark.parametrize("argv, usage, message", [
    ([], "usage: cornernet convert ", "the following arguments are required: command"),
    (["yolo2json", "d.yaml", "train", "o.json"], "usage: cornernet convert ",
     ("argument command: invalid choice: 'yolo2json' (choose from 'yolo2coco', 'voc2coco', "
      "'coco2yolo')")),
    (["voc2coco", "VOC", "val"], "usage: cornernet convert voc2coco ",
     "the following arguments are required: out"),
    (["yolo2coco", "d.yaml", "train", "o.json", "--copy"], "usage: cornernet convert ",
     "unrecognized arguments: --copy"),
])
def test_a_usage_mistake_is_the_usage_error_it_was(argv, usage, message, capsys):
    assert convert.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and message in err, err
