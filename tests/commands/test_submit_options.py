"""`cornernet submit`'s options: a frozen value whose defaults are the declared ones, train.py's
options after `--` kept as given, and the range checks held by the value itself (exit 2 with the
words they always had). No SLURM, no submitit: the value and its parser need neither."""

from __future__ import annotations

import pytest

from core.errors import UsageError
from cornernet.commands import submit


def test_the_command_line_s_defaults_are_the_options_declared_ones():
    parsed = submit.parse_args(["CornerNet_Squeeze"])
    assert parsed == submit.SubmitOptions(cfg="CornerNet_Squeeze")
    assert (parsed.nodes, parsed.gpus_per_node, parsed.cpus_per_task, parsed.hours,
            parsed.signal_delay_s, parsed.partition, parsed.name, parsed.slurm, parsed.wait,
            parsed.max_requeues, parsed.train_args) == (
        1, 4, 8, 24.0, 300, None, None, (), False, submit.UNLIMITED_REQUEUES, ())


def test_train_s_options_follow_the_double_dash_and_slurm_repeats():
    parsed = submit.parse_args(["CornerNet", "--slurm", "account=p", "--hours", "2", "--slurm",
                                "mem=64G", "--", "--workers", "6", "--hours", "1"])
    assert parsed == submit.SubmitOptions(cfg="CornerNet", hours=2.0,
                                          slurm=("account=p", "mem=64G"),
                                          train_args=("--workers", "6", "--hours", "1"))


@pytest.mark.parametrize("argv, message", [
    (["--nodes", "0"], "--nodes must be at least 1, got 0"),
    (["--gpus-per-node", "0"], "--gpus-per-node must be at least 1, got 0"),
    (["--max-requeues", "-1"], "--max-requeues must be at least 0, got -1"),
    (["--signal-delay-s", "0"],
     "--signal-delay-s 0 must be above 0 and below the time limit (86400 s)"),
    (["--hours", "soon"], "argument --hours: invalid float value: 'soon'"),
])
def test_a_usage_mistake_is_the_usage_error_it_was(argv, message, capsys):
    assert submit.main(["CornerNet_Squeeze", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: cornernet submit") and message in err, err


def test_the_api_s_value_is_held_to_the_same_checks():
    with pytest.raises(UsageError, match="--hours 0.0: a job's time limit is from 1 minute"):
        submit.SubmitOptions(cfg="CornerNet_Squeeze", hours=0.0)
