"""`train` and `evaluate` from Python: the scripts' work, returning what they print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.config import load_config

from .cli import load_script


def _set_args(overrides: dict[str, Any]) -> list[str]:
    """--set items of keyword overrides: `max_iter=2` or `db__input_size=[255, 255]`."""
    return [f"{key.replace('__', '.')}={json.dumps(value)}" for key, value in overrides.items()]


def train(config: str, config_dir: str | Path | None = None, workers: int = 2,
          device: str | None = None, resume: str = "0", **overrides: Any) -> dict[str, Any]:
    """Train `config` as `python train.py` does, with settings changed by keyword
    (`max_iter=2`, `db__input_size=[255, 255]`).

    Returns {"status": exit status (0: done), "snapshots": [paths], "best": path or None,
    "best_ap": the best validation AP or None, "metrics": the last evaluation's metrics}.
    """
    script = load_script("train")
    argv = [config, "--workers", str(workers), "--iter", resume]
    argv += ["--config-dir", str(config_dir)] if config_dir is not None else []
    argv += ["--device", device] if device is not None else []
    sets = _set_args(overrides)
    args = script.parse_args(argv + (["--set", *sets] if sets else []))
    status = script.launch(args, script.train)
    system_config, _ = load_config(config, args.config_dir, overrides=args.overrides)
    folder = system_config.snapshot_dir
    evaluations = []
    if (folder / "metrics.jsonl").is_file():
        for line in (folder / "metrics.jsonl").read_text().splitlines():
            record = json.loads(line)
            if "AP" in record or "eval/AP" in record:
                evaluations.append(record)
    aps = [r.get("AP", r.get("eval/AP")) for r in evaluations]
    best = folder / f"{system_config.snapshot_name}_best.pkl"
    return {"status": status, "snapshots": sorted(folder.glob("*.pkl")),
            "best": best if best.is_file() else None,
            "best_ap": max(aps) if aps else None,
            "metrics": evaluations[-1] if evaluations else None}


def evaluate(config: str, snapshot: int | str | None = None, split: str = "validation",
             config_dir: str | Path | None = None, device: str | None = None,
             *options: str, **overrides: Any) -> dict | None:
    """Evaluate snapshot `snapshot` of `config` as `python test.py` does; returns the metrics
    dict it writes to metrics.json (None for a split without boxes). `options` are more
    test.py options (e.g. "--images", "10")."""
    script = load_script("test")
    argv = [config, "--split", split, *options]
    argv += ["--testiter", str(snapshot)] if snapshot is not None else []
    argv += ["--config-dir", str(config_dir)] if config_dir is not None else []
    argv += ["--device", device] if device is not None else []
    sets = _set_args(overrides)
    return script.main(script.parse_args(argv + (["--set", *sets] if sets else [])))
