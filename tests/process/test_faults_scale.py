"""The fault suite, continued: where many processes, many runs and evaluations meet (issue 21).

Each case runs train.py (or test.py) and checks the exit status, the one line, and what is left
on disk and in the process table. The README's reliability table names these cases; keep the two
in step. Launchers, nodes, signals, kills and the process table need processes of their own (and
are `slow`); the refusals at start and the file cases run train.py in this process
(`run_train(..., inproc=True)`).
"""

from __future__ import annotations

import json
import multiprocessing.util
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest
import torch
from _faults import NAME, cache, load, one_line_error, wait_gone

from core.utils.dist import free_port
from tests._train_helpers import (
    Training,
    alive,
    children,
    cmdline,
    node_cmd,
    of_the_run,
    parent,
    run_train,
    torchrun_cmd,
    write_config,
)


def make_only_best(tmp_path, coco128, iteration=2, ap=0.25):
    """A config whose snapshot folder holds nothing trained but `<Cfg>_best.pkl`."""
    config_dir = write_config(tmp_path, coco128, max_iter=iteration, snapshot=iteration,
                              val_iter=0)
    assert run_train(config_dir, inproc=True).returncode == 0
    numbered = cache(tmp_path) / f"{NAME}_{iteration}.pkl"
    snapshot = load(numbered)
    snapshot["best"] = {"iteration": iteration, "AP": ap}
    torch.save(snapshot, cache(tmp_path) / f"{NAME}_best.pkl")
    for path in cache(tmp_path).glob(f"{NAME}_[0-9]*.pkl"):
        path.unlink()
    return config_dir


@pytest.mark.slow  # three runs in-process, one of two iterations
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
        result = run_train(config_dir, *extra, "--initialize", inproc=True)
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


# Class 3: ranks and nodes that disagree are told at start, and a wait says what it waits for.

SMALL = {"input_size": [64, 64], "output_sizes": [[16, 16]]}


def first_error(output: str) -> str:
    return next((line for line in output.splitlines() if line.startswith("error:")), "")


@pytest.mark.slow
def test_a_rank_outside_the_world_size_is_one_line_before_any_rendezvous(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128)
    t0 = time.monotonic()
    run = Training(config_dir, cmd=node_cmd(config_dir, 2, free_port()))
    status, _, output = run.finish(timeout=60)
    assert status == 2 and time.monotonic() - t0 < 30
    assert output.strip().splitlines() == [
        "error: --rank 2 is outside --world-size 2: node ranks are 0 to 1"]
    assert not run.seen and not cache(tmp_path).exists()


@pytest.mark.slow
def test_nodes_with_different_configs_stop_at_start_naming_the_keys(tmp_path, coco128):
    """Another max_iter deadlocked both nodes until the collective timeout, another learning
    rate trained until the first snapshot: now both nodes end within 60 s, nothing trained."""
    same = {"val_iter": 0, "db": SMALL}
    node0 = write_config(tmp_path / "node0", coco128, max_iter=4, **same)
    node1 = write_config(tmp_path / "node1", coco128, max_iter=8, learning_rate=0.001, **same)
    port, t0 = free_port(), time.monotonic()
    nodes = [Training(c, cmd=node_cmd(c, n, port)) for n, c in ((0, node0), (1, node1))]
    try:
        ends = [node.finish(timeout=60) for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert time.monotonic() - t0 < 60
    for node, (status, _, output) in zip(nodes, ends):
        assert status == 2, output
        assert "Traceback" not in output and "iteration 1:" not in output
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, output
        assert "rank 1 runs another config than rank 0" in errors[0]
        assert "system.learning_rate 0.001 on rank 1, 0.0005 on rank 0" in errors[0]
        assert "system.max_iter 8 on rank 1, 4 on rank 0" in errors[0]
        assert not wait_gone(node.seen, 10)
    for root in ("node0", "node1"):
        assert not list((tmp_path / root / "cache" / "nnet").glob(f"{NAME}/*.pkl"))


@pytest.mark.slow
@pytest.mark.parametrize("present", [0, 1])
def test_a_lonely_node_says_what_it_waits_for_and_gives_up_in_its_own_words(
        tmp_path, coco128, present, capfd):
    config_dir = write_config(tmp_path, coco128, db=SMALL)
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    # 6 s: one "waiting" line (at 5 s) before it gives up; that the line comes again every
    # SAY_EVERY_S is test_the_waiting_line_repeats_until_the_rendezvous_gives_up's. The node's
    # launcher runs in this process, its rank is a spawned one (its output read with capfd).
    t0 = time.monotonic()
    capfd.readouterr()
    before = children(os.getpid())
    result = run_train(config_dir, "--distributed", "--world-size", "2", "--rank", str(present),
                       "--dist-url", url, env={"CORNERNET_RENDEZVOUS_S": "6"}, inproc=True)
    rank = capfd.readouterr()
    started = of_the_run(children(os.getpid()) - before)  # what the node started
    waited = time.monotonic() - t0
    output = result.stdout + result.stderr + rank.out + rank.err
    absent = 1 - present
    waiting = [line for line in output.splitlines() if "waiting for" in line]
    assert len(waiting) == 1, output  # at 5 s
    assert waiting[0].startswith(f"node {present}: waiting for node {absent}")
    assert url in waiting[0] and "giving up after 6 s" in waiting[0]
    assert result.returncode == 1 and "Traceback" not in output and waited < 45
    expected = (f"node 1 of 2 did not join {url} within 6 s" if present == 0 else
                f"nobody answers at {url} after 6 s")
    assert expected in first_error(output) and "CORNERNET_RENDEZVOUS_S" in first_error(output)
    assert not wait_gone(started, 10)  # the node leaves no process of its own behind


@pytest.mark.parametrize("present", [0, 1])
def test_the_waiting_line_repeats_until_the_rendezvous_gives_up(monkeypatch, present):
    """rendezvous.join in this process, said every 0.3 s instead of 5 s: node 0 waiting for
    node 1, or node 1 for node 0, says so again and again, then gives up in its own words."""
    from core.utils import rendezvous

    monkeypatch.setattr(rendezvous, "SAY_EVERY_S", 0.3)
    monkeypatch.setenv("CORNERNET_RENDEZVOUS_S", "1.1")
    url, said = f"tcp://127.0.0.1:{free_port()}", []
    with pytest.raises(rendezvous.RendezvousError) as raised:
        rendezvous.join(url, present, 2, 1, say=said.append)
    absent = 1 - present
    assert len(said) >= 2, said
    assert all(line.startswith(f"node {present}: waiting for node {absent}") and url in line
               and "giving up after 1 s" in line for line in said), said
    expected = (f"node 1 of 2 did not join {url} within 1 s" if present == 0 else
                f"nobody answers at {url} after 1 s")
    assert expected in str(raised.value) and "CORNERNET_RENDEZVOUS_S" in str(raised.value)


@pytest.mark.slow
def test_under_torchrun_the_first_error_names_the_killed_rank(tmp_path, coco128):
    """rank 0's collective breaks first ("Connection closed by peer"); the line names rank 1."""
    config_dir = write_config(tmp_path, coco128, max_iter=100000, snapshot=100000, val_iter=0,
                              db=SMALL)
    run = Training(config_dir, cmd=torchrun_cmd(config_dir, 2, "--workers", "1"))
    try:
        run.wait_for(r"iteration 2: loss")
        ranks = sorted(pid for pid in children(run.proc.pid)
                       if parent(pid) == run.proc.pid and "train.py" in cmdline(pid))
        run.seen |= children(run.proc.pid)
        os.kill(ranks[1], signal.SIGKILL)
        status, waited, output = run.finish(timeout=60)
    finally:
        run.kill()
    assert status != 0 and waited < 30
    assert first_error(output) == ("error: rank 0: stopping because rank 1: stopped answering "
                                   "(killed, or its node is gone)"), output
    assert not wait_gone(run.seen, 10)


# Class 1: nothing of the run outlives its launcher.

@pytest.fixture
def run_tmp():
    """The run's TMPDIR: a short path, because multiprocessing's sockets live in it and a socket
    path holds at most 107 bytes (tmp_path is longer under pytest-xdist)."""
    path = Path(tempfile.mkdtemp(prefix="cn-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def launched(tmp_path, coco128, launcher: str, run_tmp: Path) -> list[Training]:
    config_dir = write_config(tmp_path, coco128, max_iter=100000, snapshot=100000, val_iter=0,
                              db=SMALL)
    env = {"TMPDIR": str(run_tmp)}
    if launcher == "two nodes":
        port = free_port()
        return [Training(config_dir, cmd=node_cmd(config_dir, n, port, "--workers", "1"),
                         env=env) for n in (0, 1)]
    cmd = torchrun_cmd(config_dir, 2, "--workers", "1") if launcher == "torchrun" else None
    return [Training(config_dir, "--distributed", "--world-size", "1", "--procs-per-node", "2",
                     "--workers", "1", cmd=cmd, env=env)]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["spawn", "torchrun", "two nodes"])
def test_kill_9_of_the_launcher_leaves_no_process_of_the_run(tmp_path, coco128, launcher,
                                                             run_tmp, monkeypatch):
    """The ranks watch their launcher as workers watch their trainer: 10 s after a kill -9 of
    it (of node 1's, with two nodes) no process of the run is left, on any node; the next run
    removes the pymp-* temp folders the killed processes left."""
    runs = launched(tmp_path, coco128, launcher, run_tmp)
    try:
        runs[0].wait_for(r"iteration 2: loss")
        tree = set()
        for run in runs:
            run.seen |= children(run.proc.pid)
            tree |= run.seen
        runs[-1].proc.send_signal(signal.SIGKILL)
        assert not wait_gone(tree, 10), [cmdline(pid) for pid in alive(tree)]
    finally:
        for run in runs:
            run.kill()
    left = list(run_tmp.glob("pymp-*"))
    if launcher == "spawn":
        assert left  # the killed processes could not remove theirs
    # The next run, in this process: its start-up tidies the temp folder, which is run_tmp
    # for it (tempfile caches the folder, so TMPDIR alone would not move it). This process's
    # own multiprocessing folder is made first, where it was, so that none is made in run_tmp.
    multiprocessing.util.get_temp_dir()
    monkeypatch.setattr(tempfile, "tempdir", str(run_tmp))
    config_dir = tmp_path / "configs"
    result = run_train(config_dir, "--initialize", env={"TMPDIR": str(run_tmp)}, inproc=True)
    assert result.returncode == 0, result.stderr
    assert not list(run_tmp.glob("pymp-*"))
    if left:
        assert f"removed {len(left)} temp folder(s) of killed processes" in result.stdout


# Class 4: every evaluation problem found before training.

def val_file(tmp_path, coco128, change) -> str:
    """The coco128 validation annotations changed by `change(data)`, or None to remove it."""
    data = json.loads((coco128 / "annotations" / "instances_coco128_val.json").read_text())
    path = tmp_path / "val.json"
    if change == "missing":
        return str(path)
    if change == "malformed":
        path.write_text(json.dumps(data)[:-40])
        return str(path)
    change(data)
    path.write_text(json.dumps(data))
    return str(path)


def _ten_classes(data):
    keep = {c["id"] for c in data["categories"][:10]}
    data["categories"] = data["categories"][:10]
    data["annotations"] = [a for a in data["annotations"] if a["category_id"] in keep]


def _other_ids(data):  # the same 80 classes under ids shifted by 1000
    for category in data["categories"]:
        category["id"] += 1000
    for annotation in data["annotations"]:
        annotation["category_id"] += 1000


def _no_images(data):
    data["images"], data["annotations"] = [], []


@pytest.mark.parametrize("change, words", [
    ("missing", ["validation split 'val'", "val.json", "not found"]),
    ("malformed", ["validation split 'val'", "val.json", "malformed JSON"]),
    (_ten_classes, ["validation split 'val'", "val.json", "10 categories"]),
    (_other_ids, ["val.json", "category ids", "differ from the training split's", "[1, 2, 3"]),
    (_no_images, ["val.json", "no images", "system.eval_iter to 0"]),
])
def test_a_validation_split_that_cannot_be_scored_is_one_line_before_training(
        tmp_path, coco128, change, words):
    annotations = {"train": str(coco128 / "annotations" / "instances_coco128_train.json"),
                   "val": val_file(tmp_path, coco128, change)}
    result = run_train(write_config(tmp_path, coco128, eval_iter=100, annotations=annotations),
                       inproc=True)
    one_line_error(result, *words)
    assert "iteration 1:" not in result.stdout
    # Nothing written: not even the empty snapshot and result folders the start-up checks made.
    assert not (tmp_path / "cache" / "nnet").exists() and not (tmp_path / "results").exists()


def test_a_negative_eval_iter_is_one_line(tmp_path, coco128):
    one_line_error(run_train(write_config(tmp_path, coco128, eval_iter=-1), inproc=True),
                   "system.eval_iter")


# Class 5: our own files turning against us.

@pytest.mark.slow  # two runs in-process, of two iterations and one
def test_a_damaged_metrics_line_is_skipped_and_said_once(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=2, snapshot=2, val_iter=0)
    assert run_train(config_dir, inproc=True).returncode == 0
    metrics = cache(tmp_path) / "metrics.jsonl"
    first, rest = metrics.read_bytes().split(b"\n", 1)
    metrics.write_bytes(first + b"\n\xff\xfe not ours\n" + rest)
    later = write_config(tmp_path, coco128, max_iter=3, snapshot=3, val_iter=0)
    result = run_train(later, "--iter", "2", inproc=True)
    assert result.returncode == 0, result.stdout + result.stderr
    said = [line for line in result.stdout.splitlines() if "damaged line" in line]
    assert (len(said) == 1 and str(metrics) in said[0]
            and "left out 1 damaged line (the first is line 2)" in said[0])
    lines = metrics.read_bytes().decode().splitlines()  # UTF-8 again, each iteration once
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]


@pytest.mark.slow
def test_a_second_run_on_the_same_snapshot_folder_is_refused_naming_the_first(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=100000, snapshot=100000, val_iter=0)
    first = Training(config_dir)
    try:
        first.wait_for(r"iteration 1: loss")
        second = run_train(config_dir, inproc=True)
        one_line_error(second, str(cache(tmp_path)), f"pid {first.proc.pid}", "in use",
                       "system.snapshot_name")
        lock = json.loads((cache(tmp_path) / ".lock").read_text())
        assert lock["pid"] == first.proc.pid
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    finally:
        first.kill()
    # The killed run's lock is stale: the next run takes it over and says so.
    result = run_train(config_dir, "--initialize", inproc=True)
    assert result.returncode == 0, result.stdout + result.stderr
    took = [line for line in result.stdout.splitlines() if "took over" in line]
    assert len(took) == 1 and f"pid {first.proc.pid}) is no longer running" in took[0]
    assert not (cache(tmp_path) / ".lock").exists()  # released at the end


# Class 6: values at the edges.

EVERYTHING = ["br_heats", "br_modules", "br_offs", "br_tags", "hg", "tl_heats", "tl_modules",
              "tl_offs", "tl_tags"]


@pytest.mark.parametrize("extra, system, words", [
    (["--workers", "0"], {}, ["--workers must be at least 1"]),
    (["--workers", "0", "--dry-run", "2"], {}, ["--workers must be at least 1"]),
    (["--dry-run", "0"], {}, ["--dry-run must be at least 1"]),
    ([], {"warmup_factor": 2.0}, ["system.warmup_factor", "(0, 1]"]),
    ([], {"warmup_iters": -5}, ["system.warmup_iters"]),
    ([], {"freeze": EVERYTHING}, ["system.freeze", "every parameter"]),
])
def test_values_at_the_edges_are_one_line(tmp_path, coco128, extra, system, words):
    result = run_train(write_config(tmp_path, coco128, **system), *extra, inproc=True)
    one_line_error(result, *words)
    assert "iteration 1:" not in result.stdout
    assert not (tmp_path / "cache" / "nnet").exists()


# Class 7: interrupts.

@pytest.mark.slow
def test_a_second_ctrl_c_during_the_stop_snapshot_write_keeps_the_snapshot(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=100000, snapshot=100000, val_iter=0)
    run = Training(config_dir)
    try:
        run.wait_for(r"iteration 2: loss")
        run.proc.send_signal(signal.SIGINT)
        deadline, seen = time.monotonic() + 60, False
        while not seen and time.monotonic() < deadline:
            seen = bool(list(cache(tmp_path).glob(".*.tmp")))  # the stop snapshot is writing
            time.sleep(0.001)
        run.proc.send_signal(signal.SIGINT)
        code, _, output = run.finish(timeout=60)
    finally:
        run.kill()
    assert seen, "the stop snapshot's write was not caught"
    assert code == 128 + signal.SIGINT
    assert "Traceback" not in output and "KeyboardInterrupt" not in output
    stopped = [line for line in output.splitlines() if "stopped by signal after iteration" in line]
    assert len(stopped) == 1, output
    iteration = int(stopped[0].split("after iteration ")[1].split(";")[0])
    assert load(cache(tmp_path) / f"{NAME}_{iteration}.pkl")["iteration"] == iteration
    assert not list(cache(tmp_path).glob(".*.tmp")) and not (cache(tmp_path) / ".lock").exists()


@pytest.mark.slow  # "before any process" is seen in the process table of a process of its own
@pytest.mark.skipif(torch.cuda.is_available(), reason="the case needs a machine without a GPU")
@pytest.mark.parametrize("extra", [[], ["--distributed", "--world-size", "1",
                                        "--procs-per-node", "2"]])
def test_a_device_the_machine_does_not_have_is_one_line_before_any_process(
        tmp_path, coco128, extra):
    run = Training(write_config(tmp_path, coco128), "--device", "cuda", *extra)
    status, _, output = run.finish(timeout=60)
    assert status == 2 and output.strip().splitlines() == [
        (f"error: --device cuda: this machine has no usable GPU (torch {torch.__version__}, "
         f"a CPU-only build); use --device cpu, or install a CUDA build of torch on a machine "
         f"with a GPU")]
    assert not run.seen
