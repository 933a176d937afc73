"""The fault suite, continued: where many processes, many runs and evaluations meet (issue 21).

Each case runs train.py (or test.py) as a real subprocess and checks the exit status, the one
line, and what is left on disk and in the process table. The README's reliability table names
these cases; keep the two in step.
"""

from __future__ import annotations

import torch

from tests._train_helpers import run_train, write_config
from tests.test_faults import NAME, cache, load


def make_only_best(tmp_path, coco128, iteration=2, ap=0.25):
    """A config whose snapshot folder holds nothing trained but `<Cfg>_best.pkl`."""
    config_dir = write_config(tmp_path, coco128, max_iter=iteration, snapshot=iteration,
                              val_iter=0)
    assert run_train(config_dir).returncode == 0
    numbered = cache(tmp_path) / f"{NAME}_{iteration}.pkl"
    snapshot = load(numbered)
    snapshot["best"] = {"iteration": iteration, "AP": ap}
    torch.save(snapshot, cache(tmp_path) / f"{NAME}_best.pkl")
    for path in cache(tmp_path).glob(f"{NAME}_[0-9]*.pkl"):
        path.unlink()
    return config_dir


def test_a_fresh_start_or_iter_latest_moves_the_only_best_snapshot_aside(tmp_path, coco128):
    """The README promises the best snapshot is never removed: a run that cannot count it as
    its own (it starts before its iteration) moves it aside, says where, and keeps it loadable."""
    config_dir = make_only_best(tmp_path, coco128)
    original = load(cache(tmp_path) / f"{NAME}_best.pkl")["model"]
    for k, extra in enumerate([("--iter", "latest"), ()], start=1):
        if k == 2:  # a second best, as the first run would have left, for the fresh start
            (cache(tmp_path) / f"{NAME}_best.aside1.pkl").rename(
                cache(tmp_path) / f"{NAME}_best.pkl")
            (cache(tmp_path) / f"{NAME}_best.aside1.pkl").write_bytes(b"kept")
        result = run_train(config_dir, *extra, "--initialize")
        assert result.returncode == 0, result.stdout + result.stderr
        aside = cache(tmp_path) / f"{NAME}_best.aside{k}.pkl"
        said = [line for line in result.stdout.splitlines() if "aside" in line]
        assert len(said) == 1 and f"{NAME}_best.pkl (iteration 2, AP 0.2500)" in said[0]
        assert aside.name in said[0] and "nothing was deleted" in said[0]
        assert not (cache(tmp_path) / f"{NAME}_best.pkl").exists()
        moved = load(aside)
        assert moved["best"] == {"iteration": 2, "AP": 0.25}
        assert all(torch.equal(moved["model"][key], value) for key, value in original.items())
    assert (cache(tmp_path) / f"{NAME}_best.aside1.pkl").read_bytes() == b"kept"
