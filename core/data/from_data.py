"""A run's config from a named config and `--data PATH`: the model and training settings of the
config, the dataset, classes and splits of the data, the sizes fitted to the data.

`data_config` resolves it in this order, each step said in one line through `log`:

1. the export at PATH is recognised (core/dbs/recognise.py): the dataset and its db keys, the
   class names (their count is `db.categories`), the split keys; the config's db keys of
   other datasets (Shapes' image counts, say) go back to their defaults;
2. an export with one split gets a seeded validation share (core/dbs/holdout.py);
3. unless `fit` is false, the data check's advice (core/data/advice.py) is applied: input size,
   crop scales, test scales; a `--set` of one of those keys keeps the config's group;
4. the `--set` overrides, last, so that they win.

The result is the run's config under its name (`system.snapshot_name`, `system.model` the
config's model), with absolute folders, written as `<cache_dir>/nnet/<name>/config.json` with
`data.json` (what was recognised, held out and fitted): `load_config(name)` then finds it where
no configs/<name>.json exists, so the name works for test, predict, export and resuming.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import (
    CONFIG_DIR,
    ConfigError,
    SystemConfig,
    apply_overrides,
    check_db_config,
    config_path,
    load_config,
    overrides_of,
)
from ..config.db_keys import declared_keys, owners
from ..config.fine_tune import fine_tune_changes
from ..config.options import Overrides
from ..dbs import datasets
from ..dbs.holdout import hold_out
from ..dbs.recognise import recognise
from ..utils.files import write_file_atomic
from .advice import settings_advice

Log = Callable[[str], None]
DATA_RECORD = "data.json"
FIT_SAMPLES = 64  # training images whose crops are drawn to measure what the crops keep


def run_name(config: str, data: Path) -> str:
    """The default run name, `<config>-<data folder>` (a file's folder), as a config name."""
    path = Path(data).expanduser().absolute()
    folder = path.parent.name if path.is_file() else path.name
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{config}-{folder}").strip("-.")


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _show(value: Any) -> str:
    """A setting as --set writes it, floats to 3 decimals."""
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list):
        return "[" + ",".join(_show(v) for v in value) + "]"
    return json.dumps(value)


def fit_line(advice: dict, before: dict) -> str:
    """The one line of the fitted settings: each change, and the share of objects the
    training crops keep before and after."""
    if "note" in advice:
        return f"fit: nothing fitted: {advice['note']}"
    after = f" -> {1 - advice['removed_after']:.1%}" if advice["changes"] else ""
    keep = (f"the training crops keep {1 - advice['removed_today']:.1%} of the objects{after} "
            f"(images of median long side {advice['median_long_side']:g} px, small objects "
            f"{advice['small_object_px']:.0f} px)")
    if not advice["changes"]:
        return f"fit: the config's input size, crop scales and test scales fit the data; {keep}"
    changes = ", ".join(f"db.{key} {_show(before[key])} -> {_show(value)}"
                        for key, value in advice["changes"].items() if key != "rand_scales")
    return f"fit: {changes}; {keep}; --no-fit keeps the config's"


def use_data(system: SystemConfig, db: dict, data: Path, work: Path, log: Log = print
             ) -> tuple[SystemConfig, dict, dict]:
    """`system` and `db` reading the export at `data` (steps 1 and 2 of the module docstring):
    its dataset, db keys, classes and splits, one split cut in two into `work`; and the
    record of what was found and held out."""
    found = recognise(data, work)
    log(found.line())
    for note in found.notes:
        log(f"warning: {note}")
    declared = declared_keys()
    db = {key: declared[key].default if key in declared and found.dataset not in owners(key)
          else value for key, value in db.items()}
    db = check_db_config({**db, **found.db, "categories": len(found.names)},
                         f"--data {found.source}")
    system = system.replace(dataset=found.dataset, train_split=found.train,
                            val_split=found.val or found.train,
                            test_split=found.test or found.val or found.train)
    record: dict[str, Any] = {"data": str(found.source), "layout": found.layout,
                              "dataset": found.dataset, "names": found.names, "holdout": None,
                              "fit": None}
    if found.val is None:
        split_db, cut = hold_out(datasets[found.dataset], db, found.train,
                                 system.dataset_settings(), work, log)
        db = check_db_config({**{k: declared[k].default if k in declared else v
                                 for k, v in db.items()}, **split_db}, "the held-out split")
        system = system.replace(dataset="COCO", train_split="train", val_split="val",
                                test_split="val")
        record["holdout"] = cut
        log(f"split: '{found.train}' is the only split: {cut['val_images']} of its "
            f"{cut['train_images'] + cut['val_images']} images held out for validation (those "
            f"whose file name hashes below {cut['fraction']:g}, seed {cut['seed']}: the same "
            f"on every run and machine), {cut['train_images']} train")
    return system, db, record


def run_folder(config: str, data: Path, name: str | None = None, overrides: Overrides = (),
               config_dir: Path | None = CONFIG_DIR) -> tuple[str, Path]:
    """(the run's name, its folder) of `config` on the export at `data`: where `data_config`
    writes its config and the training its snapshots, known before either runs."""
    name = name or run_name(config, data)
    folders, _ = load_config(config, config_dir, overrides=overrides)  # where --set puts them
    return name, folders.replace(snapshot_name=name).snapshot_dir


def data_config(config: str, data: Path, name: str | None = None,
                overrides: Overrides = (), fit: bool = True,
                config_dir: Path | None = CONFIG_DIR, log: Log = print,
                write: bool = True,
                weights: str | Path | None = None) -> tuple[SystemConfig, dict, dict]:
    """(system config, db config, data record) of `config` trained on the export at `data`, as
    the module docstring says; written into the run folder unless `write` is false. `weights`
    (--weights FILE): the fine-tuning settings go into the record, where the user's --set does
    not name them (the record's `pretrain` then tells load_config they are applied)."""
    name = name or run_name(config, data)
    if "snapshot_name" in overrides_of(overrides)["system"]:
        raise ConfigError("--set system.snapshot_name with --data: the run's name is --name")
    if name != config:
        try:
            found_config = config_path(name, config_dir)
        except ConfigError:
            found_config = None
        if found_config is not None:
            raise ConfigError(f"--name {name}: {found_config} has that name, and a config file "
                              f"wins over a run's record; choose another --name")
    system, db = load_config(config, config_dir)
    folders, _ = load_config(config, config_dir, overrides=overrides)  # where --set puts them
    system = system.replace(snapshot_name=name, model=system.model_name,
                            data_dir=str(folders.data_dir), cache_dir=str(folders.cache_dir),
                            result_dir=str(folders.result_dir.parent))
    run_dir = system.snapshot_dir
    system, db, found = use_data(system, db, Path(data), run_dir, log)
    record = {"config": config, **found}
    if fit:
        held = frozenset(overrides_of(overrides)["db"])
        train_db = datasets[system.dataset](db, split=system.train_split,
                                            settings=system.dataset_settings(),
                                            log=lambda text: None)
        advice = settings_advice(train_db, system.sampling_function, FIT_SAMPLES, system.seed,
                                 held)
        log(fit_line(advice, db))
        db = check_db_config({**db, **advice.get("changes", {})}, "the fitted settings")
        record["fit"] = {key: advice[key] for key in advice if key != "set"}
    else:
        log(f"fit: none (--no-fit): the config's db.input_size {_show(db['input_size'])}, crop "
            f"scales {_show(db['rand_scales'])}, db.test_scales {_show(db['test_scales'])}")
    system, db = apply_overrides(system, db, overrides, f"{config} on --data {record['data']}")
    if weights is not None:
        system = system.update_config(fine_tune_changes(
            weights, system.learning_rate, system.warmup_iters, system.max_iter,
            overrides_of(overrides)["system"]), f"{config} on --data with --weights")
    if write:
        run_dir.mkdir(parents=True, exist_ok=True)
        for file, content in (("config.json", {"system": _plain(dict(system.full)),
                                               "db": _plain(db)}),
                              (DATA_RECORD, _plain(record))):
            text = (json.dumps(content, indent=2) + "\n").encode()
            write_file_atomic(run_dir / file, lambda out, text=text: out.write(text))
        log(f"run '{name}': its config is {run_dir / 'config.json'}; `cornernet test {name}`, "
            f"`predict {name}`, `export {name}` and `train {name} --iter N` find it by name")
    return system, db, record
