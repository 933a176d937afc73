"""A log a person can read: the resolved config goes to the run folder with one line on the
screen; the progress bar only on a terminal, a plain progress note on each display line
otherwise."""

from __future__ import annotations

import io
import json

import pytest

from core.engine.metrics import Progress, progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_into_a_pipe_or_file():
    piped = io.StringIO()
    bar = progress_bar(range(1, 11), shown=True, stream=piped)
    for _ in bar:
        pass
    bar.close()
    assert bar.disable and piped.getvalue() == ""


def test_the_bar_on_a_terminal_for_rank_0_only():
    assert not progress_bar(range(3), shown=True, stream=Terminal()).disable
    assert progress_bar(range(3), shown=False, stream=Terminal()).disable


def test_the_progress_note_says_where_and_how_long():
    progress = Progress(start=0, end=1500, bar_drawn=False, clock=iter([100.0, 160.0]).__next__)
    # 300 iterations in 60 s: 1200 more take 240 s
    assert progress.note(300) == "; 300/1500 (20%), about 4 min left"
    assert Progress(start=0, end=10, bar_drawn=True).note(5) == ""


def test_a_resumed_run_counts_its_pace_from_where_it_resumed():
    progress = Progress(start=1000, end=1500, bar_drawn=False, clock=iter([0.0, 10.0]).__next__)
    assert progress.note(1100) == "; 1100/1500 (73%), about 40 s left"


@pytest.mark.slow  # train.py in this process: about 10 s
def test_a_piped_training_log_has_no_config_dump_and_no_redrawn_bar(coco128, tmp_path):
    from _train_helpers import run_train, write_config

    config_dir = write_config(tmp_path, coco128, display=2, max_iter=4, val_iter=0,
                              eval_iter=0, snapshot=4)
    done = run_train(config_dir, inproc=True)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "\r" not in out and "it/s" not in out  # no tqdm bar redrawn into the log
    assert "system config:" not in out and "'batch_size'" not in out
    written = tmp_path / "cache" / "nnet" / "Tiny128" / "config.json"
    assert f"config: {written} " in out
    record = json.loads(written.read_text())
    assert record["system"]["max_iter"] == 4 and record["db"]["categories"] == 80
    assert "iteration 4: loss " in out and "; 4/4 (100%), about 0 s left" in out
    assert len(out.splitlines()) < 20
