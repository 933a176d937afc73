"""tools/analyze_results.py on a test.py results folder of coco128 (real images).

test.py runs in the test process; the breakdown is analyze_results.py's one real process
(`slow`), its one-line mistake runs in-process."""

from __future__ import annotations

import json

import pytest
from _tiny_coco import inproc, make_tiny_coco, run


@pytest.mark.slow  # analyze_results.py's real process
def test_writes_the_breakdown_the_matrix_and_its_picture(coco128, tmp_path):
    root = make_tiny_coco(coco128, tmp_path)
    tested = inproc("test.py", "CocoTiny", "--config-dir", root / "configs", "--testiter", 0,
                    "--images", 6, "--device", "cpu")
    assert tested.returncode == 0, tested.stderr
    done = run("tools/analyze_results.py", "CocoTiny", "--config-dir", root / "configs",
               "--testiter", 0, "--score-thresh", 0.0)
    assert done.returncode == 0, done.stderr
    folder = root / "results" / "CocoTiny" / "0" / "val"
    analysis = json.loads((folder / "breakdown.json").read_text())
    metrics = json.loads((folder / "metrics.json").read_text())["metrics"]
    assert abs(analysis["overall"]["C50"] - metrics["AP50"]) <= 1e-6 * max(metrics["AP50"], 1e-3)
    assert abs(analysis["overall"]["C75"] - metrics["AP75"]) <= 1e-6 * max(metrics["AP75"], 1e-3)
    people = next(row for row in analysis["per_class"] if row["name"] == "person")
    assert people["objects"] > 0 and people["FN"] == 1.0
    steps = [people[s] for s in ("C75", "C50", "Loc", "Sim", "Oth", "BG", "FN")]
    assert steps == sorted(steps)  # forgiving more errors never lowers the curve
    confusion = json.loads((folder / "confusion.json").read_text())
    counts = confusion["counts"]
    assert len(counts) == 81 and confusion["rows"][-1] == "background"
    # every object of the 6 images is either found (a row entry) or missed (last column)
    assert sum(map(sum, counts[:-1])) == sum(r["objects"] for r in analysis["per_class"])
    assert (folder / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "overall" in done.stdout and "person" in done.stdout
    assert "label control: AP50" in done.stdout
    assert set(analysis["shuffled_labels"]) == set(analysis["overall"])


def test_a_missing_results_folder_is_one_line_naming_test_py(coco128, tmp_path):
    root = make_tiny_coco(coco128, tmp_path)
    done = inproc("tools/analyze_results.py", "CocoTiny", "--config-dir", root / "configs",
                  "--testiter", 7)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "python test.py CocoTiny --testiter 7" in \
        done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_split_without_boxes_says_so_not_to_run_the_test_again(coco128, tmp_path):
    # test on an image-info file (no annotations, as test-dev) writes results.json only;
    # analyze results then says the split has no boxes, not "run test.py first".
    root = make_tiny_coco(coco128, tmp_path)
    content = json.loads((coco128 / "annotations" / "instances_coco128_val.json").read_text())
    info = {key: value for key, value in content.items() if key != "annotations"}
    (tmp_path / "info.json").write_text(json.dumps(info))
    config = json.loads((root / "configs" / "CocoTiny.json").read_text())
    config["db"]["annotation_files"]["val"] = str(tmp_path / "info.json")
    (root / "configs" / "CocoTiny.json").write_text(json.dumps(config))
    configs = str(root / "configs")
    tested = inproc("test.py", "CocoTiny", "--testiter", 0, "--config-dir", configs, "--device",
                    "cpu", "--images", 2)
    assert tested.returncode == 0, tested.stderr
    assert "evaluation skipped: this split has no boxes" in tested.stdout
    results = root / "results" / "CocoTiny" / "0" / "val" / "results.json"
    found = len(json.loads(results.read_text()))
    analyzed = inproc("tools/analyze_results.py", "CocoTiny", "--testiter", 0, "--config-dir",
                      configs)
    assert analyzed.returncode == 2
    assert analyzed.stderr.strip() == (
        f"error: split 'val' has no boxes (an image-info file): test wrote its {found} "
        f"detections to {results} for an evaluation server, and there is nothing here to "
        "analyze them against")


def test_the_command_line_s_defaults_are_the_options_declared_ones():
    from cornernet.commands.analyze_results import AnalyzeResultsOptions, parse_args

    parsed = parse_args(["CocoTiny"])
    assert parsed == AnalyzeResultsOptions(cfg_file="CocoTiny")
    assert (parsed.testiter, parsed.split, parsed.suffix, parsed.score_thresh,
            parsed.iou_thresh) == (None, "validation", None, 0.3, 0.5)
    assert parse_args(["CocoTiny", "--testiter", "best", "--split", "training",
                       "--score-thresh", "0"]) == AnalyzeResultsOptions(
        cfg_file="CocoTiny", testiter="best", split="training", score_thresh=0.0)


@pytest.mark.parametrize("argv, message", [
    (["--score-thresh", "nan"],
     "argument --score-thresh: expected a number from 0 to 1, got 'nan'"),
    (["--split", "train"],
     "argument --split: invalid choice: 'train' (choose from 'training', 'validation', 'testing')"),
    # results folders are named by iteration or 'best': a snapshot file names none
    (["--testiter", "CocoTiny_0.pkl"],
     "argument --testiter: expected an iteration number or 'best', got 'CocoTiny_0.pkl'"),
])
def test_a_usage_mistake_is_the_usage_error_it_was(argv, message, capsys):
    from cornernet.commands.analyze_results import main

    assert main(["CocoTiny", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: cornernet analyze results") and message in err
