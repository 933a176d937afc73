"""The process contract (core/engine/process.py): a command leaves its caller's process as it
found it, runs from any thread, is never run again by its own worker processes, and a few
entry points need nothing imported before them."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
# The smallest training that writes a snapshot, as keywords of cornernet.train.
TINY = {"workers": 1, "device": "cpu", "max_iter": 2, "snapshot": 2, "eval_iter": 0,
        "val_iter": 0, "num_train_images": 16, "num_val_images": 4}


def folders(root: Path) -> dict[str, str]:
    return {"cache_dir": str(root / "cache"), "data_dir": str(root / "data"),
            "result_dir": str(root / "results")}


def run_python(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python *args` in a fresh interpreter that imports this checkout, with torch's thread
    count its own (no OMP_NUM_THREADS)."""
    environ = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    return subprocess.run([sys.executable, *args], cwd=cwd, text=True, capture_output=True,
                          timeout=300, env={**environ, "PYTHONPATH": str(ROOT)}, check=False)


@pytest.mark.slow
def test_a_script_without_the_main_guard_ends_in_one_line_and_trains_once(tmp_path):
    """The README's call in a script without `if __name__ == "__main__":` (the prefetch worker
    imports the script again): one line naming the script and the guard, exit 2, no worker
    traceback, no second training and no snapshot."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""\
        import cornernet
        print("script starts", flush=True)
        done = cornernet.train("CornerNet_Tiny", **{TINY!r}, **{folders(tmp_path)!r})
        print("trained with status", done.status, flush=True)
        raise SystemExit(done.status)
        """))
    done = run_python(str(script), cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(errors) == 1 and errors[0].startswith("error: prefetch worker"), errors
    assert str(script) in errors[0] and 'if __name__ == "__main__":' in errors[0]
    assert "Traceback" not in done.stderr and "in use by the run" not in done.stderr
    assert done.stdout.count("trained with status") == 1  # only the script's own run ended
    assert done.stdout.count("training images:") == 1  # the worker trained nothing
    assert not list((tmp_path / "cache").rglob("*.pkl"))


def test_a_spawned_rank_that_reached_the_unguarded_command_is_one_line_exit_2(capsys):
    """The launcher's side (mp.spawn ranks import the script too): a rank that left with
    REIMPORTED_MAIN ends the run in the guard's one line, exit 2, naming the rank."""
    from types import SimpleNamespace

    from core.engine.launch import _stop_all
    from core.utils.procs import REIMPORTED_MAIN

    ranks = [SimpleNamespace(exitcode=REIMPORTED_MAIN, pid=41, join=lambda: None),
             SimpleNamespace(exitcode=0, pid=42, join=lambda: None)]
    assert _stop_all(ranks, ranks[:1], SimpleNamespace(empty=lambda: True), [], 4) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: rank 4 (pid 41) stopped at its start")
    assert 'if __name__ == "__main__":' in lines[0]


@pytest.mark.slow
def test_train_gives_the_callers_torch_back(tmp_path):
    """Determinism (and warn_only), the random states and the thread count set before
    cornernet.train() are the same after it."""
    import cornernet

    saved = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(), torch.get_num_threads())
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.set_num_threads(3)
        torch.manual_seed(7)
        np.random.seed(8)
        random.seed(9)
        states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
        done = cornernet.train("CornerNet_Tiny", **TINY, **folders(tmp_path))
        assert done.status == 0 and done.iteration == 2
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.get_num_threads() == 3
        assert torch.initial_seed() == 7 and torch.equal(torch.get_rng_state(), states[0])
        assert np.array_equal(np.random.get_state()[1], states[1])
        assert random.getstate() == states[2]
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.set_num_threads(saved[2])


@pytest.mark.slow
def test_train_in_a_process_without_torch_leaves_torchs_own_thread_count(tmp_path):
    """A process that had not imported torch gets torch's own count after a training (what its
    own `import torch` would have given), not the training's."""
    own = run_python("-c", "import torch; print(torch.get_num_threads())", cwd=tmp_path)
    code = textwrap.dedent(f"""\
        import sys
        import cornernet
        assert "torch" not in sys.modules
        done = cornernet.train("CornerNet_Tiny", **{TINY!r}, **{folders(tmp_path)!r})
        import torch
        print("status", done.status, "threads", torch.get_num_threads())
        """)
    done = run_python("-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"status 0 threads {int(own.stdout)}"


@pytest.mark.slow
def test_train_evaluate_and_predict_run_from_a_worker_thread(tmp_path, capsys, monkeypatch):
    """From a thread that is not the main one: each returns its result (predict's boxes equal
    the main thread's), the main thread's SIGINT handler is untouched, and the process says
    once that the commands run without signal handlers there."""
    import cornernet
    from core.engine import process

    monkeypatch.setattr(process, "_said_off_main", [])
    where = folders(tmp_path)
    got: dict = {}

    def work() -> None:
        try:
            got["train"] = cornernet.train("CornerNet_Tiny", **TINY, **where)
            got["evaluate"] = cornernet.evaluate("CornerNet_Tiny", 2, device="cpu",
                                                 num_train_images=16, num_val_images=4, **where)
            detector = cornernet.Detector.from_snapshot(got["train"].snapshots[0], device="cpu",
                                                        thresh=0.0)
            got["predict"] = list(detector.predict(image))
        except BaseException as err:  # noqa: BLE001 - the main thread asserts on it
            got["error"] = err

    def mine(signum, frame):
        pass

    image = (np.arange(96 * 96 * 3) % 251).astype(np.uint8).reshape(96, 96, 3)
    before = signal.signal(signal.SIGINT, mine)
    try:
        worker = threading.Thread(target=work, name="web-request")
        worker.start()
        worker.join(timeout=600)
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, before)
    assert "error" not in got, got.get("error")
    assert got["train"].status == 0 and got["train"].iteration == 2
    assert 0.0 <= got["evaluate"]["AP"] <= 1.0
    here = cornernet.Detector.from_snapshot(got["train"].snapshots[0], device="cpu",
                                            thresh=0.0).detect(image)
    assert len(got["predict"]) == 1 and len(here.scores) > 0
    assert np.array_equal(got["predict"][0].boxes, here.boxes)
    notes = [line for line in capsys.readouterr().err.splitlines() if "not the main thread" in line]
    assert len(notes) == 1 and "'web-request'" in notes[0], notes


def test_a_command_from_a_worker_thread_ends_in_its_own_error(tmp_path):
    """A command's `run` on a thread that is not the main one gets as far as its own work: a
    missing metrics file is the command's one-line mistake, not signal's ValueError."""
    from core.errors import UserMistake
    from cornernet.commands import plot

    raised: list[BaseException] = []

    def work() -> None:
        try:
            plot.run(plot.parse_args([str(tmp_path / "metrics.jsonl")]))
        except BaseException as err:  # noqa: BLE001 - asserted below
            raised.append(err)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert len(raised) == 1 and isinstance(raised[0], UserMistake), raised
    assert str(tmp_path / "metrics.jsonl") in str(raised[0])


def test_submit_help_works_without_submitit(tmp_path):
    done = run_python("-c", "import sys; sys.modules['submitit'] = None\n"
                      "from cornernet.cli import main\n"
                      "raise SystemExit(main(['submit', '--help']))", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "usage: cornernet submit" in done.stdout and "--gpus-per-node" in done.stdout


def test_submit_without_submitit_is_one_line_naming_the_install(tmp_path):
    done = run_python("-c", "import sys; sys.modules['submitit'] = None\n"
                      "from cornernet.cli import main\n"
                      "raise SystemExit(main(['submit', 'CornerNet_Tiny']))", cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "submitit" in lines[0] and "pip install" in lines[0]


def test_load_config_needs_nothing_imported_before_it(tmp_path):
    """In a fresh interpreter: the built-in datasets' db keys are known (a COCO key is checked,
    a misspelt one refused) without importing core.dbs first."""
    code = textwrap.dedent("""\
        import sys
        from core.config import load_config
        from core.errors import ConfigError
        system, db = load_config("CornerNet_Tiny")
        print(system.snapshot_name, "image_dirs" in db)
        try:
            load_config("CornerNet_Tiny", overrides=["db.image_dir={}"])
        except ConfigError as err:
            print("refused:", err)
        print("core.dbs" in sys.modules)
        """)
    done = run_python("-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "CornerNet_Tiny True"
    assert lines[1].startswith("refused:") and "image_dirs" in lines[1]
    assert lines[2] == "False"


def test_a_command_puts_back_the_folder_argv_and_logging_and_leaves_import_filters(tmp_path):
    """What tests/_inproc.py needs put back after a script is on the one list (KEPT) too; the
    warning filters a module adds at import stay, as they would in a fresh process."""
    import logging
    import warnings

    from core.engine.process import process_kept

    cwd, argv = os.getcwd(), list(sys.argv)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    with warnings.catch_warnings():
        before = len(warnings.filters)
        with process_kept():
            os.chdir(tmp_path)
            sys.argv[:] = ["elsewhere.py", "--flag"]
            root.addHandler(logging.NullHandler())
            root.setLevel(logging.DEBUG)
            warnings.filterwarnings("ignore", message="an import-time filter")  # as torch's
        assert os.getcwd() == cwd and sys.argv == argv
        assert root.handlers == handlers and root.level == level
        assert len(warnings.filters) == before + 1


def test_a_command_on_a_worker_thread_leaves_what_the_main_thread_changes_meanwhile(tmp_path):
    """The folder, argv and root logger belong to the whole process: a command on a web
    server's thread does not put back, when it ends, what it read before the main thread
    changed them."""
    import logging
    import threading

    from core.engine.process import process_kept

    started, changed = threading.Event(), threading.Event()

    def work() -> None:
        with process_kept():
            started.set()
            changed.wait(10)

    cwd, argv, root = os.getcwd(), list(sys.argv), logging.getLogger()
    handler = logging.NullHandler()
    worker = threading.Thread(target=work, name="web")
    worker.start()
    try:
        started.wait(10)
        os.chdir(tmp_path)
        sys.argv.append("--main")
        root.addHandler(handler)
        changed.set()
        worker.join(10)
        assert os.getcwd() == str(tmp_path) and sys.argv[-1] == "--main"
        assert handler in root.handlers
    finally:
        os.chdir(cwd)
        sys.argv[:] = argv
        root.removeHandler(handler)


def test_the_lock_table_holds_under_threads_taking_and_releasing_at_once(tmp_path):
    """Commands on several threads take and release folder locks while another puts back the
    process: no 'dictionary changed size' and every lock ends released."""
    import threading

    from core.utils import lock

    errors: list[BaseException] = []

    def churn(k: int) -> None:
        try:
            for i in range(200):
                folder = tmp_path / f"t{k}-{i}"
                folder.mkdir()
                lock.release(lock.acquire(folder, print))
        except BaseException as err:  # noqa: BLE001 - the main thread asserts on it
            errors.append(err)

    def sweep() -> None:
        try:
            for _ in range(2000):
                lock.release_all(keep=lock.held(), thread=threading.get_ident())
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=churn, args=(k,)) for k in range(3)]
    threads += [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and lock.held() == []
    assert not list(tmp_path.glob("*/.lock"))


def test_a_command_releases_the_locks_its_thread_took_and_no_other(tmp_path):
    """The caller's lock, and one another thread takes meanwhile (a second command on a web
    server's thread), stay; the command's own is released however it ends."""
    from core.engine.process import process_kept
    from core.utils import lock

    callers, others, mine = (tmp_path / name for name in ("caller", "other", "mine"))
    for folder in (callers, others, mine):
        folder.mkdir()
    lock.acquire(callers, print)
    try:
        with pytest.raises(RuntimeError), process_kept():
            lock.acquire(mine, print)
            worker = threading.Thread(target=lock.acquire, args=(others, print))
            worker.start()
            worker.join()
            raise RuntimeError("the command fails")
        assert not (mine / lock.NAME).exists()
        assert (callers / lock.NAME).is_file() and (others / lock.NAME).is_file()
        assert lock.held() == [callers / lock.NAME, others / lock.NAME]
    finally:
        lock.release_all()
    assert lock.held() == [] and not (callers / lock.NAME).exists()
