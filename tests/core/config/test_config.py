"""core.config: strict keys and types, config names, JSON errors, paths, rand_scales."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.config import (
    CONFIG_DIR,
    PROJECT_ROOT,
    ConfigError,
    SystemConfig,
    check_db_config,
    config_path,
    load_config,
    lookup,
    read_json,
)


def test_unknown_db_key_names_it_and_the_closest_valid_key():
    with pytest.raises(ConfigError, match=r"unknown key db\.categries; did you mean 'categories'"):
        check_db_config({"categries": 4})


def test_unknown_system_key_names_it_and_the_closest_valid_key():
    with pytest.raises(ConfigError, match=r"system\.batchsize; did you mean 'batch_size'"):
        SystemConfig().update_config({"batchsize": 4})


def test_config_dir_is_refused_in_one_line():
    """system.config_dir was accepted and read nowhere (configs are found by --config-dir)."""
    with pytest.raises(ConfigError) as caught:
        SystemConfig().update_config({"config_dir": "./configs"}, "configs/X.json")
    assert str(caught.value) == ("configs/X.json: system.config_dir is not a setting here (the "
                                 "original accepted it and never used it); remove it from the "
                                 "config")
    assert "config_dir" not in SystemConfig().full


def test_key_the_original_ignored_is_rejected_with_a_reason():
    with pytest.raises(ConfigError, match="rand_full_crop is not a setting here"):
        check_db_config({"rand_full_crop": True})


@pytest.mark.parametrize("key, value, expected", [
    ("categories", "4", "db.categories must be int, got str '4'"),
    ("categories", True, "db.categories must be int, got bool True"),
    ("categories", None, "db.categories must be int, got NoneType None"),
    ("input_size", 511, "db.input_size must be list, got int 511"),
    ("nms_threshold", "0.5", "db.nms_threshold must be number, got str"),
])
def test_wrong_type_names_the_key_the_expected_and_the_given_type(key, value, expected):
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        check_db_config({key: value})


def test_numbers_accept_ints_and_nullable_keys_accept_null():
    configs = check_db_config({"nms_threshold": 1, "image_dirs": None})
    assert configs["nms_threshold"] == 1 and configs["image_dirs"] is None


def test_choice_outside_the_valid_values_is_an_error():
    with pytest.raises(ConfigError, match="system.opt_algo is 'adamw'; valid: adam, sgd"):
        SystemConfig().update_config({"opt_algo": "adamw"})


def test_chunk_sizes_must_sum_to_the_batch_size():
    with pytest.raises(ConfigError, match=r"sum to 5, not batch_size 6"):
        SystemConfig().update_config({"batch_size": 6, "chunk_sizes": [2, 3]})


def test_defaults_fill_every_db_key_and_updates_do_not_leak_between_calls():
    first = check_db_config({"categories": 4})
    first["output_sizes"].append([1, 1])
    second = check_db_config({})
    assert second["categories"] == 80 and second["output_sizes"] == [[96, 96], [48, 48],
                                                                     [24, 24], [12, 12]]


def test_unknown_config_name_suggests_the_closest_one():
    with pytest.raises(ConfigError, match="unknown config 'CornerNet_Tiy'.*'CornerNet_Tiny'"):
        config_path("CornerNet_Tiy")


def test_unknown_config_name_far_from_all_lists_the_valid_ones():
    names = sorted(p.stem for p in CONFIG_DIR.glob("*.json"))
    with pytest.raises(ConfigError, match="valid: " + ", ".join(names)):
        config_path("xyz")


def test_config_name_is_never_a_path():
    with pytest.raises(ConfigError, match="unknown config"):
        config_path("../configs/CornerNet")


def test_lookup_lists_the_valid_names():
    with pytest.raises(ConfigError, match="unknown dataset 'COC'; valid dataset names: COCO, X"):
        lookup({"COCO": 1, "X": 2}, "COC", "dataset")


def test_malformed_json_names_the_file_and_line(tmp_path: Path):
    (tmp_path / "Broken.json").write_text('{\n  "system": {\n    "batch_size": 4,\n  }\n}\n')
    with pytest.raises(ConfigError, match=r"Broken\.json: malformed JSON at line 4 column 3"):
        load_config("Broken", config_dir=tmp_path)


def test_missing_json_file_names_it(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read .*absent.json"):
        read_json(tmp_path / "absent.json")


def test_config_with_an_extra_section_is_an_error(tmp_path: Path):
    (tmp_path / "Extra.json").write_text('{"system": {}, "db": {}, "model": {}}')
    with pytest.raises(ConfigError, match="only 'system' and 'db' sections; found model"):
        load_config("Extra", config_dir=tmp_path)


def test_relative_paths_resolve_against_the_project_root_not_the_cwd(tmp_path: Path,
                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    system, _ = load_config("CornerNet_Tiny")
    assert system.data_dir == PROJECT_ROOT / "data"
    assert system.cache_dir == PROJECT_ROOT / "cache"
    assert system.snapshot_file(500) == (PROJECT_ROOT / "cache" / "nnet" / "CornerNet_Tiny"
                                         / "CornerNet_Tiny_500.pkl")
    assert system.result_dir == PROJECT_ROOT / "results" / "CornerNet_Tiny"
    assert SystemConfig().resolve(tmp_path / "abs") == tmp_path / "abs"


def test_rand_scales_null_expands_like_numpy_arange():
    configs = check_db_config({"rand_scales": None, "rand_scale_min": 0.6,
                               "rand_scale_max": 1.4, "rand_scale_step": 0.1})
    assert configs["rand_scales"] == np.arange(0.6, 1.4, 0.1).tolist()
    np.testing.assert_allclose(configs["rand_scales"], [0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3])
    assert check_db_config({"rand_scales": [1, 2]})["rand_scales"] == [1, 2]


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.json")))
def test_every_shipped_config_loads(name: str):
    system, db = load_config(name)
    assert system.snapshot_name and db["categories"] >= 1


@pytest.mark.parametrize("section, key", [("system", "snapshot"), ("system", "stepsize"),
                                          ("system", "batch_size"), ("db", "max_objects")])
def test_zero_count_or_period_is_an_error(section: str, key: str):
    check = (lambda v: SystemConfig().update_config({key: v})) if section == "system" else (
        lambda v: check_db_config({key: v}))
    with pytest.raises(ConfigError, match=f"{section}.{key} must be greater than 0, got 0"):
        check(0)


def test_view_sizes_is_rejected_as_a_key_the_original_never_used():
    with pytest.raises(ConfigError, match="db.view_sizes .*never used"):
        check_db_config({"view_sizes": []})


def test_att_scales_need_one_list_per_attention_round():
    assert check_db_config({})["att_scales"] == [[1, 1.5, 2]]
    with pytest.raises(ConfigError, match="att_scales"):
        check_db_config({"att_scales": [1, 1.5, 2]})
    with pytest.raises(ConfigError, match="att_scales"):
        check_db_config({"att_thresholds": [0.3, 0.3]})


def test_the_system_config_refuses_every_write_in_place():
    system = SystemConfig().update_config({"batch_size": 4, "freeze": ["hg.pre"]})
    with pytest.raises(TypeError, match=r"read-only; make a checked copy with .*replace"):
        system.full["batch_size"] = 8
    for write in (lambda full: full.update(batch_size=8), lambda full: full.pop("seed"),
                  lambda full: full.setdefault("x", 1), lambda full: full.clear()):
        with pytest.raises(TypeError, match="read-only"):
            write(system.full)
    with pytest.raises(AttributeError, match=r"read-only \(setting batch_size\)"):
        system.batch_size = 8
    system.full["freeze"].append("hg.kps")  # a copy: the config does not see it
    system.freeze.append("hg.kps")
    assert system.batch_size == 4 and system.freeze == ["hg.pre"]
    assert system.full["freeze"] == ["hg.pre"]


def test_replace_is_a_new_config_checked_as_a_config_file_is():
    system = SystemConfig().update_config({"batch_size": 4, "seed": 7})
    changed = system.replace(batch_size=6, chunk_sizes=[2, 4])
    assert (changed.batch_size, changed.chunk_sizes, changed.seed) == (6, [2, 4], 7)
    assert (system.batch_size, system.chunk_sizes) == (4, None)  # the original is untouched
    assert system.replace() == system and changed != system
    with pytest.raises(ConfigError, match=r"system\.batch_size must be int, got str '6'"):
        system.replace(batch_size="6")
    with pytest.raises(ConfigError, match=r"system\.batch_size must be greater than 0"):
        system.replace(batch_size=0)
    with pytest.raises(ConfigError, match=r"unknown key system\.bench_input_size"):
        system.replace(bench_input_size=[64, 64])
    with pytest.raises(ConfigError, match=r"chunk_sizes \[2, 4\] sum to 6, not batch_size 4"):
        system.replace(chunk_sizes=[2, 4])
    with pytest.raises(ConfigError, match="snapshot_name"):
        system.replace(snapshot_name="../up")


def test_a_system_config_pickles_whole():
    import pickle

    system = SystemConfig(Path("/tmp/root")).update_config({"batch_size": 3, "data_dir": "d"})
    copy = pickle.loads(pickle.dumps(system))
    assert copy == system and copy.data_dir == Path("/tmp/root/d")
    assert pickle.loads(pickle.dumps(system.full)) == system.full
