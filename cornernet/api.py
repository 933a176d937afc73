"""`train`, `evaluate` and `benchmark` from Python: the commands' `run`, in this process.

Each returns what its command produced (train's `TrainResult` read from the files the run
wrote, whichever launcher ran it; the others' built in memory), from any thread,
and leaves the process as it found it (`core.engine.process.KEPT`: signal handlers, the
environment, torch's threads, determinism and random states), so that Ctrl-C and a seed set
before work as before in a notebook afterwards. In a script, call them under
`if __name__ == "__main__":` (training's workers import the script again).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TrainResult:
    """What `train` produced, read from the files the run's rank 0 wrote (core/engine/
    records.py), so the same whichever launcher ran it: this process, spawned ranks, torchrun
    or srun. Under torchrun or srun each rank's call returns one: rank 0's is whole (another
    rank may read before rank 0 has written its last snapshot).

    Attributes:
        status: the exit status (0: done; 75: stopped to be resumed; 128 + signal: stopped;
            1 or 2: failed, said on stderr).
        snapshots: the snapshot files of the run's folder when it ended.
        best: `<Cfg>_best.pkl` of the run's best evaluation, or None.
        best_ap: its AP (the record the best snapshot holds), or None before any evaluation.
        metrics: the last evaluation's metrics (with its "iteration"), or None.
        evaluations: every evaluation's metrics in the run's metrics.jsonl, in order (a resumed
            run's file continues the one it resumes, so its evaluations come first).
        iteration: the last iteration the records show (None: the run wrote none).
    """

    status: int
    snapshots: list[Path] = field(default_factory=list)
    best: Path | None = None
    best_ap: float | None = None
    metrics: dict | None = None
    evaluations: list[dict] = field(default_factory=list)
    iteration: int | None = None


def _set_args(overrides: dict[str, Any]) -> list[str]:
    """--set items of keyword overrides: `max_iter=2` or `db__input_size=[255, 255]`."""
    return [f"{key.replace('__', '.')}={json.dumps(value)}" for key, value in overrides.items()]


def _argv(config: str, config_dir: str | Path | None, device: str | None,
          overrides: dict[str, Any], *more: str) -> list[str]:
    argv = [config, *more]
    argv += ["--config-dir", str(config_dir)] if config_dir is not None else []
    argv += ["--device", device] if device is not None else []
    sets = _set_args(overrides)
    return argv + (["--set", *sets] if sets else [])


def train(config: str, *, resume: str | int | None = None, fit: bool = True,
          **keywords: Any) -> TrainResult:
    """Train `config` as `cornernet train` does. A keyword that names one of its options
    (core/engine/options.py `TrainOptions`: `workers`, `device`, `config_dir`, `data`, `name`,
    `weights`, `distributed`, ...) sets it, with the command line's defaults; every other
    keyword is a setting of the config (`max_iter=2`, `db__input_size=[255, 255]`, as `--set`).
    `resume` is `--iter` (an iteration or "latest"); `fit=False` is `--no-fit`; an option
    given as None keeps its default. Returns a `TrainResult` read from the run's own files."""
    import dataclasses

    from core.engine import records
    from core.engine.exits import USER_MISTAKES
    from core.engine.options import TrainOptions
    from core.utils.options import split_keywords

    from .commands import train as command

    given, settings = split_keywords(TrainOptions, keywords)
    given = {key: value for key, value in given.items() if value is not None}
    if resume is not None:
        given["start_iter"] = resume
    given.setdefault("no_fit", not fit)
    options = TrainOptions(cfg_file=config, **given)
    options = dataclasses.replace(options, overrides=options.overrides + tuple(settings.items()))
    try:
        name, folder = records.where(options)
    except USER_MISTAKES:  # the run says it in its one line, and ends with status 2
        return TrainResult(status=command.run(options))
    before = records.state(folder)
    status = command.run(options)
    return TrainResult(status=status, **records.read(folder, name, before))


def evaluate(config: str, snapshot: int | str | None = None, *, split: str = "validation",
             config_dir: str | Path | None = None, device: str | None = None,
             images: int | None = None, suffix: str | None = None, backend: str | None = None,
             runtime: str | None = None, onnx: str | Path | None = None,
             raw_weights: bool = False, **overrides: Any) -> dict | None:
    """Evaluate snapshot `snapshot` (an iteration, "best", or a snapshot file) of `config` as
    `cornernet test` does; returns the metrics dict it writes to metrics.json (None for a split
    without boxes). Settings of the config change by keyword, as for `train`."""
    from .commands import test as command

    more = ["--split", split]
    more += ["--testiter", str(snapshot)] if snapshot is not None else []
    more += ["--images", str(images)] if images is not None else []
    more += ["--suffix", suffix] if suffix is not None else []
    more += ["--backend", backend] if backend is not None else []
    more += ["--runtime", runtime] if runtime is not None else []
    more += ["--onnx", str(onnx)] if onnx is not None else []
    more += ["--raw-weights"] if raw_weights else []
    return command.run(command.parse_args(_argv(config, config_dir, device, overrides, *more)))


def benchmark(config: str, snapshot: int | str | None = None, *,
              config_dir: str | Path | None = None, device: str | None = None,
              rows: list[str] | None = None, images: int | None = None,
              threads: list[int] | None = None, reps: int | None = None) -> list[dict]:
    """`cornernet benchmark` of `config`'s snapshot: one dict per row (runtime, precision, AP,
    AP50, ms, size_mb, check)."""
    from .commands import benchmark as command

    argv = [config]
    argv += ["--testiter", str(snapshot)] if snapshot is not None else []
    argv += ["--config-dir", str(config_dir)] if config_dir is not None else []
    argv += ["--device", device] if device is not None else []
    argv += ["--rows", *rows] if rows else []
    argv += ["--images", str(images)] if images is not None else []
    argv += ["--threads", *map(str, threads)] if threads else []
    argv += ["--reps", str(reps)] if reps is not None else []
    return command.run(command.parse_args(argv))
