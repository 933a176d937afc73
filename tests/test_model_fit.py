"""core.models.fit: input and output sizes a model cannot take are refused, naming the sizes
that fit."""

from __future__ import annotations

import pytest

from core.config import CONFIG_DIR, ConfigError, check_db_config, load_config
from core.models.fit import check_model_fit
from tests.test_config_rules import one_line


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


# ------------------------------------------------------------------------ snapshot configs
