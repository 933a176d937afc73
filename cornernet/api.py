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
    from core.utils.options import split_keywords

    from .commands import test as command

    chosen, settings = split_keywords(command.TestOptions, keywords)
    chosen = {key: value for key, value in chosen.items() if value is not None}
    overrides = tuple((key.replace("__", "."), value) for key, value in settings.items())
    options = command.TestOptions(cfg_file=config, testiter=snapshot, overrides=overrides,
                                  **chosen)
    return command.run(options)


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


def _options(cls: type, config: str, snapshot: int | str | Path | None,
             keywords: dict[str, Any]) -> Any:
    """The options value `cls` of a call: keywords that are its fields set them (None: the
    default), the others are settings of the config, as --set writes them (`db__input_size`
    is db.input_size)."""
    from core.utils.options import split_keywords

    fields, settings = split_keywords(cls, keywords)
    given = {key: value for key, value in fields.items() if value is not None}
    overrides = tuple((key.replace("__", "."), value) for key, value in settings.items())
    return cls(cfg_file=config, testiter=_snapshot(snapshot), overrides=overrides, **given)


def benchmark(config: str, snapshot: int | str | Path | None = None,
              **keywords: Any) -> list[dict]:
    """`cornernet benchmark` of `config`'s snapshot `snapshot` (an iteration, "best", or a
    snapshot file; default the final one): one dict per row (runtime, precision, AP, AP50, ms,
    size_mb, check), the table printed. Keywords are `BenchmarkOptions`' fields (`rows`,
    `images`, `threads`, `reps`, `device`, `batch`, `json`, `config_dir`, ...), with its
    defaults; other keywords are settings of the config, as for `train`."""
    from .commands import benchmark as command

    return command.run(_options(command.BenchmarkOptions, config, snapshot, keywords))


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

    keywords = {**keywords, "out": path, "runtime": runtime, "precision": precision}
    return command.run(_options(command.ExportOptions, config, snapshot, keywords))
