"""bench/bench_decode_syncs.py: the count bench/bench_syncs.py prints for the decode."""

import pytest

from bench.bench_decode_syncs import CONFIGS, decode_reads, main


@pytest.mark.parametrize("config", CONFIGS)
def test_a_decode_batch_of_each_shipped_config_reads_nothing_back(config):
    assert decode_reads(config, batch=2) == {}


def test_the_last_line_is_the_count(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["bench_decode_syncs.py", "--configs", "CornerNet_Squeeze",
                                     "--batch", "1"])
    assert main() == 0
    assert capsys.readouterr().out.splitlines()[-1] == "host reads per decode batch: 0"
