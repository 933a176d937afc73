"""Datasets declare the db keys they read (core/config/db_keys.py): a dataset class defined
outside core/dbs (here) with a path key is registered, and the config schema, the other
datasets' refusal of its keys and the node agreement take its keys with no edit elsewhere."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import ClassVar

import pytest

from core.config import ConfigError, load_config
from core.config.db_keys import DECLARED, DbKey, path_keys
from core.dbs import COCO, datasets, register_dataset
from core.engine.agree import differences, digest, resolved


class Folder(COCO):
    """A dataset of a plain image folder: its root (a path) and the file pattern it takes."""

    db_keys: ClassVar[dict[str, DbKey]] = {
        "folder_root": DbKey(None, (str,), path=True),
        "folder_pattern": DbKey("*.jpg", (str,), nullable=False)}


@pytest.fixture
def folder():
    """Folder registered for one test, then taken out of both registries."""
    register_dataset("Folder", Folder)
    yield Folder
    datasets.pop("Folder")
    DECLARED.pop("Folder")


def write_config(tmp_path, **db):
    (tmp_path / "Mine.json").write_text(json.dumps({"system": {"dataset": "Folder"},
                                                    "db": db}))
    return tmp_path


def test_a_registered_dataset_s_keys_are_in_the_schema_with_their_defaults(folder, tmp_path):
    _, db = load_config("Mine", write_config(tmp_path, folder_root="/data/pictures"))
    assert db["folder_root"] == "/data/pictures"
    assert db["folder_pattern"] == "*.jpg"  # its declared default
    _, db = load_config("Mine", tmp_path, overrides=["db.folder_pattern=*.png"])
    assert db["folder_pattern"] == "*.png"  # --set knows it too


def test_its_keys_are_checked_like_any_other(folder, tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key db\.folder_rot; did you mean "
                                          r"'folder_root'\?"):
        load_config("Mine", write_config(tmp_path, folder_rot="/data"))
    with pytest.raises(ConfigError, match=r"db\.folder_pattern must be str"):
        load_config("Mine", write_config(tmp_path, folder_pattern=None))


def test_without_the_registration_the_key_is_unknown(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key db\.folder_root"):
        load_config("Mine", write_config(tmp_path, folder_root="/data"))


def test_another_dataset_refuses_its_key_naming_it(folder, tmp_path):
    _, db = load_config("Mine", write_config(tmp_path, folder_root="/data"))
    with pytest.raises(ConfigError, match=r"db\.folder_root is not read by system\.dataset "
                                          r"'COCO'; remove it, or choose the dataset it "
                                          r"belongs to \(Folder\)"):
        COCO(db)
    assert Folder(db).configs["folder_root"] == "/data"  # its own
    _, coco_db = load_config("Mine", write_config(tmp_path, image_dirs={"val": "v"},
                                                  annotation_files={"val": "a.json"}))
    with pytest.raises(ConfigError, match=r"db\.annotation_files is not read by "
                                          r"system\.dataset 'Folder'.*\(COCO or Shapes\)"):
        Folder(coco_db)


def test_the_node_agreement_leaves_its_path_key_out_and_compares_the_rest(folder, tmp_path):
    assert "db.folder_root" in path_keys() and "db.folder_pattern" not in path_keys()
    args = SimpleNamespace(start_iter=0, initialize=False, dry_run=False)
    system, here = load_config("Mine", write_config(tmp_path, folder_root="/mnt/a"))
    _, there = load_config("Mine", write_config(tmp_path, folder_root="/scratch/b"))
    _, other = load_config("Mine", write_config(tmp_path, folder_root="/mnt/a",
                                                folder_pattern="*.png"))
    mine = resolved(system.full, here, args)
    assert digest(resolved(system.full, there, args)) == digest(mine)  # paths may differ
    assert differences(mine, resolved(system.full, other, args)) == ["db.folder_pattern"]


def test_the_built_in_datasets_declare_their_path_keys():
    assert {"db.image_dirs", "db.annotation_files", "db.data_yaml", "db.voc_root"} <= \
        path_keys()
    assert "db.names" not in path_keys()
