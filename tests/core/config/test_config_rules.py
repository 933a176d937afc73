"""core.config.rules: values that cannot be right are refused at load, in one line."""

from __future__ import annotations

import re

import pytest
from _faults import one_line

from core.config import CONFIG_DIR, ConfigError, SystemConfig, check_db_config, load_config


@pytest.mark.parametrize("value", [-5, 0])
def test_max_iter_below_one_is_refused(value):
    with pytest.raises(ConfigError) as caught:
        SystemConfig().update_config({"max_iter": value})
    assert one_line(caught) == (f"system config: system.max_iter must be at least 1 (the last "
                                f"iteration to train), got {value}")


@pytest.mark.parametrize("key", ["display", "val_iter", "eval_iter", "warmup_iters"])
def test_periods_may_be_zero_but_not_negative(key):
    assert getattr(SystemConfig().update_config({key: 0}), key) == 0
    with pytest.raises(ConfigError, match=f"system.{key} must be 0 \\(never\\) or more, got -1"):
        SystemConfig().update_config({key: -1})


@pytest.mark.parametrize("key", ["snapshot", "stepsize", "batch_size", "prefetch_size"])
def test_counts_that_divide_must_be_positive(key):
    with pytest.raises(ConfigError, match=f"system.{key} must be greater than 0, got 0"):
        SystemConfig().update_config({key: 0})


def test_tensorboard_asked_for_and_turned_off_is_refused():
    assert SystemConfig().update_config({"trackers": ["tensorboard"]}).tensorboard is True
    assert SystemConfig().update_config({"tensorboard": False}).tensorboard is False
    with pytest.raises(ConfigError) as caught:
        SystemConfig().update_config({"trackers": ["tensorboard"], "tensorboard": False})
    assert one_line(caught) == ('system config: system.trackers names "tensorboard" and '
                                'system.tensorboard is false; drop one of the two')


def test_a_refused_update_leaves_the_config_as_it_was():
    config = SystemConfig().update_config({"max_iter": 7})
    with pytest.raises(ConfigError):
        config.update_config({"max_iter": 0})
    assert config.max_iter == 7


@pytest.mark.parametrize("chunks", [[0, 4], [2.5, 1.5], []])
def test_chunk_sizes_are_positive_integers(chunks):
    with pytest.raises(ConfigError, match="chunk_sizes must be a non-empty list of positive"):
        SystemConfig().update_config({"batch_size": 4, "chunk_sizes": chunks})


@pytest.mark.parametrize("name", ["../../x", "/abs/path", "a/b", "..", ".hidden", "a b"])
def test_snapshot_name_must_be_a_plain_name(name):
    with pytest.raises(ConfigError) as caught:
        SystemConfig().update_config({"snapshot_name": name})
    assert f"system.snapshot_name '{name}' must be a plain name" in one_line(caught)


def test_plain_names_pass():
    config = SystemConfig().update_config({"snapshot_name": "CornerNet_Tiny-2.1",
                                           "test_split": "val2017"})
    assert config.snapshot_dir.name == "CornerNet_Tiny-2.1"


def test_split_keys_must_be_plain_names_they_become_result_folders():
    with pytest.raises(ConfigError, match="system.test_split '../up' must be a plain name"):
        SystemConfig().update_config({"test_split": "../up"})


@pytest.mark.parametrize("value, expected", [
    (float("nan"), "system.learning_rate must be a finite number, got nan"),
    (float("inf"), "system.learning_rate must be a finite number, got inf"),
])
def test_non_finite_numbers_are_refused(value, expected):
    with pytest.raises(ConfigError, match=expected):
        SystemConfig().update_config({"learning_rate": value})


def test_nan_in_a_config_file_is_refused_naming_the_file(tmp_path):
    (tmp_path / "Bad.json").write_text('{"system": {"learning_rate": NaN}}')
    with pytest.raises(ConfigError, match=r"Bad\.json: system\.learning_rate must be a finite"):
        load_config("Bad", tmp_path)


def test_deeply_nested_config_is_one_line(tmp_path):
    depth = 100_000
    (tmp_path / "Deep.json").write_text('{"system": {"x": ' + "[" * depth + "]" * depth + "}}")
    with pytest.raises(ConfigError) as caught:
        load_config("Deep", tmp_path)
    assert one_line(caught) == (f"{tmp_path / 'Deep.json'}: JSON nested too deep to read; a "
                                f"config is two levels of objects holding values and short "
                                f"lists")


@pytest.mark.parametrize("size", [[0, 511], [511, -1], [511], [511.0, 511], ["511", 511]])
def test_input_size_is_two_positive_integers(size):
    with pytest.raises(ConfigError, match=r"db.input_size must be \[height, width\], two "
                                          r"positive integers"):
        check_db_config({"input_size": size})


@pytest.mark.parametrize("sizes", [[[0, 128]], [], [128, 128], [[128, 128, 3]]])
def test_output_sizes_are_pairs_of_positive_integers(sizes):
    with pytest.raises(ConfigError, match=r"db.output_sizes must be a non-empty list of "
                                          r"\[height, width\]"):
        check_db_config({"output_sizes": sizes})


@pytest.mark.parametrize("key, value", [("test_scales", []), ("test_scales", [1, 0]),
                                        ("rand_scales", [-0.5]), ("att_ratios", [16, 0])])
def test_scale_lists_hold_positive_numbers(key, value):
    with pytest.raises(ConfigError, match=f"db.{key} must be a non-empty list of positive"):
        check_db_config({key: value})


@pytest.mark.parametrize("key", ["top_k", "num_dets", "max_per_image", "num_train_images"])
def test_db_counts_must_be_positive(key):
    with pytest.raises(ConfigError, match=f"db.{key} must be greater than 0, got 0"):
        check_db_config({key: 0})


def test_image_dirs_map_split_keys_to_paths():
    with pytest.raises(ConfigError, match="db.image_dirs must map each split key to a path"):
        check_db_config({"image_dirs": {"train": {"deep": "x"}}})


def test_every_shipped_config_passes_the_rules():
    for path in sorted(CONFIG_DIR.glob("*.json")):
        load_config(path.stem)


@pytest.mark.parametrize("system, words", [
    ({"warmup_factor": 1.5}, "system.warmup_factor must be in (0, 1]"),
    ({"warmup_factor": 0}, "system.warmup_factor must be greater than 0"),
    ({"learning_rate": -0.1}, "system.learning_rate must be 0 or more, got -0.1"),
    ({"seed": -1}, "system.seed must be 0 or more"),
])
def test_system_values_at_the_edges_are_refused(system, words):
    with pytest.raises(ConfigError) as caught:
        SystemConfig().update_config(system)
    assert words in one_line(caught)


@pytest.mark.parametrize("db, words", [
    ({"gaussian_iou": 1.0}, "db.gaussian_iou must be between 0 and 1"),
    ({"gaussian_iou": 0}, "db.gaussian_iou must be between 0 and 1"),
    ({"gaussian_radius": -2}, "db.gaussian_radius must be -1"),
    ({"rand_scale_min": 1.5, "rand_scale_max": 1.2}, "db.rand_scale_min 1.5 is above"),
    ({"att_thresholds": [1.5]}, "db.att_thresholds must be scores between 0 and 1"),
])
def test_db_values_at_the_edges_are_refused(db, words):
    with pytest.raises(ConfigError) as caught:
        check_db_config(db, "db config")
    assert words in one_line(caught)


@pytest.mark.parametrize("db, words", [
    ({"nms_kernel": 2}, "db.nms_kernel must be odd"),
    ({"att_nms_ks": [3, 4, 3]}, "db.att_nms_ks must be odd"),
    ({"nms_algorithm": "soft"}, "db.nms_algorithm is 'soft'; valid: nms, linear_soft_nms"),
    ({"nms_threshold": 1.5}, "db.nms_threshold is an IoU, between 0 and 1, got 1.5"),
])
def test_test_settings_that_would_fail_at_the_first_evaluation_are_refused_at_load(db, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        check_db_config(db)


def test_more_detections_than_corner_pairs_is_refused_where_detection_runs():
    from core.config.rules import check_decode_settings

    check_decode_settings(check_db_config({"top_k": 20, "num_dets": 400}))
    with pytest.raises(ConfigError, match=r"db.num_dets 401 is more than the top_k \* top_k = "
                                          r"400 corner pairs"):
        check_decode_settings(check_db_config({"top_k": 20, "num_dets": 401}))


@pytest.mark.parametrize("key, value", [("max_iter", 2 ** 63), ("seed", 2 ** 70),
                                        ("snapshot", 2 ** 64)])
def test_integers_beyond_64_bits_are_one_line_at_load(key, value):
    with pytest.raises(ConfigError) as caught:
        SystemConfig().update_config({key: value})
    assert one_line(caught) == (f"system config: system.{key} is {value}, beyond the 64-bit "
                                f"integers the code holds (below 2**63 = {2 ** 63})")


def test_the_largest_64_bit_max_iter_loads():
    assert SystemConfig().update_config({"max_iter": 2 ** 63 - 1,
                                         "stepsize": 2 ** 62}).max_iter == 2 ** 63 - 1


def test_a_weight_decay_above_one_is_refused():
    assert SystemConfig().update_config({"weight_decay": 1}).weight_decay == 1
    with pytest.raises(ConfigError, match=r"system.weight_decay must be at most 1 .*got 1e\+308"):
        SystemConfig().update_config({"weight_decay": 1e308})


@pytest.mark.parametrize("value, inverse", [(0.1, "10"), (0.5, "2")])
def test_a_decay_rate_below_one_is_refused_naming_its_inverse(value, inverse):
    with pytest.raises(ConfigError, match=f"system.decay_rate {value} is below 1.*gamma "
                                          f"{value} is decay_rate {inverse}\\)"):
        SystemConfig().update_config({"decay_rate": value})
    assert SystemConfig().update_config({"decay_rate": 1}).decay_rate == 1


def test_a_top_k_no_memory_holds_is_one_line_at_load():
    with pytest.raises(ConfigError, match="db.top_k 1000000000 is more than 4096"):
        check_db_config({"top_k": 10 ** 9})
    assert check_db_config({"top_k": 4096})["top_k"] == 4096


def test_a_config_named_with_other_characters_is_answered_without_did_you_mean(tmp_path):
    (tmp_path / "my config!.json").write_text("{}")
    (tmp_path / "Good.json").write_text("{}")
    with pytest.raises(ConfigError) as caught:
        load_config("my config!", tmp_path)
    message = one_line(caught)
    assert "did you mean" not in message
    assert message.startswith(f"config 'my config!' in {tmp_path} is not a plain name")
    assert message.endswith("rename my config!.json to one")
    with pytest.raises(ConfigError) as caught:
        load_config("../Good", tmp_path)
    assert "did you mean" not in one_line(caught) and "never a path" in one_line(caught)
