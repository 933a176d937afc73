"""tools/analyze_model.py: parameter counts against the original's state-dict manifests, FLOPs
and activation memory of the four configs."""

from __future__ import annotations

import json
from collections import Counter
from math import prod

import pytest
import torch
from _tiny_coco import run

from core.config import load_config
from core.models import CornerNet_Tiny
from core.nnet.cost import forward_flops, saved_activation_bytes
from cornernet.commands.analyze_model import analyze

BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


@pytest.mark.parity  # builds the full-size networks
@pytest.mark.parametrize("name", ["CornerNet", "CornerNet_Squeeze", "CornerNet_Saccade"])
@pytest.mark.slow  # 7 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_parameter_counts_equal_the_original_state_dict_manifest(reference, name):
    manifest = json.loads((reference / f"{name}.state_dict.json").read_text())
    expected = Counter()
    for key, shape, _ in manifest:
        if not key.endswith(BUFFERS):
            expected[key.split(".")[1]] += prod(shape)
    system_config, db_config = load_config(name)
    report = analyze(system_config, db_config, (511, 511), torch.device("cpu"))
    assert report["parameters"]["modules"] == dict(expected)
    assert report["parameters"]["total"] == sum(expected.values())
    assert report["parameters"]["trainable"] == report["parameters"]["total"]
    assert report["test_gflops"] > 0 and report["train_gflops"] > 0
    assert report["activation_mib"] > 0


def test_flops_of_a_convolution_are_twice_its_multiply_adds():
    conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
    model = torch.nn.Module()
    model.last_stack = lambda image: ([conv(image)], [])
    assert forward_flops(model, (10, 12), test=True) == 2 * 8 * 10 * 12 * 3 * 9


def test_saved_activations_on_the_meta_device_equal_those_on_the_cpu():
    torch.manual_seed(0)
    real = CornerNet_Tiny.model(categories=4)
    with torch.device("meta"):
        meta = CornerNet_Tiny.model(categories=4)
    assert saved_activation_bytes(meta, (64, 64)) == saved_activation_bytes(real, (64, 64))


def test_a_tensor_saved_twice_counts_once_and_weights_not_at_all():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 2, 3, padding=1, bias=False))
    # the image (kept by the first convolution) and the ReLU's output (kept by the ReLU and by
    # the second convolution), float32
    assert saved_activation_bytes(model, (10, 12)) == (3 + 8) * 10 * 12 * 4


def frozen_report() -> dict:
    system_config, db_config = load_config("CornerNet_Tiny")
    return analyze(system_config.replace(freeze=["hg.pre"]), db_config, (128, 128),
                   torch.device("cpu"))


def test_frozen_parameters_are_not_trainable():
    params = frozen_report()["parameters"]
    pre = sum(p.numel() for p in CornerNet_Tiny.model(categories=4).hg.pre.parameters())
    assert params["trainable"] == params["total"] - pre


@pytest.mark.slow
def test_the_tool_prints_its_table(tmp_path):
    params = frozen_report()["parameters"]
    done = run("tools/analyze_model.py", "CornerNet_Tiny", "--test-size", 128, 128,
               "--json", tmp_path / "cost.json")
    assert done.returncode == 0, done.stderr
    assert f"{params['total']:,} parameters" in done.stdout
    assert "test path at 128 x 128" in done.stdout
    assert json.loads((tmp_path / "cost.json").read_text())["parameters"]["total"] == \
        params["total"]


def test_the_command_line_s_defaults_are_the_options_declared_ones():
    from cornernet.commands.analyze_model import AnalyzeModelOptions, parse_args

    parsed = parse_args(["CornerNet_Tiny"])
    assert parsed == AnalyzeModelOptions(cfg_file="CornerNet_Tiny")
    assert parsed.test_size == (511, 511) and parsed.device is None and parsed.json is None
    assert parse_args(["CornerNet_Tiny", "--test-size", "127", "255", "--set",
                       "db.categories=3"]) == AnalyzeModelOptions(
        cfg_file="CornerNet_Tiny", test_size=(127, 255), overrides={"db.categories": 3})


def test_a_test_size_of_one_side_is_the_usage_error_it_was(capsys):
    from cornernet.commands.analyze_model import main

    assert main(["CornerNet_Tiny", "--test-size", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: cornernet analyze model")
    assert "argument --test-size: expected 2 arguments" in err


@pytest.mark.slow  # two analyses of CornerNet_Tiny: about 4 s
def test_set_changes_the_config_whose_model_is_counted(capsys):
    from cornernet.commands.analyze_model import parse_args, run

    lines: list[str] = []
    four = run(parse_args(["CornerNet_Tiny", "--device", "cpu"]),
               log=lines.append)["parameters"]["total"]
    # the report goes through `log` (the API's caller decides where), nothing to stdout
    assert capsys.readouterr().out == "" and f"{four:,}" in "\n".join(lines)
    three = run(parse_args(["CornerNet_Tiny", "--device", "cpu", "--set", "db.categories=3"]))
    # one category fewer: the two heatmap heads (top-left, bottom-right) each lose one output
    # channel of their last 1x1 convolution, 32 weights and a bias
    assert four - three["parameters"]["total"] == 2 * (32 + 1)
