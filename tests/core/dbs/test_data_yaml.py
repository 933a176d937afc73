"""data.yaml as core/dbs/yolo.py reads it: bounded before anything expands, and each wrong
value said as what it is (issue 46)."""

from __future__ import annotations

import time

import pytest

from core.dbs import DatasetError
from core.dbs.yolo import read_data_yaml


def data_yaml(tmp_path, text):
    (tmp_path / "images").mkdir(exist_ok=True)
    path = tmp_path / "data.yaml"
    path.write_text("path: .\ntrain: images\nval: images\n" + text)
    return path


def refusal(path):
    with pytest.raises(DatasetError) as caught:
        read_data_yaml(path)
    return str(caught.value)


def test_an_alias_bomb_is_refused_in_one_line_before_it_expands(tmp_path):
    # 9 ** 7 (4.8 million) names from 600 bytes: each list repeats the one before 9 times.
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * 9)}]" for k in range(1, 7)]
    path = data_yaml(tmp_path, "\n".join(lines) + "\nnames: *l6\n")
    start = time.perf_counter()
    assert refusal(path) == (f"{path}: expands to more than 1000000 values through YAML "
                             "aliases (*name); a data.yaml lists its splits and names plainly")
    assert time.perf_counter() - start < 1


def test_names_that_are_not_a_flat_list_are_refused_naming_the_item(tmp_path):
    path = data_yaml(tmp_path, "names: [cat, [dog, fox], bird]\n")
    assert refusal(path) == (f"{path}: names: item 1 is a list of 2, not a name; names is a "
                             "flat list of the class names")


def test_nc_written_as_text_is_said_to_be_text(tmp_path):
    path = data_yaml(tmp_path, 'nc: "4"\nnames: [a, b, c, d]\n')
    assert refusal(path) == (f"{path}: nc is '4', a str, not a number; write nc: 4 unquoted, "
                             "or leave nc out (names gives the count)")
    path = data_yaml(tmp_path, "nc: 4\nnames: [a, b, c]\n")
    assert refusal(path) == f"{path}: nc is 4 but names lists 3 classes; make them agree"


def test_a_names_map_with_quoted_keys_reads_them_as_the_class_indices(tmp_path):
    path = data_yaml(tmp_path, "names: {'1': b, '0': a, '3': d, '2': c}\n")
    assert read_data_yaml(path)["names"] == ["a", "b", "c", "d"]
    path = data_yaml(tmp_path, "names: {'1': a, '2': b, x: c, '03': d}\n")
    assert refusal(path) == (f"{path}: names as a map must have the keys 0..3, one each, got "
                             "'1', '2', 'x', '03'")
