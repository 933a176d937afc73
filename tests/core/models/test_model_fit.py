"""core.models.fit: input and output sizes a model cannot take are refused, naming the sizes
that fit."""

from __future__ import annotations

import pytest
import torch
from _faults import one_line

from core.config import CONFIG_DIR, ConfigError, check_db_config, load_config
from core.models import build_model
from core.models.fit import SizeRule, check_model_fit, model_size_rule, size_rule


def tiny(**db) -> dict:
    return check_db_config({"categories": 4, "input_size": [127, 127],
                            "output_sizes": [[32, 32]], **db})


def test_sizes_that_fit_the_model_pass():
    check_model_fit("CornerNet_Tiny", tiny())
    check_model_fit("CornerNet_Tiny", tiny(input_size=[128, 64], output_sizes=[[32, 16]]))


def test_output_size_of_another_stride_names_the_right_value():
    with pytest.raises(ConfigError) as caught:
        check_model_fit("CornerNet_Tiny", tiny(output_sizes=[[16, 16]]))
    assert one_line(caught) == ("db.output_sizes[0] is [16, 16] but model CornerNet_Tiny turns "
                                "input_size [127, 127] into [32, 32] (stride 4); set "
                                "db.output_sizes to [[32, 32]]")


def test_input_size_the_hourglass_cannot_take_names_the_nearest_sizes():
    with pytest.raises(ConfigError) as caught:
        check_model_fit("CornerNet_Tiny", tiny(input_size=[127, 100]))
    assert one_line(caught) == ("db.input_size width 100 does not fit model CornerNet_Tiny: it "
                                "downsamples by 4 and then halves 3 times, so input / 4 "
                                "(rounded up) must be a multiple of 8; use 95 or 127")
    for fitting in (95, 127):
        check_model_fit("CornerNet_Tiny", tiny(input_size=[127, fitting],
                                               output_sizes=[[32, (fitting + 1) // 4]]))


def test_squeeze_has_stride_eight():
    db = check_db_config({"input_size": [500, 511], "output_sizes": [[64, 64]]})
    with pytest.raises(ConfigError, match="downsamples by 8 and then halves 4 times, so input "
                                          "/ 8 .* multiple of 16; use 383 or 511"):
        check_model_fit("CornerNet_Squeeze", db)


def test_attention_sizes_must_be_the_saccade_maps():
    db = check_db_config({"input_size": [255, 255], "output_sizes": [[64, 64]],
                          "att_sizes": [[8, 8], [16, 16], [32, 32]]})
    with pytest.raises(ConfigError, match=r"att_sizes is \[\[8, 8\], \[16, 16\], \[32, 32\]\] "
                                          r"but model CornerNet_Saccade makes attention maps of "
                                          r"\[\[16, 16\], \[32, 32\], \[64, 64\]\]"):
        check_model_fit("CornerNet_Saccade", db)


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown model 'CornerNet_Huge'; valid model names"):
        check_model_fit("CornerNet_Huge", tiny())


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.json")))
def test_shipped_configs_fit_their_models(name):
    system, db = load_config(name)
    check_model_fit(system.model_name, db)


# ------------------------------------------------- the rule against a forward pass (oracle)

def meta_forward_sizes(model: torch.nn.Module, size: list[int]) -> tuple[list, list]:
    """What the backbone really makes of an input `size`, on the meta device: the output map's
    [height, width] and each attention map's of the last stack."""
    with torch.no_grad():
        cnvs, merges = model.eval().hg(torch.empty(1, 3, *size, device="meta"))
    atts = [list(level.shape[-2:]) for level in merges[-1][model.up_start:]]
    return list(cnvs[-1].shape[-2:]), atts if model.with_att else []


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.json")))
@pytest.mark.slow  # 6 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_size_rule_is_what_the_forward_pass_makes(name):
    """For every shipped config, the rule read from the model's structure gives the output and
    attention sizes a meta-device forward gives, at the config's input size and at sides next
    to it; sides the rule refuses make the forward fail."""
    system, db = load_config(name)
    with torch.device("meta"):
        model = build_model(system.model_name, db["categories"])
    rule = size_rule(model)
    assert rule == model_size_rule(system.model_name)
    height, width = db["input_size"]
    for size in ([height, width], [height + 1, width], [height, rule.multiple - rule.stride + 1],
                 [height, rule.multiple], [height, rule.multiple - rule.stride]):
        if rule.fits(size[0]) and rule.fits(size[1]):
            assert meta_forward_sizes(model, size) == (rule.output_size(size),
                                                       rule.att_sizes(size)), size
        else:
            with pytest.raises(RuntimeError):
                meta_forward_sizes(model, size)


@pytest.mark.slow  # 8 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_size_rule_decides_every_side_as_the_forward_pass_does():
    """Tiny (stride 4, 3 levels: sides in 29..32, 61..64, ...) for every side up to 130."""
    with torch.device("meta"):
        model = build_model("CornerNet_Tiny", 2)
    rule = size_rule(model)
    assert (rule.stride, rule.multiple, rule.att_levels) == (4, 32, ())
    fitting = []
    for side in range(1, 131):
        with torch.no_grad():
            pre = model.hg.pre(torch.empty(1, 3, 32, side, device="meta")).shape[-1]
        try:
            out, _ = meta_forward_sizes(model, [32, side])
        except RuntimeError:
            continue
        # A side the hourglass halves to 1 broadcasts back to 2 in a merge: no fit either.
        if out[1] == pre:
            fitting.append(side)
            assert out == [8, rule.output(side)]
    assert fitting == [side for side in range(1, 131) if rule.fits(side)]
    assert fitting == [*range(29, 33), *range(61, 65), *range(93, 97), *range(125, 129)]


def test_size_rules_of_the_models():
    assert model_size_rule("CornerNet") == SizeRule(4, 5)
    assert model_size_rule("CornerNet_Squeeze") == SizeRule(8, 4)
    assert model_size_rule("CornerNet_Saccade") == SizeRule(4, 3, (0, 1, 2))
    assert SizeRule.from_meta(SizeRule(8, 4).as_meta()) == SizeRule(8, 4)


def test_a_train_start_check_runs_no_forward_pass(monkeypatch):
    """The check at start reads the rule; the backbone is never run."""
    from core.models.py_utils import modules

    def refuse(*args, **kwargs):
        raise AssertionError("forward pass at start")

    monkeypatch.setattr(modules.hg, "forward", refuse)
    system, db = load_config("CornerNet")
    check_model_fit(system.model_name, db)


# ------------------------------------------------------------------------ snapshot configs
