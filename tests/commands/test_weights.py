"""`train --weights FILE`: fine-tuning from a 4-class CornerNet_Tiny snapshot (the README job's
model) or an official state dict on a 2-class YOLO set. Tensors of the same key and shape load
bit for bit, the class heads start as a fresh model's under the run's seed and are named with
their shapes, and the fine-tuning learning rate and warm-up are stated in one line."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
from _train_helpers import REPO

from core.config import ConfigError, load_config
from core.config.fine_tune import fine_tune_changes
from core.dbs import datasets
from core.engine.build import build
from core.engine.options import TrainOptions
from core.nnet.py_factory import NetworkFactory
from core.utils import lock

HEADS = ["tl_heats.0.1.weight", "tl_heats.0.1.bias", "br_heats.0.1.weight", "br_heats.0.1.bias"]


def _two_class_yolo(root: Path) -> Path:
    """A YOLO set of 2 classes: 4 train and 2 val 96x96 images, 1-3 boxes each, seeded."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 4), ("val", 2)):
        (root / "labels" / split).mkdir(parents=True)
        (root / "images" / split).mkdir(parents=True)
        for k in range(count):
            cv2.imwrite(str(root / "images" / split / f"{split}{k}.jpg"),
                        rng.integers(0, 255, (96, 96, 3), dtype=np.uint8))
            lines = [f"{rng.integers(0, 2)} {rng.uniform(0.3, 0.7):.4f} "
                     f"{rng.uniform(0.3, 0.7):.4f} 0.3 0.25" for _ in range(rng.integers(1, 4))]
            (root / "labels" / split / f"{split}{k}.txt").write_text("\n".join(lines) + "\n")
    (root / "data.yaml").write_text("train: images/train\nval: images/val\nnames: [cat, dog]\n")
    return root / "data.yaml"


def _four_class(tmp_path: Path, *more: str) -> NetworkFactory:
    """The README job's CornerNet_Tiny (4 classes), its snapshots in tmp_path/four."""
    system, db_config = load_config("CornerNet_Tiny", overrides=[
        f"system.cache_dir={tmp_path / 'four'}", *more])
    torch.manual_seed(7)
    return NetworkFactory(system, SimpleNamespace(configs=db_config), device="cpu")


def _four_class_snapshot(tmp_path: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """Snapshot 500 of a 4-class CornerNet_Tiny whose every tensor differs from a fresh
    model's, as trained ones do: (its weights, its file)."""
    nnet = _four_class(tmp_path)
    with torch.no_grad():
        for value in nnet.model.state_dict().values():
            if value.is_floating_point():
                value.add_(torch.randn_like(value) * 0.01 + 0.5)
    return nnet.model.state_dict(), nnet.save_params(500)


def _fine_tune(tmp_path: Path, weights: Path, *more: str) -> tuple[list[str], torch.nn.Module]:
    """train's start (load_config with --weights, then build) on the 2-class set; the lines it
    said and the model it would train."""
    overrides = ("system.dataset=YOLO", f"db.data_yaml={_two_class_yolo(tmp_path / 'yolo')}",
                 "db.categories=2", f"system.cache_dir={tmp_path / 'cache'}",
                 f"system.result_dir={tmp_path / 'results'}", "system.eval_iter=0",
                 "system.val_iter=0", "system.batch_size=2", "system.batch_pictures=false",
                 *more)
    options = TrainOptions(cfg_file="CornerNet_Tiny", workers=1, overrides=overrides,
                           weights=str(weights))
    system, db_config = load_config("CornerNet_Tiny", overrides=list(overrides),
                                    weights=options.weights)
    said: list[str] = []
    try:
        run = build(options, system, db_config, 0, 1, "cpu", False, said.append)
    finally:
        lock.release_all()
    return said, run.nnet.model


def _fresh_two_class(tmp_path: Path) -> dict[str, torch.Tensor]:
    """A fresh 2-class model's tensors, built under the run's seed as train builds it."""
    system, db_config = load_config("CornerNet_Tiny", overrides=[
        "system.dataset=YOLO", f"db.data_yaml={tmp_path / 'yolo' / 'data.yaml'}",
        "db.categories=2", f"system.cache_dir={tmp_path / 'fresh'}"])
    torch.manual_seed(system.seed)
    db = datasets["YOLO"](db_config, split="train", sys_config=system)
    return NetworkFactory(system, db, device="cpu").model.state_dict()


@pytest.mark.parametrize("form", ["snapshot", "best", "official"])
def test_weights_of_4_classes_load_bit_for_bit_and_the_2_class_heads_start_fresh(tmp_path,
                                                                                 form):
    source, path = _four_class_snapshot(tmp_path)
    if form == "best":  # what a run with eval_iter keeps: the same snapshot under _best
        path = path.rename(path.with_name("CornerNet_Tiny_best.pkl"))
    if form == "official":  # CornerNet-Lite's own files: a plain state dict, keys `module.`
        path = tmp_path / "official.pkl"
        torch.save({f"module.{k}": v for k, v in source.items()}, path)
    said, model = _fine_tune(tmp_path, path)
    loaded = model.state_dict()
    fresh = _fresh_two_class(tmp_path)
    for key, value in loaded.items():
        if key in HEADS:
            assert torch.equal(value, fresh[key]), key
            assert not torch.equal(value[:2], source[key][:2]), key
        else:
            assert torch.equal(value, source[key]), key
    what = "an official state dict" if form == "official" else "snapshot 500"
    assert (f"weights {path} ({what}): loaded 266 of the model's 270 tensors; re-initialised 4 "
            f"tensors (class count 4 -> 2): tl_heats.0.1.weight (2,32,1,1), tl_heats.0.1.bias "
            f"(2), br_heats.0.1.weight (2,32,1,1), br_heats.0.1.bias (2)") in said
    assert (f"fine-tuning from {path}: learning rate 0.0001, warm-up 100 iterations, frozen: "
            f"nothing") in "\n".join(said)


def test_a_snapshot_with_averaged_weights_gives_the_average(tmp_path):
    nnet = _four_class(tmp_path, "system.ema_decay=0.9")
    average = nnet.ema.averaged.module
    with torch.no_grad():
        for value in average.state_dict().values():
            if value.is_floating_point():
                value.add_(0.25)
    path = nnet.save_params(9)
    said, model = _fine_tune(tmp_path, path)
    assert torch.equal(model.state_dict()["hg.pre.0.conv.weight"],
                       average.state_dict()["hg.pre.0.conv.weight"])
    assert any(line.startswith(f"weights {path} (snapshot 9, its averaged weights)")
               for line in said)


def test_set_wins_over_the_fine_tuning_defaults(tmp_path):
    path = tmp_path / "w.pkl"
    path.write_bytes(b"")
    given = {"learning_rate": 0.02}
    changes = fine_tune_changes(path, 0.001, 0, 1500, given)
    assert changes == {"pretrain": str(path.resolve()), "warmup_iters": 100}
    assert fine_tune_changes(path, 0.001, 0, 300, {})["warmup_iters"] == 30
    assert fine_tune_changes(path, 0.001, 500, 300, {})["warmup_iters"] == 500  # the config's
    assert fine_tune_changes(path, 0.001, 0, 300, {})["learning_rate"] == pytest.approx(0.0001)
    system, _ = load_config("CornerNet_Tiny", overrides=["system.learning_rate=0.02"],
                            weights=str(path))
    assert (system.learning_rate, system.warmup_iters) == (0.02, 100)


def test_a_missing_file_or_a_second_pretrain_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="--weights nothing.pkl: no such file"):
        load_config("CornerNet_Tiny", weights="nothing.pkl")
    path = tmp_path / "w.pkl"
    path.write_bytes(b"")
    with pytest.raises(ConfigError, match="both name the starting weights; give one"):
        load_config("CornerNet_Tiny", overrides=["system.pretrain=x.pkl"], weights=str(path))


def test_weights_of_another_model_are_refused(tmp_path):
    system, _ = load_config("CornerNet_Tiny")
    other = system.replace(model="CornerNet_Squeeze")
    path = tmp_path / "squeeze.pkl"
    torch.save({"format": "cornernet-lite-modern/1", "iteration": 1,
                "config": {"system": dict(other.full)}, "model": {}}, path)
    with pytest.raises(ConfigError, match="holds a CornerNet_Squeeze, this config builds "
                                          "CornerNet_Tiny"):
        _fine_tune(tmp_path, path)
    torch.save({"module.backbone.weight": torch.zeros(1)}, path)
    with pytest.raises(ConfigError, match="only 0 of the 270 tensors of CornerNet_Tiny"):
        _fine_tune(tmp_path / "again", path)


def test_train_py_takes_weights(tmp_path):
    from _inproc import run_script

    _, path = _four_class_snapshot(tmp_path)
    data = _two_class_yolo(tmp_path / "yolo")
    result = run_script("train.py", "CornerNet_Tiny", "--workers", "1", "--weights", path,
                        "--set", "system.dataset=YOLO", f"db.data_yaml={data}",
                        "db.categories=2", f"system.cache_dir={tmp_path / 'cache'}",
                        f"system.result_dir={tmp_path / 'results'}", "system.max_iter=2",
                        "system.eval_iter=0", "system.val_iter=0", "system.batch_size=2",
                        "system.display=1", "system.batch_pictures=false", cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "re-initialised 4 tensors (class count 4 -> 2)" in result.stdout
    assert f"fine-tuning from {path}: learning rate 0.0001, warm-up 1 iterations" \
        in result.stdout


@pytest.mark.slow
def test_the_api_takes_weights_beside_data(tmp_path, capsys):
    """`cornernet.train(..., data=, weights=)` is `--data ... --weights ...`: the classes come
    from the export, the heads start fresh and the rest loads."""
    import cornernet

    _, path = _four_class_snapshot(tmp_path)
    data = _two_class_yolo(tmp_path / "yolo")
    done = cornernet.train("CornerNet_Tiny", workers=1, data=data, name="tuned", weights=path,
                           fit=False, cache_dir=str(tmp_path / "cache"),
                           result_dir=str(tmp_path / "results"), max_iter=2, eval_iter=0,
                           val_iter=0, batch_size=2, batch_pictures=False)
    said = capsys.readouterr().out
    assert done.status == 0 and done.iteration == 2
    assert [p.name for p in done.snapshots] == ["tuned_2.pkl"]
    assert "re-initialised 4 tensors (class count 4 -> 2)" in said
    assert "loaded 266 of the model's 270 tensors" in said


@pytest.mark.slow
def test_set_wins_over_the_fine_tuning_defaults_with_data_and_is_applied_once(tmp_path,
                                                                               capsys):
    """`--data` with `--weights`: the user's --set learning rate is the run's, recorded as it
    is, and resuming the run by name with the same --weights lowers nothing again."""
    import json

    from cornernet.commands import train as command

    _, path = _four_class_snapshot(tmp_path)
    data = _two_class_yolo(tmp_path / "yolo")
    common = ["--workers", "1", "--weights", str(path), "--set",
              f"system.cache_dir={tmp_path / 'cache'}", f"system.result_dir={tmp_path / 'res'}",
              "system.eval_iter=0", "system.val_iter=0", "system.batch_size=2",
              "system.batch_pictures=false", "system.display=1"]
    first = command.parse_args(["CornerNet_Tiny", "--data", str(data), "--name", "tuned",
                                "--no-fit", *common, "system.max_iter=2",
                                "system.learning_rate=0.005"])
    assert command.run(first) == 0
    record = tmp_path / "cache" / "nnet" / "tuned" / "config.json"
    system = json.loads(record.read_text())["system"]
    assert system["learning_rate"] == 0.005 and system["pretrain"] == str(path.resolve())
    assert f"fine-tuning from {path.resolve()}: learning rate 0.005," in capsys.readouterr().out
    again = command.parse_args(["tuned", "--config-dir", str(tmp_path / "cache" / "nnet"),
                                "--iter", "2", *common, "system.max_iter=3"])
    assert command.run(again) == 0
    assert json.loads(record.read_text())["system"]["learning_rate"] == 0.005
