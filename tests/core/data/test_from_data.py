"""`--data PATH`: each exporter's layout recognised with the classes counted by hand, one split
cut in two by a seeded hash of the file names, a Windows `path:` read beside its yaml, the
settings fitted to the data (a --set wins, --no-fit keeps the config's), and the run's config
found by its name."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from _exports import EXPORTS, label_studio, labelimg, roboflow_coco

from core.config import ConfigError, load_config
from core.data.from_data import data_config, run_name
from core.dbs import DatasetError, datasets
from core.dbs.holdout import held_out
from core.dbs.recognise import recognise


def _sets(tmp_path: Path) -> list[str]:
    return [f"system.cache_dir={tmp_path / 'cache'}", f"system.result_dir={tmp_path / 'res'}"]


@pytest.mark.parametrize("layout", sorted(EXPORTS))
def test_each_exporter_layout_is_recognised_with_its_classes(tmp_path, layout):
    export = EXPORTS[layout](tmp_path / f"my-{layout}")
    found = recognise(export.path, tmp_path / "work")
    assert found.dataset == export.dataset
    assert found.names == export.names
    keys = (found.train, found.val, found.test)
    if len(export.splits) == 1:  # one split: validation is held out of it
        assert keys == (next(iter(export.splits)), None, None)
    else:
        assert [key for key in keys if key is not None] == list(export.splits)
    assert found.line().startswith(f"data: {export.path}")
    assert f"read as {export.dataset}: {len(export.names)} classes" in found.line()


def _val_names(record_dir: Path) -> list[str]:
    content = json.loads((record_dir / "val.json").read_text())
    return sorted(image["file_name"].rsplit("/", 1)[-1] for image in content["images"])


def test_one_split_is_cut_by_a_seeded_hash_of_the_file_names(tmp_path):
    lines: list[str] = []
    export = labelimg(tmp_path / "shots")
    system, _db, record = data_config("CornerNet_Tiny", export.path, "one", _sets(tmp_path),
                                     fit=False, log=lines.append)
    run_dir = tmp_path / "cache" / "nnet" / "one"
    # the rule, computed here: sha1("0/<file name>") as a fraction of 2**64 below 0.2
    names = sorted(p.name for p in export.path.glob("*.jpg"))
    expected = [n for n in names
                if int.from_bytes(hashlib.sha1(f"0/{n}".encode()).digest()[:8], "big") / 2 ** 64
                < 0.2]
    assert _val_names(run_dir) == (expected or [min(names, key=lambda n: hashlib.sha1(
        f"0/{n}".encode()).digest())])
    assert [held_out(n) for n in names] == [n in expected for n in names]
    assert (system.dataset, system.train_split, system.val_split) == ("COCO", "train", "val")
    assert record["holdout"] == {"split": "shots", "fraction": 0.2, "seed": 0,
                                 "rule": "sha1(f'{seed}/{file name}') < fraction",
                                 "train_images": 6 - len(_val_names(run_dir)),
                                 "val_images": len(_val_names(run_dir))}
    said = [line for line in lines if line.startswith("split: ")]
    assert said == [(f"split: 'shots' is the only split: {len(_val_names(run_dir))} of its 6 "
                    f"images held out for validation (those whose file name hashes below 0.2, "
                    f"seed 0: the same on every run and machine), "
                    f"{6 - len(_val_names(run_dir))} train")]
    train = json.loads((run_dir / "train.json").read_text())
    assert sorted(Path(im["file_name"]).name for im in train["images"]) == \
        sorted(set(names) - set(_val_names(run_dir)))
    # the same images on another machine: another folder, files written in another order
    other = tmp_path / "elsewhere" / "shots"
    shutil.copytree(export.path, other)
    data_config("CornerNet_Tiny", other, "two", _sets(tmp_path), fit=False,
                log=lambda text: None)
    assert _val_names(tmp_path / "cache" / "nnet" / "two") == _val_names(run_dir)
    assert json.loads((run_dir / "data.json").read_text())["holdout"] == record["holdout"]


def test_a_split_named_for_both_train_and_val_is_one_split(tmp_path):
    export = label_studio(tmp_path / "ls")
    (export.path / "data.yaml").write_text("train: images\nval: images\nnames: [circle, square]\n")
    found = recognise(export.path, tmp_path / "work")
    assert (found.dataset, found.train, found.val) == ("YOLO", "train", None)
    _system, _db, record = data_config("CornerNet_Tiny", export.path, "ls", _sets(tmp_path),
                                     fit=False, log=lambda text: None)
    assert record["holdout"]["train_images"] + record["holdout"]["val_images"] == 6
    assert record["holdout"]["val_images"] >= 1


def test_a_windows_path_is_read_beside_the_yaml_with_a_warning(tmp_path):
    export = label_studio(tmp_path / "ls")
    yaml = export.path / "data.yaml"
    yaml.write_text("path: C:/Users/me/Downloads/project-3\ntrain: images\nval: images\n"
                    "names:\n  - circle\n  - square\n")
    lines: list[str] = []
    _system, _db, record = data_config("CornerNet_Tiny", yaml, "win", _sets(tmp_path), fit=False,
                                     log=lines.append)
    assert f"warning: {yaml}: path: 'C:/Users/me/Downloads/project-3' is a Windows drive " \
           f"path, not a folder on this machine; the splits were read beside the yaml, from " \
           f"{export.path}" in lines
    assert record["holdout"]["train_images"] + record["holdout"]["val_images"] == 6
    yaml.write_text("path: C:/Users/me/Downloads/project-3\ntrain: shots/images\n"
                    "names: [circle, square]\n")
    with pytest.raises(DatasetError, match=r"is a Windows drive path, not a folder on this"):
        recognise(yaml, tmp_path / "work")


def test_the_settings_fit_the_data_a_set_wins_and_no_fit_keeps_the_config(tmp_path):
    export = roboflow_coco(tmp_path / "rf", k=4)
    lines: list[str] = []
    _, config_db = load_config("CornerNet_Tiny")
    _system, db, record = data_config("CornerNet_Tiny", export.path, "fit", _sets(tmp_path),
                                     log=lines.append)
    changes = record["fit"]["changes"]
    # 640-pixel images on a 128 input, objects of 160 px and more (12 px after scaling:
    # the input stays): crops of 0.6-1.4 times 640/128 input sizes, tested at 128/640
    assert changes == {"rand_scales": None, "rand_scale_min": 3.0, "rand_scale_max": 7.0,
                       "rand_scale_step": 0.5, "test_scales": [0.2]}
    assert (db["test_scales"], db["rand_scale_min"], db["rand_scale_max"]) == ([0.2], 3.0, 7.0)
    assert db["rand_scales"] == pytest.approx([3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5])
    assert db["input_size"] == config_db["input_size"]
    fit = [line for line in lines if line.startswith("fit: ")]
    assert len(fit) == 1 and ("db.rand_scale_min 0.6 -> 3, db.rand_scale_max 1.4 -> 7, "
                              "db.rand_scale_step 0.1 -> 0.5, db.test_scales [1] -> [0.2]"
                              in fit[0])
    assert record["fit"]["removed_after"] < record["fit"]["removed_today"]
    assert f"keep {1 - record['fit']['removed_today']:.1%} of the objects -> " \
           f"{1 - record['fit']['removed_after']:.1%}" in fit[0]
    _, db_set, record_set = data_config("CornerNet_Tiny", export.path, "set",
                                        _sets(tmp_path) + ["db.test_scales=[0.5]"],
                                        log=lambda text: None)
    assert db_set["test_scales"] == [0.5] and db_set["rand_scale_min"] == 3.0
    assert "test_scales" not in record_set["fit"]["changes"]
    said: list[str] = []
    _, db_no, record_no = data_config("CornerNet_Tiny", export.path, "nofit", _sets(tmp_path),
                                      fit=False, log=said.append)
    assert ("fit: none (--no-fit): the config's db.input_size [128,128], crop scales "
            "[0.6,0.7,0.8,0.9,1,1.1,1.2,1.3], db.test_scales [1]") in said
    assert record_no["fit"] is None
    assert (db_no["test_scales"], db_no["rand_scales"]) == (config_db["test_scales"],
                                                            config_db["rand_scales"])


def test_the_run_is_found_by_its_name_from_its_folder(tmp_path, monkeypatch):
    export = roboflow_coco(tmp_path / "rf export")
    assert run_name("CornerNet_Tiny", export.path) == "CornerNet_Tiny-rf-export"
    _system, db, _ = data_config("CornerNet_Tiny", export.path, None, _sets(tmp_path),
                                fit=False, log=lambda text: None)
    monkeypatch.chdir(tmp_path)
    loaded, loaded_db = load_config("CornerNet_Tiny-rf-export")
    assert loaded.snapshot_name == "CornerNet_Tiny-rf-export"
    assert (loaded.model, loaded.dataset, loaded.val_split) == ("CornerNet_Tiny", "COCO",
                                                                 "valid")
    assert loaded_db["categories"] == 3 and loaded_db == db
    assert datasets["COCO"](loaded_db, split="valid", sys_config=loaded).db_inds.size == 1
    with pytest.raises(ConfigError, match="nor is it a run trained with --data"):
        load_config("CornerNet_Tiny-no-such-run")
    with pytest.raises(ConfigError, match="choose another --name"):
        data_config("CornerNet_Tiny", export.path, "CornerNet_Squeeze", _sets(tmp_path),
                    log=lambda text: None)


def test_a_coco_json_given_itself_finds_its_images_in_the_export(tmp_path):
    from _exports import cvat_coco

    export = cvat_coco(tmp_path / "task_12-2024_05_01")
    found = recognise(export.path / "annotations" / "instances_default.json", tmp_path / "w")
    assert (found.dataset, found.train, found.val) == ("COCO", "train", None)
    assert found.db["image_dirs"] == {"train": str(export.path / "images")}
    assert run_name("CornerNet_Tiny", export.path / "annotations" / "instances_default.json") \
        == "CornerNet_Tiny-annotations"


def test_a_folder_with_no_export_is_one_line_saying_what_was_looked_for(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("nothing here\n")
    with pytest.raises(DatasetError) as err:
        recognise(tmp_path / "notes", tmp_path / "w")
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"--data {tmp_path / 'notes'}: no export recognised there; "
                                     f"expected a data.yaml, train/ valid/ test/ with "
                                     f"_annotations.coco.json (Roboflow COCO)")
