"""MLflow and Weights & Biases writers: the values every other writer gets, sent to a tracker.

Turned on by `system.trackers` (["mlflow", "wandb"]) or CORNERNET_TRACKERS=mlflow,wandb; where
they go by `system.mlflow_uri` (else MLFLOW_TRACKING_URI, else ./mlruns), `mlflow_experiment`
and `wandb_project` (else WANDB_PROJECT; WANDB_MODE=offline works as W&B documents). A new run
records the config as parameters; the metrics lines follow as `Metrics.write` hands them over;
the report pictures go up as artifacts at the end. The tracked run's id is kept in
`trackers.json` in the snapshot folder, so that a resumed run continues the same tracked run.
A tracker whose package is missing, whose server cannot be reached or that refuses a call is
one warning line, and the run goes on without it. Only rank 0 opens trackers.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..utils import hints
from ..utils.env import setting
from ..utils.files import move_aside

TRACKERS = ("mlflow", "wandb")
# written by metrics.py whenever installed; naming it asks to be told when it is not
BUILT_IN = ("tensorboard",)
RUN_IDS = "trackers.json"
PARAM_CHUNK = 100  # MLflow takes at most 100 parameters a call


def wanted(system: Mapping[str, Any], env: Mapping[str, str] | None = None) -> list[str]:
    """The trackers asked for by the config and CORNERNET_TRACKERS, in TRACKERS order."""
    names = set(system.get("trackers") or [])
    names |= {n.strip() for n in str(setting("CORNERNET_TRACKERS", env)).split(",") if n.strip()}
    return sorted(names, key=lambda n: (TRACKERS.index(n) if n in TRACKERS else 99, n))


def flat(record: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"system.learning_rate": "0.00025", ...}: a nested config as tracker parameters."""
    out = {}
    for key, value in record.items():
        if isinstance(value, Mapping):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value) if not isinstance(value, str) else value
    return out


def _scalars(values: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in values.items():
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                math.isfinite(value):
            out[key] = float(value)
    return out


class Tracker:
    """One tracker; a failing call is said once and turns it off."""

    name = ""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.off = False

    def _guard(self, what: str, call: Callable[[], None]) -> None:
        if self.off:
            return
        try:
            call()
        except Exception as err:  # noqa: BLE001 - a tracker must never stop training
            self.off = True
            self.log(warning(self.name, f"{what} failed", err))

    def write(self, iteration: int, values: dict[str, Any]) -> None:
        scalars = _scalars(values)
        if scalars:
            self._guard("logging metrics", lambda: self._metrics(iteration, scalars))

    def artifacts(self, paths: Iterable[Path]) -> None:
        paths = [Path(p) for p in paths if Path(p).is_file()]
        if paths:
            self._guard("uploading the report", lambda: self._artifacts(paths))

    def close(self) -> None:
        self._guard("closing the run", self._close)


class MlflowTracker(Tracker):
    name = "MLflow"

    def __init__(self, system: Mapping[str, Any], params: dict[str, str], run_id: str | None,
                 log: Callable[[str], None]) -> None:
        super().__init__(log)
        # A server that is down would otherwise be retried for minutes at every call.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=system.get("mlflow_uri"))
        if run_id is not None:
            self.run_id = self.client.get_run(run_id).info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            return
        name = system.get("mlflow_experiment") or "cornernet-lite"
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self.client.create_experiment(name))
        self.run_id = self.client.create_run(
            experiment_id, run_name=system.get("snapshot_name")).info.run_id
        items = [Param(k, v[:6000]) for k, v in params.items()]
        for start in range(0, len(items), PARAM_CHUNK):
            self.client.log_batch(self.run_id, params=items[start:start + PARAM_CHUNK])

    def _metrics(self, iteration: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(1000 * time.time())
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, iteration)
                                                    for k, v in scalars.items()])

    def _artifacts(self, paths: list[Path]) -> None:
        for path in paths:
            self.client.log_artifact(self.run_id, str(path), artifact_path="report")

    def _close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbTracker(Tracker):
    name = "W&B"

    def __init__(self, system: Mapping[str, Any], params: dict[str, str], run_id: str | None,
                 folder: Path, log: Callable[[str], None]) -> None:
        super().__init__(log)
        import wandb

        self.run = wandb.init(project=system.get("wandb_project") or os.environ.get(
                                  "WANDB_PROJECT") or "cornernet-lite",
                              name=system.get("snapshot_name"), id=run_id,
                              resume="allow" if run_id else None, config=params,
                              dir=os.environ.get("WANDB_DIR") or str(folder),
                              reinit="create_new")
        self.run_id = self.run.id

    def _metrics(self, iteration: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=iteration)

    def _artifacts(self, paths: list[Path]) -> None:
        for path in paths:
            self.run.save(str(path), base_path=str(path.parent), policy="now")

    def _close(self) -> None:
        self.run.finish()


def warning(name: str, what: str, err: BaseException) -> str:
    first = (str(err).strip().splitlines() or [""])[0][:300]
    return (f"warning: {name} {what} ({type(err).__name__}: {first}); training goes on "
            f"without it")


def read_run_ids(path: Path, log: Callable[[str], None]) -> dict[str, str]:
    """The tracked runs' ids that `path` (trackers.json) keeps, {} when there is none. A damaged
    one (cut short, not JSON, not {tracker: id}) is read as a damaged snapshot is: moved aside
    to trackers.aside<k>.json (k the first free number), named in a warning, and the run goes
    on with new tracked runs; nothing is deleted."""
    if not path.is_file():
        return {}
    try:
        ids = json.loads(path.read_text())
        if isinstance(ids, dict) and all(isinstance(k, str) and isinstance(v, str)
                                         for k, v in ids.items()):
            return ids
        why = f"not a {{tracker: run id}} object but {type(ids).__name__}"
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        why = f"{type(err).__name__}: {err}"
    aside = move_aside(path)
    log(f"warning: {path} cannot be read ({why}); moved aside to {aside.name}, and the "
        f"trackers start new runs (the earlier runs' ids may be in {aside.name})")
    return {}


def open_trackers(system: Mapping[str, Any], db: Mapping[str, Any], folder: Path, start: int,
                  log: Callable[[str], None], enabled: bool = True) -> list[Tracker]:
    """The trackers asked for, each opened or said in one warning. `folder`: the snapshot
    folder, where trackers.json keeps the tracked runs' ids for a resume (`start` > 0)."""
    names = wanted(system) if enabled else []
    if not names:
        return []
    ids_file = folder / RUN_IDS
    ids = read_run_ids(ids_file, log) if start > 0 else {}
    params = flat({"system": system, "db": db})
    opened: list[Tracker] = []
    for name in names:
        try:
            if name == "mlflow":
                opened.append(MlflowTracker(system, params, ids.get(name), log))
            elif name == "wandb":
                opened.append(WandbTracker(system, params, ids.get(name), folder, log))
            elif name in BUILT_IN:
                continue
            else:
                log(f"warning: system.trackers names '{name}', not one of "
                    f"{', '.join(TRACKERS + BUILT_IN)}; training goes on without it")
                continue
        except ImportError as err:
            log(warning(name, "is not installed", err).replace(
                "; training", f" ({hints.install(name)}); training"))
            continue
        except Exception as err:  # noqa: BLE001 - unreachable or misconfigured: warn, go on
            log(warning(name, "could not be opened", err))
            continue
        ids[name] = opened[-1].run_id
    folder.mkdir(parents=True, exist_ok=True)
    ids_file.write_text(json.dumps(ids))
    return opened
