"""The settings of a run that starts from trained weights (`train --weights FILE`).

A config's learning rate and warm-up are those of training from scratch: applied to trained
weights whose class heads are new, the first large steps wash out much of what the backbone
learned. So `--weights` lowers the learning rate to a tenth of the config's and warms up over
a tenth of the run (at most WARMUP_ITERS iterations), unless `--set` gives either; nothing is
frozen unless `system.freeze` says so (which prefixes fit depends on the model and the data).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError

LR_FACTOR = 0.1  # the fine-tuning learning rate: the config's times this
WARMUP_ITERS = 100  # the fine-tuning warm-up: a tenth of the run, at most this many iterations


def fine_tune_changes(weights: str | Path, learning_rate: float, warmup_iters: int,
                      max_iter: int, given: dict[str, Any]) -> dict[str, Any]:
    """The system keys `--weights FILE` sets: `pretrain` (FILE, absolute), and the fine-tuning
    learning rate and warm-up where the user's --set (`given`: its system keys) does not name
    them. A FILE that is not there is a ConfigError, before anything starts."""
    path = Path(weights).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"--weights {weights}: no such file (a snapshot of this project, a "
                          f"<Cfg>_best.pkl or an official CornerNet-Lite file)")
    if "pretrain" in given:
        raise ConfigError(f"--weights {weights} and --set system.pretrain={given['pretrain']} "
                          f"both name the starting weights; give one")
    changes: dict[str, Any] = {"pretrain": str(path)}
    if "learning_rate" not in given:
        changes["learning_rate"] = learning_rate * LR_FACTOR
    if "warmup_iters" not in given:
        changes["warmup_iters"] = max(warmup_iters, min(WARMUP_ITERS, max(max_iter // 10, 1)))
    return changes


def fine_tune_line(pretrain: str, learning_rate: float, warmup_iters: int,
                   freeze: list[str] | None) -> str:
    """The one line that states a fine-tuning run's settings (the resolved ones)."""
    return (f"fine-tuning from {pretrain}: learning rate {learning_rate:g}, warm-up "
            f"{warmup_iters} iterations, frozen: {', '.join(freeze) if freeze else 'nothing'} "
            f"(--weights' defaults: a tenth of the config's learning rate, a warm-up of a tenth "
            f"of the run up to {WARMUP_ITERS}; --set system.learning_rate, system.warmup_iters "
            f"or system.freeze changes them)")
