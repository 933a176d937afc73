"""One registry of sampling functions (core/sample: `sampling_functions`): the batch, layout,
original call form, training view, advice and inference of each are found by its record, an
unknown name is core.errors.lookup's error wherever it is asked, and no module compares a
sampling function's name."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from core.data.advice import settings_advice
from core.errors import ConfigError
from core.inference import registry
from core.sample import (
    CORNER_SAMPLING,
    SACCADE_SAMPLING,
    data_sampling_func,
    image_bytes,
    sampler,
    sampling_function,
    sampling_functions,
)
from core.sample.cornernet import cornernet_view
from core.sample.cornernet_saccade import saccade_view

ROOT = Path(__file__).resolve().parents[3]
UNKNOWN = ("unknown sampling function 'cornernet_lite'; valid sampling function names: "
           "cornernet, cornernet_saccade")


def test_every_sampling_function_has_its_inference_and_the_original_names():
    assert list(sampling_functions) == ["cornernet", "cornernet_saccade"]
    assert set(registry._INFERENCES) == set(sampling_functions.values())
    assert registry.inference_of("cornernet_saccade").run is registry.run_saccade
    assert registry.test_func["cornernet"] is registry.inference_of("cornernet")
    assert data_sampling_func == {name: fn.original for name, fn in sampling_functions.items()}


def test_an_unknown_name_lists_the_valid_ones_wherever_it_is_asked():
    for ask in (lambda: sampling_function("cornernet_lite"), lambda: sampler("cornernet_lite"),
                lambda: image_bytes({}, "cornernet_lite"),
                lambda: registry.inference_of("cornernet_lite"),
                lambda: settings_advice([], "cornernet_lite")):
        with pytest.raises(ConfigError) as raised:
            ask()
        assert str(raised.value) == UNKNOWN


def test_each_view_is_the_one_its_batch_draws():
    configs = {"input_size": [127, 127], "rand_scales": [0.6, 1.0, 1.4], "border": 16,
               "rand_crop": True, "rand_center": True, "min_scale": 16, "init_sizes": [64, 96]}
    boxes = np.array([[10.0, 20.0, 60.0, 90.0]])
    assert SACCADE_SAMPLING.view is saccade_view
    ours = CORNER_SAMPLING.view(np.random.default_rng(3), (200, 300), boxes, configs)
    direct = cornernet_view(np.random.default_rng(3), (200, 300), configs)
    assert ours == direct
    assert CORNER_SAMPLING.advice and not SACCADE_SAMPLING.advice
    assert settings_advice([], "cornernet_saccade") == {
        "note": "no settings advice for sampling_function 'cornernet_saccade' (its crops are "
                "drawn around objects)"}


def test_no_module_compares_a_sampling_function_s_name():
    names = set(sampling_functions)
    found = []
    for path in [*ROOT.glob("core/**/*.py"), *ROOT.glob("cornernet/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Constant) and side.value in names
                    for side in (node.left, *node.comparators)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
