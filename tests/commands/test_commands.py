"""The commands of cornernet/commands/: one table of them (core/utils/command_table.py) that the
modules, the help and analyze's kinds agree with, one contract each, the command's manners (usage
lines, --version, analyze's help), a process left as found, and cheap checks before expensive
work (issue 39 item 5)."""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _tiny_coco import make_tiny_coco

from core.utils.command_table import COMMANDS, dispatch, kinds
from cornernet.cli import main as cornernet
from cornernet.cli import usage

ROOT = Path(__file__).resolve().parents[2]
MODULES = [row.module for row in COMMANDS]
# A command line of each module that fails at once: a config that does not exist.
FAILING = {"train": ["NoSuchCfg"], "test": ["NoSuchCfg"], "predict": ["NoSuchCfg", "--images",
           "x.jpg", "--out", "OUT"], "export": ["NoSuchCfg"], "analyze_results": ["NoSuchCfg"],
           "analyze_model": ["NoSuchCfg", "--device", "cpu"], "check": ["NoSuchCfg"],
           "convert": ["yolo2coco", "no/data.yaml", "train", "OUT/x.json"],
           "benchmark": ["NoSuchCfg", "--device", "cpu"], "submit": ["NoSuchCfg"],
           "plot": ["NoSuchCfg"]}


def command(name):
    return importlib.import_module(f"cornernet.commands.{name}")


def test_every_command_has_the_one_contract():
    for name in MODULES:
        module = command(name)
        assert callable(module.parse_args) and callable(module.main), name
        assert hasattr(module.run, "__wrapped__"), f"{name}.run does not keep the process"


def test_every_module_of_the_commands_is_a_row_of_the_table_and_every_row_a_module():
    """A command added in one place only fails here: a module without a row, a row without a
    module, a group's kind (analyze) that is not the table's."""
    files = {path.stem for path in (ROOT / "cornernet" / "commands").glob("*.py")
             if path.stem != "__init__"}
    assert files == set(MODULES) | set(dispatch().values())
    assert len(set(MODULES)) == len(MODULES) and len({row.words for row in COMMANDS}) == \
        len(COMMANDS)
    assert set(FAILING) == set(MODULES)  # each new command gets its process test below
    assert command("analyze").KINDS == kinds("analyze") == {"results": "analyze_results",
                                                            "model": "analyze_model"}
    assert list(dispatch()) == ["train", "test", "predict", "export", "analyze", "check",
                                "convert", "benchmark", "submit", "plot"]


def test_cornernet_help_lists_every_row_of_the_table_in_its_order():
    rows = usage().split("commands:\n")[1].splitlines()
    assert [line[2:18].strip() for line in rows] == [row.words for row in COMMANDS]
    assert "  train            train a detector (train.py)\n" in usage()
    assert "  analyze model    parameters, FLOPs and activation memory of a model\n" in usage()


@pytest.mark.parametrize("name", MODULES)
def test_a_command_leaves_the_process_as_it_found_it(name, tmp_path, capsys):
    """main -> run of each command, failing on a missing config: Ctrl-C's handler (the stop
    request of the exit table and train's early catch install their own), SIGTERM's, torch's
    thread count and the environment are the caller's again."""
    pytest.importorskip("submitit") if name == "submit" else None

    def mine(signum, frame):
        pass

    saved = {sig: signal.signal(sig, mine) for sig in (signal.SIGINT, signal.SIGTERM)}
    threads = torch.get_num_threads()
    environ = dict(os.environ)
    argv = [str(tmp_path) if arg == "OUT" else arg.replace("OUT", str(tmp_path))
            for arg in FAILING[name]]
    try:
        assert command(name).main(argv) == 2
        assert signal.getsignal(signal.SIGINT) is mine
        assert signal.getsignal(signal.SIGTERM) is mine
        assert torch.get_num_threads() == threads and dict(os.environ) == environ
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err


def test_usage_lines_say_cornernet_or_the_script(capsys):
    assert command("test").main(["CocoTiny", "--images", "0"]) == 2
    assert "usage: cornernet test " in capsys.readouterr().err
    assert command("test").main(["CocoTiny", "--images", "0"], prog="test.py") == 2
    assert "usage: test.py " in capsys.readouterr().err
    assert cornernet(["analyze", "model", "--test-size", "1"]) == 2
    assert "usage: cornernet analyze model " in capsys.readouterr().err


def test_version_comes_from_the_package(capsys):
    from importlib import metadata

    assert cornernet(["--version"]) == 0
    shown = capsys.readouterr().out.strip()
    try:
        assert shown == f"cornernet {metadata.version('cornernet-lite-modern')}"
    except metadata.PackageNotFoundError:
        assert shown.startswith("cornernet 0.")


def test_analyze_help_and_its_mistakes(capsys):
    assert cornernet(["analyze", "--help"]) == 0
    assert "cornernet analyze {results,model}" in capsys.readouterr().out
    assert cornernet(["analyze"]) == 2
    assert cornernet(["analyse"]) == 2
    assert "did you mean 'analyze'?" in capsys.readouterr().err
    assert cornernet(["analyze", "results", "--help"]) == 0
    assert "usage: cornernet analyze results" in capsys.readouterr().out


# Every subcommand's words, and options its --help names (the runtime's, the evaluator's and the
# export's among them: what used to import torch to be listed).
HELP = {("train",): ["--iter", "--workers", "--set"],
        ("test",): ["--testiter", "--backend", "--runtime", "--precision", "--threads"],
        ("predict",): ["--images", "--thresh", "--runtime", "--onnx", "--precision"],
        ("export",): ["--opset", "--max-map", "--openvino"],
        ("analyze", "results"): ["--testiter"], ("analyze", "model"): ["--test-size"],
        ("check",): ["--config-dir"], ("convert",): ["yolo2coco", "coco2yolo"],
        ("benchmark",): ["--rows", "--keep-float", "--calib-images"],
        ("submit",): ["--nodes"], ("plot",): ["--out"]}
# The checkout's script of each (the table's), by the words of its command.
SCRIPTS = {tuple(row.words.split()): row.script for row in COMMANDS}


def help_of(*command: str) -> tuple[str, set[str]]:
    """What `python <command> --help` prints in a fresh interpreter, and which of torch and cv2
    it imported (read from -X importtime, which names every module a process imports)."""
    done = subprocess.run([sys.executable, "-X", "importtime", *command, "--help"], cwd=ROOT,
                          capture_output=True, text=True, check=True, timeout=120)
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()}
    return done.stdout, imported & {"torch", "cv2"}


def test_the_help_table_holds_every_subcommand_and_its_script():
    assert set(SCRIPTS) == set(HELP)


@pytest.mark.slow  # a fresh interpreter: about 0.3 s
@pytest.mark.parametrize("words", list(HELP), ids=" ".join)
def test_help_imports_neither_torch_nor_cv2(words):
    out, heavy = help_of("-m", "cornernet", *words)
    assert not heavy, words
    assert out.startswith(f"usage: cornernet {' '.join(words)}")
    assert all(option in out for option in HELP[words]), out


@pytest.mark.slow  # a fresh interpreter: about 0.3 s
@pytest.mark.parametrize("words", list(HELP), ids=" ".join)
def test_a_script_s_help_imports_neither_torch_nor_cv2(words):
    script = SCRIPTS[words]
    out, heavy = help_of(script)
    assert not heavy, script
    assert out.startswith(f"usage: {script}")
    assert all(option in out for option in HELP[words]), out


def test_python_m_runs_a_command_module():
    done = subprocess.run([sys.executable, "-m", "cornernet.commands.plot", "--help"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "usage: cornernet plot" in done.stdout
    done = subprocess.run([sys.executable, "-m", "cornernet", "plot", "--help"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "usage: cornernet plot" in done.stdout


# ------------------------------------------------------------------- issue 39 item 5
def test_analyze_model_on_a_gpu_the_machine_lacks_is_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert cornernet(["analyze", "model", "CornerNet_Tiny", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --device cuda: this machine has no"), err


def test_convert_to_a_folder_where_a_file_is_written_is_one_line(tmp_path, capsys):
    assert cornernet(["convert", "yolo2coco", str(tmp_path / "no.yaml"), "train",
                      str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [(f"error: {tmp_path} is a folder; yolo2coco writes one COCO json file: name "
                    f"it, e.g. {tmp_path / 'instances_train.json'}")]
    (tmp_path / "file").write_text("")
    assert cornernet(["convert", "coco2yolo", "a.json", "images", str(tmp_path / "file")]) == 2
    assert "is a file; coco2yolo writes a YOLO folder" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny(coco128, tmp_path_factory):
    return make_tiny_coco(coco128, tmp_path_factory.mktemp("commands"))


def test_export_max_map_too_small_is_one_line_before_the_export(tiny, capsys):
    assert cornernet(["export", "CocoTiny", "--testiter", "0", "--config-dir",
                      str(tiny / "configs"), "--max-map", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [("error: --max-map 8 makes a graph for inputs up to 32 pixels (output stride "
                    "4); the export's example input is 63: use --max-map 16 or more (default "
                    "512)")]
    assert cornernet(["export", "CocoTiny", "--testiter", "0", "--config-dir",
                      str(tiny / "configs"), "--max-map", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at the test scale is 255: use --max-map 64 or more" in err[0]
    assert not (tiny / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.onnx").exists()


def test_analyze_results_names_the_test_command_of_its_split_and_what_exists(tiny, capsys):
    folder = tiny / "results" / "CocoTiny" / "0"
    (folder / "val" / "multi").mkdir(parents=True)
    (folder / "val" / "multi" / "metrics.json").write_text("{}")
    try:
        assert cornernet(["analyze", "results", "CocoTiny", "--testiter", "0", "--config-dir",
                          str(tiny / "configs"), "--split", "training"]) == 2
    finally:
        shutil.rmtree(folder)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert ("does not exist: run python test.py CocoTiny --testiter 0 --split training first "
            "(this snapshot's results that exist: --split validation --suffix multi)") in err[0]


def test_test_on_a_missing_snapshot_says_so_before_reading_the_data(tiny, monkeypatch, capsys):
    from core.dbs import datasets

    def never(*args, **kwargs):
        raise AssertionError("the dataset was opened before the snapshot was checked")

    monkeypatch.setitem(datasets, "COCO", never)
    assert cornernet(["test", "CocoTiny", "--testiter", "9", "--config-dir",
                      str(tiny / "configs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no snapshot for iteration 9" in err[0], err


def test_test_and_export_take_a_snapshot_file(tiny, capsys):
    from core.config import load_config
    from core.nnet.checkpoint import snapshot_label

    system_config, _ = load_config("CocoTiny", tiny / "configs")
    folder = tiny / "cache" / "nnet" / "CocoTiny"
    assert snapshot_label(system_config, folder / "CocoTiny_0.pkl") == 0
    shutil.copy(folder / "CocoTiny_0.pkl", folder / "CocoTiny_best.pkl")
    assert snapshot_label(system_config, folder / "CocoTiny_best.pkl") == "best"
    elsewhere = tiny / "copy.pkl"
    shutil.copy(folder / "CocoTiny_0.pkl", elsewhere)
    for name in ("test", "export"):
        assert command(name).parse_args(["CocoTiny", "--testiter", str(elsewhere)]
                                        ).testiter == elsewhere
        assert cornernet([name, "CocoTiny", "--testiter", str(elsewhere), "--config-dir",
                          str(tiny / "configs")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "copy the file there under such a name" in err[0], err
    metrics = command("test").run(command("test").parse_args([
        "CocoTiny", "--testiter", str(folder / "CocoTiny_best.pkl"), "--config-dir",
        str(tiny / "configs"), "--images", "2", "--device", "cpu"]))
    assert metrics is not None and (tiny / "results" / "CocoTiny" / "best" / "val" /
                                    "metrics.json").is_file()


@pytest.mark.slow  # one torch row on two images: about 5 s
def test_the_benchmark_from_python_returns_its_rows(tiny, capsys):
    import cornernet

    rows = cornernet.benchmark("CocoTiny", 0, config_dir=tiny / "configs", device="cpu",
                               rows=["torch:fp32"], images=2, threads=[1], reps=1)
    assert [(row["runtime"], row["precision"]) for row in rows] == [("torch", "fp32")]
    assert rows[0]["AP"] is not None and rows[0]["ms"]["1"] > 0
    assert "| torch | fp32 |" in capsys.readouterr().out
