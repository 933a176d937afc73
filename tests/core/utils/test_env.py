"""core.utils.env: every CORNERNET_* variable read by one parser, wrong values one line at start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _faults import one_line_error
from _train_helpers import run_train, write_config

from core.errors import ConfigError
from core.utils import env
from core.utils.peers import heartbeat_timeout


def test_unset_variables_take_their_defaults():
    assert env.check_environment({}) == {"CORNERNET_HEARTBEAT_S": 60.0,
                                         "CORNERNET_RENDEZVOUS_S": 600.0,
                                         "CORNERNET_DEBUG": False, "CORNERNET_TRACKERS": "",
                                         "CORNERNET_DATA": "", "CORNERNET_EXPORT_ALL": ""}


def test_values_are_parsed_as_their_kind():
    found = env.check_environment({"CORNERNET_HEARTBEAT_S": "2.5", "CORNERNET_DEBUG": "Yes",
                                   "CORNERNET_EXPORT_ALL": "1"})  # a test switch: left alone
    assert found["CORNERNET_HEARTBEAT_S"] == 2.5 and found["CORNERNET_DEBUG"] is True


@pytest.mark.parametrize("name, text", [
    ("CORNERNET_HEARTBEAT_S", "abc"), ("CORNERNET_HEARTBEAT_S", "-1"),
    ("CORNERNET_HEARTBEAT_S", "0"), ("CORNERNET_HEARTBEAT_S", "nan"),
    ("CORNERNET_RENDEZVOUS_S", "inf"), ("CORNERNET_RENDEZVOUS_S", ""),
])
def test_seconds_that_cannot_be_right_are_one_line_naming_the_variable(name, text):
    with pytest.raises(ConfigError) as caught:
        env.check_environment({name: text})
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{name}={text!r}: expected a number of seconds greater than 0")


def test_a_flag_that_is_no_flag_is_one_line():
    with pytest.raises(ConfigError, match="CORNERNET_DEBUG='maybe': expected one of 1, true"):
        env.check_environment({"CORNERNET_DEBUG": "maybe"})


@pytest.mark.parametrize("typo, meant", [("CORNERNET_HEARTBEAT", "CORNERNET_HEARTBEAT_S"),
                                         ("CORNERNET_RENDEZVOUS_SEC", "CORNERNET_RENDEZVOUS_S"),
                                         ("CORNERNET_TRACKER", "CORNERNET_TRACKERS"),
                                         ("CORNERNET_DAT", "CORNERNET_DATA")])
def test_a_misspelt_variable_is_refused_with_the_one_it_resembles(typo, meant):
    with pytest.raises(ConfigError, match=f"{typo} is not a setting of this project; did you "
                                          f"mean {meant}\\?"):
        env.check_environment({typo: "5"})


def test_the_watch_reads_the_heartbeat_through_the_parser(monkeypatch):
    monkeypatch.setenv("CORNERNET_HEARTBEAT_S", "7")
    assert heartbeat_timeout() == 7.0
    monkeypatch.setenv("CORNERNET_HEARTBEAT_S", "abc")
    with pytest.raises(ConfigError, match="CORNERNET_HEARTBEAT_S='abc'"):
        heartbeat_timeout()


@pytest.mark.parametrize("text", ["abc", "-1"])
def test_train_with_a_wrong_heartbeat_is_one_line_at_start(tmp_path, coco128, text):
    # in-process: the launcher refuses before it spawns a rank
    result = run_train(write_config(tmp_path, coco128), "--distributed", "--world-size", "1",
                       "--procs-per-node", "2", env={"CORNERNET_HEARTBEAT_S": text},
                       inproc=True)
    one_line_error(result, f"CORNERNET_HEARTBEAT_S='{text}'", "greater than 0")
    assert "iteration 1" not in result.stdout and "rank 0 stopped answering" not in result.stderr
    assert not (tmp_path / "cache" / "nnet").exists()


def test_every_variable_the_code_reads_is_declared():
    """The near-miss check knows only declared names: a name read anywhere in the code, the
    scripts, the tools or the benchmarks and missing from VARIABLES would let its typos pass."""
    root = Path(__file__).resolve().parents[3]
    files = [*root.glob("*.py"), *(p for folder in ("core", "cornernet", "tools", "bench")
                                   for p in (root / folder).rglob("*.py")),
             *(root / "bench").glob("*.sh")]
    read = {name for path in files
            for name in re.findall(r"\bCORNERNET_[A-Z][A-Z0-9_]*", path.read_text())}
    assert "CORNERNET_TRACKERS" in read and read <= set(env.VARIABLES), read - set(env.VARIABLES)


def test_a_misspelt_variable_stops_every_command_in_one_line(tmp_path):
    """run_cli checks the environment before a command's work: predict, not only train."""
    from _tiny_coco import inproc
    done = inproc("demo.py", "--snapshot", tmp_path / "none.pkl", "--images", tmp_path,
                  "--out", tmp_path / "out", CORNERNET_TRACKER="mlflow")
    one_line_error(done, "CORNERNET_TRACKER is not a setting", "did you mean CORNERNET_TRACKERS")
    assert not (tmp_path / "out").exists()
