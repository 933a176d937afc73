"""`train`, `evaluate`, `benchmark` and `export` from Python: the commands' `run`, in this
process.

Each returns what its command produced (train's `TrainResult` read from the files the run
wrote, whichever launcher ran it; the others' built in memory), from any thread,
and leaves the process as it found it (`core.engine.process.KEPT`: signal handlers, the
environment, torch's threads, determinism and random states), so that Ctrl-C and a seed set
before work as before in a notebook afterwards. In a script, call them under
`if __name__ == "__main__":` (training's workers import the script again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.deploy.exporter import ExportReport


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


def _options(cls: type, config: str, keywords: dict[str, Any], **named: Any) -> Any:
    """The options value `cls` of an API call, built directly (no argv, no JSON).

    A keyword that is a field of `cls` sets it (None: the command line's default); any other is
    a setting of the config, as --set writes it (`db__input_size` is db.input_size), after an
    `overrides=` given as a {key: value} dict or (key, value) pairs. `named` are the call's own
    arguments for fields (`snapshot` is `testiter`, `path` is `out`): given both ways, refused.
    A keyword that is an option and also a config key (train's `requeue`, `stop_signal`) sets
    both, so `requeue=False` turns off a config's `requeue: true` as `--set requeue=false` did.
    Values are held to the command line's choices (a UsageError naming the keyword)."""
    from core.errors import UsageError
    from core.utils.options import check_choices, split_keywords

    for field_name, value in named.items():
        if value is not None and keywords.get(field_name) is not None:
            raise UsageError(f"{field_name} is given twice: by its own argument and as a "
                             f"keyword; give it once")
    fields, settings = split_keywords(cls, {**keywords, **{key: value for key, value in
                                                           named.items() if value is not None}})
    given = {key: value for key, value in fields.items() if value is not None}
    extra = given.pop("overrides", ())
    extra = tuple(extra.items()) if isinstance(extra, dict) else tuple(tuple(item)
                                                                        for item in extra)
    both = tuple((key, given[key]) for key in _CONFIG_KEYS_TOO if key in given)
    overrides = extra + both + tuple((key.replace("__", "."), value)
                                     for key, value in settings.items())
    options = cls(cfg_file=config, overrides=overrides, **given)
    check_choices(options)
    return options


# Options of train that are also keys of a config (system.requeue, system.stop_signal).
_CONFIG_KEYS_TOO = ("requeue", "stop_signal")


def train(config: str, *, resume: str | int | None = None, fit: bool = True,
          **keywords: Any) -> TrainResult:
    """Train `config` as `cornernet train` does. A keyword that names one of its options
    (core/engine/options.py `TrainOptions`: `workers`, `device`, `config_dir`, `data`, `name`,
    `weights`, `distributed`, ...) sets it, with the command line's defaults; every other
    keyword is a setting of the config (`max_iter=2`, `db__input_size=[255, 255]`, as `--set`).
    `resume` is `--iter` (an iteration or "latest"); `fit=False` is `--no-fit`; an option
    given as None keeps its default. Returns a `TrainResult` read from the run's own files."""
    from core.engine import records
    from core.engine.exits import USER_MISTAKES
    from core.engine.options import TrainOptions

    from .commands import train as command

    options = _options(TrainOptions, config, keywords, start_iter=resume,
                       no_fit=None if fit else True)
    try:
        name, folder = records.where(options)
    except USER_MISTAKES:  # the run says it in its one line, and ends with status 2
        return TrainResult(status=command.run(options))
    before = records.state(folder)
    status = command.run(options)
    return TrainResult(status=status, **records.read(folder, name, before))


def evaluate(config: str, snapshot: int | str | Path | None = None, **keywords: Any
             ) -> dict | None:
    """Evaluate snapshot `snapshot` (an iteration, "best", or a snapshot file; default: the
    final one of the last training) of `config` as `cornernet test` does; returns the metrics
    dict it writes to metrics.json (None for a split without boxes).

    A keyword that is an option of `cornernet test` sets it (`split="training"`, `images=50`,
    `device="cpu"`, `backend="pycocotools"`, `runtime="onnxruntime"`, `onnx=path`,
    `raw_weights=True`, `suffix=...`, `config_dir=...`, ... : the fields of
    `cornernet.commands.test.TestOptions`, with the command line's defaults; None: the
    default); any other changes a setting of the config, as for `train` (`test_scales=[0.5]`,
    `db__top_k=50`)."""
    from .commands import test as command

    # TestOptions reads a snapshot given as text itself, as the command line does
    return command.run(_options(command.TestOptions, config, keywords, testiter=snapshot))


def _snapshot(snapshot: int | str | Path | None) -> int | str | Path | None:
    """A snapshot named in Python as on the command line: 12, "12", "best", or a file."""
    from core.config import snapshot_or_file_arg
    from core.errors import UsageError

    if snapshot is None or isinstance(snapshot, (int, Path)):
        return snapshot
    try:
        return snapshot_or_file_arg(str(snapshot))
    except ValueError as err:
        raise UsageError(f"snapshot {snapshot!r}: {err}") from None


def benchmark(config: str, snapshot: int | str | Path | None = None,
              **keywords: Any) -> list[dict]:
    """`cornernet benchmark` of `config`'s snapshot `snapshot` (an iteration, "best", or a
    snapshot file; default the final one): one dict per row (runtime, precision, AP, AP50, ms,
    size_mb, check), the table printed. Keywords are `BenchmarkOptions`' fields (`rows`,
    `images`, `threads`, `reps`, `device`, `batch`, `json`, `config_dir`, ...), with its
    defaults; other keywords are settings of the config, as for `train`."""
    from .commands import benchmark as command

    return command.run(_options(command.BenchmarkOptions, config, keywords,
                                testiter=_snapshot(snapshot)))


def export(config: str, snapshot: int | str | Path | None = None, *,
           path: str | Path | None = None, runtime: str | None = None,
           precision: str | None = None, **keywords: Any) -> ExportReport:
    """`cornernet export` of `config`'s snapshot `snapshot` (an iteration, "best", or a
    snapshot file; default the final one) to `path` (default: beside the snapshot), for
    `runtime` (default onnxruntime; openvino also writes its IR, as --openvino) at `precision`
    (default the runtime's first): the same checked files, the report printed and returned
    (`ExportReport`: `files`, `identity`, `differences`, ...). Keywords are `ExportOptions`'
    fields (`opset`, `max_map`, `raw_weights`, `image`, `config_dir`), with its defaults; other
    keywords are settings of the config, as for `train`."""
    from .commands import export as command

    return command.run(_options(command.ExportOptions, config, keywords,
                                testiter=_snapshot(snapshot), out=path, runtime=runtime,
                                precision=precision))
