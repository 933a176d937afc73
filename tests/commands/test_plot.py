"""tools/plot_metrics.py: curves from metrics.jsonl, also while the run is still writing it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cv2
import pytest
from _inproc import run_script

REPO = Path(__file__).resolve().parents[2]
from cornernet.commands import plot as plot_metrics

TERMS = ["focal", "pull", "push", "off"]
PANEL_PIXELS = (300, 900)  # PANEL_INCHES * DPI: (height, width) of one panel


def training_line(iteration: int) -> dict:
    """What train.py writes every display interval (values chosen to be exact in binary)."""
    return {"iteration": iteration, "loss": 8.0 / iteration, "focal": 4.0 / iteration,
            "pull": 0.5, "push": 0.25, "off": 1.0, "terms": TERMS, "lr": 0.00025,
            "grad_norm": 3.5, "images_per_s": 40.0, "data_wait": 0.125, "skipped_images": 0,
            "dropped_objects": 2, "time": 1.5 * iteration}


def evaluation(iteration: int, ap: float) -> dict:
    return {"iteration": iteration, "AP": ap, "AP50": ap + 0.25, "AP75": ap - 0.125,
            "APs": -1.0, "APm": ap, "APl": ap}


def write(path: Path, records: list[dict], tail: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def image_shape(path: Path) -> tuple[int, ...]:
    image = cv2.imread(str(path))
    assert image is not None, f"{path} does not decode"
    return image.shape


def test_a_last_line_cut_mid_write_is_left_out(tmp_path):
    records = [training_line(10), training_line(20)]
    cut = json.dumps(training_line(30))[:40]
    path = write(tmp_path / "metrics.jsonl", records, tail=cut)
    assert plot_metrics.read_metrics(path) == records


def test_a_damaged_line_is_left_out_and_named_once_as_the_trainer_does(tmp_path, capsys):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(json.dumps(training_line(10)).encode() + b"\n{oops\n\xff\xfe\n"
                     + json.dumps(training_line(20)).encode() + b"\n")
    assert plot_metrics.read_metrics(path) == [training_line(10), training_line(20)]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "left out 2 damaged lines (the first is line 2)" in err


def test_selects_losses_lr_and_ap_series_with_their_values():
    records = [training_line(10), training_line(20), evaluation(20, 0.5),
               training_line(40), {**training_line(50), "val_loss": 2.0},
               {**evaluation(50, 0.625), "AP75": -1.0}]
    curves = plot_metrics.select_curves(records, Path("m.jsonl"), print)
    assert list(curves.losses) == ["loss", *TERMS, "val_loss"]
    assert curves.losses["loss"] == ([10, 20, 40, 50], [0.8, 0.4, 0.2, 0.16])
    assert curves.losses["focal"] == ([10, 20, 40, 50], [0.4, 0.2, 0.1, 0.08])
    assert curves.losses["val_loss"] == ([50], [2.0])
    assert curves.lr == ([10, 20, 40, 50], [0.00025] * 4)
    assert curves.ap == {"AP": ([20, 50], [0.5, 0.625]), "AP50": ([20, 50], [0.75, 0.875]),
                         "AP75": ([20], [0.375])}  # COCO's -1 (not computed) is left out
    assert curves.last_iteration == 50


def test_no_ap_series_before_the_first_evaluation():
    curves = plot_metrics.select_curves([training_line(10)], Path("m.jsonl"), print)
    assert curves.ap == {}


def test_an_iteration_written_twice_keeps_its_last_value():
    records = [training_line(10), training_line(20), {**training_line(20), "loss": 7.0}]
    curves = plot_metrics.select_curves(records, Path("m.jsonl"), print)
    assert curves.losses["loss"] == ([10, 20], [0.8, 7.0])


def test_log_axis_only_for_positive_values_spanning_the_decades():
    assert plot_metrics.spans_decades([([1, 2], [10.0, 0.1])], 2)
    assert not plot_metrics.spans_decades([([1, 2], [10.0, 0.2])], 2)
    assert not plot_metrics.spans_decades([([1, 2], [10.0, 0.0])], 1)  # a zero term


def test_writes_a_png_beside_the_metrics_with_one_panel_per_kind(tmp_path):
    path = write(tmp_path / "run" / "metrics.jsonl",
                 [training_line(10), training_line(20), evaluation(20, 0.5)])
    assert plot_metrics.main([str(path)]) == 0
    height, width = PANEL_PIXELS
    assert image_shape(tmp_path / "run" / "metrics.png") == (3 * height, width, 3)
    write(path, [training_line(10), training_line(20)])  # no evaluation: no AP panel
    out = tmp_path / "other.png"
    assert plot_metrics.main([str(path), "--out", str(out)]) == 0
    assert image_shape(out) == (2 * height, width, 3)


def test_regenerated_from_a_file_still_being_written(tmp_path):
    path = write(tmp_path / "metrics.jsonl", [training_line(10)])
    assert plot_metrics.main([str(path)]) == 0
    first = (tmp_path / "metrics.png").read_bytes()
    write(path, [training_line(10), training_line(20), evaluation(20, 0.5)],
          tail=json.dumps(training_line(30))[:25])
    assert plot_metrics.main([str(path)]) == 0
    assert (tmp_path / "metrics.png").read_bytes() != first
    assert image_shape(tmp_path / "metrics.png")[0] == 3 * PANEL_PIXELS[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "metrics.png"]


@pytest.mark.parametrize("content", ["", json.dumps(evaluation(20, 0.5)) + "\n"],
                         ids=["empty", "evaluation only"])
def test_a_file_without_training_lines_is_a_one_line_error(tmp_path, capsys, content):
    path = tmp_path / "metrics.jsonl"
    path.write_text(content)
    assert plot_metrics.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no training line" in err and str(path) in err
    assert not (tmp_path / "metrics.png").exists()


def test_without_matplotlib_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    path = write(tmp_path / "metrics.jsonl", [training_line(10)])
    assert plot_metrics.main([str(path)]) == 2
    assert capsys.readouterr().err == ("error: plotting needs matplotlib, a dependency this "
                                       "environment lacks: pip install matplotlib\n")


def test_command_line_finds_a_configs_metrics_under_the_cache_dir(tmp_path):
    """In this process; plot_metrics.py's real process is test_scripts' smoke run."""
    write(tmp_path / "nnet" / "CornerNet_Tiny" / "metrics.jsonl", [training_line(10)])
    done = run_script("tools/plot_metrics.py", "CornerNet_Tiny", "--cache-dir", tmp_path)
    assert done.returncode == 0, done.stderr
    assert image_shape(tmp_path / "nnet" / "CornerNet_Tiny" / "metrics.png")[0] == 600


def test_missing_file_and_misplaced_cache_dir_are_usage_errors(tmp_path, capsys):
    assert plot_metrics.main([str(tmp_path / "metrics.jsonl")]) == 2
    assert "no metrics file at" in capsys.readouterr().err
    path = write(tmp_path / "metrics.jsonl", [training_line(10)])
    assert plot_metrics.main([str(path), "--cache-dir", str(tmp_path)]) == 2
    assert "--cache-dir goes with a config name" in capsys.readouterr().err


def test_a_line_whose_terms_are_no_list_is_plotted_without_them(tmp_path, capsys):
    lines = [training_line(10), {**training_line(20), "terms": 5}]
    path = write(tmp_path / "metrics.jsonl", lines)
    assert plot_metrics.main([str(path)]) == 0
    err = capsys.readouterr().err
    assert "iteration 20: \"terms\" is 5, not a list of names" in err
    assert image_shape(tmp_path / "metrics.png")[:2] == (2 * PANEL_PIXELS[0], PANEL_PIXELS[1])


def test_the_command_line_s_defaults_are_the_options_declared_ones():
    parsed = plot_metrics.parse_args(["run/metrics.jsonl"])
    assert parsed == plot_metrics.PlotOptions(target="run/metrics.jsonl")
    assert (parsed.out, parsed.cache_dir, parsed.debug) == (None, None, False)
    assert plot_metrics.parse_args(["Cfg", "--out", "a.png", "--cache-dir", "c"]) == \
        plot_metrics.PlotOptions(target="Cfg", out=Path("a.png"), cache_dir="c")


def test_no_target_is_the_usage_error_it_was(capsys):
    assert plot_metrics.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: cornernet plot")
    assert "the following arguments are required: target" in err
