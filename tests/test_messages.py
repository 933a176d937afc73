"""Messages a person can act on: a loader's line said once however often a run loads its
split; a JPEG decoder's warning naming its image, once; images that no annotation names
counted; duplicate images with conflicting labels named with their files."""

from __future__ import annotations

from pathlib import Path

import pytest
from _train_helpers import REPO
from test_data_advice import _dataset


def _clipped_in_both_splits(root: Path) -> Path:
    """The 64 px YOLO set of test_data_advice, with one box clipped in each split."""
    data_yaml = _dataset(root, 64, 4, (8, 30))
    for split in ("train", "val"):
        label = root / "labels" / split / f"{split}0.txt"
        label.write_text(label.read_text() + "0 0.95 0.5 0.3 0.3\n")
    return data_yaml


@pytest.mark.slow  # a two-iteration training run with validation and an evaluation, in-process
def test_a_loader_line_is_said_once_in_a_run_that_loads_each_split_three_times(tmp_path):
    from _inproc import run_script

    data_yaml = _clipped_in_both_splits(tmp_path / "ds")
    trained = run_script(REPO / "train.py", "CornerNet_Tiny", "--workers", "1", "--set",
                         "system.dataset=YOLO", f"db.data_yaml={data_yaml}",
                         f"system.cache_dir={tmp_path / 'cache'}",
                         f"system.result_dir={tmp_path / 'results'}", "system.max_iter=2",
                         "system.eval_iter=2", "system.val_iter=1", "system.batch_size=2",
                         "db.input_size=[64,64]", "db.output_sizes=[[16,16]]")
    assert trained.returncode == 0, trained.stderr[-2000:]
    said = trained.stdout + trained.stderr
    for split in ("train", "val"):
        lines = [line for line in said.splitlines() if "clipped to the image" in line
                 and f"labels/{split}/{split}0.txt" in line]
        assert len(lines) == 1, (split, lines)
        assert "clipped to the image (they extended outside it): 1 box(es)" in lines[0]
