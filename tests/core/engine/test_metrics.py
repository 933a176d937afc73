"""The metrics pieces of the training loop: the JSON lines file and its resume rule, the
TensorBoard writer (read back), the one-line notice without tensorboard, throughput counting."""

from __future__ import annotations

import builtins
import json

import pytest

from core.engine.metrics import (
    DataCounts,
    JsonlWriter,
    Metrics,
    Throughput,
    display_line,
    open_metrics,
    read_lines,
    tensorboard_writer,
)


def iterations(path):
    return [line["iteration"] for line in read_lines(path)]


def test_lines_after_the_resumed_iteration_are_dropped_and_the_file_continues(tmp_path):
    path = tmp_path / "metrics.jsonl"
    first = JsonlWriter(path, start=0)
    for it in range(1, 8):
        first.write(it, {"loss": float(it)})
    first.close()
    with open(path, "a") as handle:
        handle.write('{"iteration": 8, "loss"')  # a line cut by a crash
    second = JsonlWriter(path, start=5)  # resumed from snapshot 5
    for it in range(6, 10):
        second.write(it, {"loss": 10.0 + it})
    second.close()
    assert iterations(path) == list(range(1, 10))
    lines = read_lines(path)
    assert lines[4]["loss"] == 5.0 and lines[5]["loss"] == 16.0
    assert all(json.loads(text) for text in path.read_text().splitlines())


def test_a_run_from_scratch_starts_a_new_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 3, "loss": 1.0}\n')
    JsonlWriter(path, start=0).close()
    assert path.read_text() == ""


def test_metrics_write_once_per_iteration_only_what_was_put(tmp_path):
    path = tmp_path / "metrics.jsonl"
    metrics = Metrics([JsonlWriter(path, start=0)])
    metrics.put(loss=2.0, lr=0.1)
    metrics.put(AP=0.5)
    metrics.write(4)
    metrics.write(5)  # nothing put: no line
    metrics.put(loss=float("nan"))
    metrics.write(6)
    metrics.close()
    assert read_lines(path) == [{"iteration": 4, "loss": 2.0, "lr": 0.1, "AP": 0.5},
                                {"iteration": 6, "loss": "nan"}]


def test_tensorboard_events_hold_the_values_written(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = tensorboard_writer(tmp_path / "tb", start=0, log=print)
    for it, loss in [(1, 3.5), (2, 2.25), (3, 1.125)]:
        writer.write(it, {"loss": loss, "terms": ["focal"], "lr": 0.001 * it})
    writer.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 3.5), (2, 2.25),
                                                                   (3, 1.125)]
    assert "terms" not in events.Tags()["scalars"]


def test_without_tensorboard_one_line_says_it_is_off_only_where_asked(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith(("torch.utils.tensorboard", "tensorboard")):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    said = []
    assert tensorboard_writer(tmp_path / "tb", 0, said.append) is None
    assert len(said) == 1 and "TensorBoard is off" in said[0] and "[tensorboard]" in said[0]
    said.clear()  # the default run: TensorBoard is an extra nobody asked for, so no word
    assert tensorboard_writer(tmp_path / "tb", 0, said.append, asked=False) is None
    metrics = open_metrics(tmp_path, 0, None, said.append, True)
    assert said == [] and [type(w).__name__ for w in metrics.writers] == ["JsonlWriter",
                                                                          "BarWriter"]
    metrics.close()
    open_metrics(tmp_path, 0, None, said.append, True, tensorboard=True).close()
    assert len(said) == 1 and said[0].startswith("TensorBoard is off (ModuleNotFoundError")


def test_throughput_counts_images_and_wait_per_window(monkeypatch):
    clock = iter([100.0, 104.0, 110.0])
    monkeypatch.setattr("core.engine.metrics.time.perf_counter", lambda: next(clock))
    speed = Throughput()  # t = 100
    speed.add(8, 0.5)
    speed.add(8, 1.5)
    assert speed.read() == {"images_per_s": 4.0, "data_wait": 0.5}  # t = 104
    speed.add(12, 0.0)
    assert speed.read() == {"images_per_s": 2.0, "data_wait": 0.0}  # t = 110


def test_data_counts_add_up_and_name_skipped_images():
    said = []
    counts = DataCounts(said.append)
    counts.add({"skipped": ["a.jpg"], "dropped_objects": 3})
    counts.add({"skipped": [], "dropped_objects": 2})
    assert counts.values() == {"skipped_images": 1, "dropped_objects": 5}
    assert said[0] == "skipped unreadable image a.jpg"
    assert len(said) == 2 and said[1].startswith("3 objects beyond db.max_objects")  # once


def test_display_line():
    line = display_line(7, {"loss": 1.23456789, "terms": ["focal"], "focal": 1.0, "lr": 0.001,
                            "grad_norm": 2.5, "images_per_s": 10.0, "data_wait": 0.25})
    assert line.startswith("iteration 7: loss 1.2345679 (focal 1.0000), lr 0.001, grad norm 2.5")
    assert line.endswith("waiting for data 25.0%")


@pytest.mark.parametrize("failure", [AttributeError("module 'numpy' has no attribute 'object'"),
                                     TypeError("Descriptors cannot be created directly")])
def test_a_tensorboard_that_fails_on_import_turns_it_off_in_one_line(tmp_path, monkeypatch,
                                                                     failure):
    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name.startswith(("torch.utils.tensorboard", "tensorboard")):
            raise failure
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken)
    said = []
    assert tensorboard_writer(tmp_path / "tb", 0, said.append) is None
    assert len(said) == 1 and "\n" not in said[0]
    assert said[0].startswith(f"TensorBoard is off ({type(failure).__name__}: {failure})")
    assert "metrics.jsonl" in said[0]
