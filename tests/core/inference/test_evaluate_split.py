"""Evaluation in core (core/inference/evaluate.py): the results folder is checked and locked
before the network is opened, and the run ends in a report of what was evaluated, resumed and
written, which the command only prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _tiny_coco import make_tiny_coco

from core.errors import ConfigError, UsageError
from core.inference.evaluate import JOURNAL, EvaluationReport, evaluate_split
from core.inference.journal import Journal
from core.utils import lock
from cornernet.commands import test


def never_opened():
    pytest.fail("the network was opened before the results folder was checked")


def evaluate(folder: Path, log=print) -> EvaluationReport:
    """evaluate_split up to its checks: no dataset, config or network is reached."""
    return evaluate_split(None, None, folder, "val", never_opened, images=None,
                          batch_size=None, vis=0, vis_thresh=0.3, backend="none", resume=True,
                          sync_timing=False, threads=None, results_name="results.json",
                          log=log)


def test_a_results_folder_in_use_is_refused_before_the_network_is_opened(tmp_path):
    held = lock.acquire(tmp_path, print)
    try:
        with pytest.raises(ConfigError, match="in use by the run of pid .* use another --suffix"):
            evaluate(tmp_path)
        assert held.is_file()  # the other run's lock stays
    finally:
        lock.release(held)
    assert not held.exists()


def test_an_unwritable_results_folder_is_one_line_before_the_network_is_opened(tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(UsageError, match="cannot write results to .*a_file/results"):
        evaluate(tmp_path / "a_file" / "results")


def test_the_lock_is_released_when_the_run_fails(tmp_path):
    with pytest.raises(AttributeError):  # no dataset: fails right after taking the lock
        evaluate(tmp_path)
    assert not (tmp_path / lock.NAME).exists()
    assert lock.acquire(tmp_path, print)  # free for the next run
    lock.release(tmp_path / lock.NAME)


@pytest.mark.slow  # two evaluations of a few images: 4-8 s of CPU
def test_the_report_says_what_was_evaluated_resumed_and_written(coco128, tmp_path, monkeypatch):
    root = make_tiny_coco(coco128, tmp_path, test_scales=[0.5])
    options = test.parse_args(["CocoTiny", "--testiter", "0", "--device", "cpu", "--images", "4",
                               "--config-dir", str(root / "configs")])
    folder = root / "results" / "CocoTiny" / "0" / "val"
    monkeypatch.setattr(Journal, "remove", Journal.close)  # the journal of a run cut short
    first = test.evaluate(options, log=lambda line: None)
    monkeypatch.undo()
    assert (first.folder, first.results) == (folder, folder / "results.json")
    assert (first.images, first.resumed, first.unreadable) == (4, 0, 0)
    assert first.model_file == root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.pkl"
    assert first.metrics["AP"] == json.loads((folder / "metrics.json").read_text())[
        "metrics"]["AP"]
    assert first.summary.startswith("4 images in ") and "images/s" in first.summary
    journal = folder / JOURNAL
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join(lines[:3]) + b"\n")  # the header and two images

    said: list[str] = []
    again = test.evaluate(options, log=said.append)
    assert (again.images, again.resumed) == (4, 2)
    assert any(line.startswith("resuming: 2 images already done") for line in said)
    assert again.metrics == first.metrics
    assert not journal.exists()  # a finished run removes its journal
