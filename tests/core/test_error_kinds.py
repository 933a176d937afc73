"""core.errors: every error class of core/ is of one kind, the kind alone decides how a script
ends, and the exit table costs no torch (nor does plotting a metrics file)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import subprocess
import sys

import core
from core.engine.exits import describe
from core.errors import RunFailure, Stopped, UserMistake
from core.utils.files import StorageError
from tests._train_helpers import REPO

HEAVY = ("torch", "cv2")


def core_error_classes() -> list[type]:
    classes = set()
    for info in pkgutil.walk_packages(core.__path__, "core."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == info.name:
                classes.add(cls)
    return sorted(classes, key=lambda cls: f"{cls.__module__}.{cls.__name__}")


def test_every_error_class_of_core_is_of_exactly_one_kind():
    classes = core_error_classes()
    assert len(classes) >= 15  # the walk found them: ConfigError ... ShmTooSmall
    # StorageError is a family whose members each name their kind; Stopped is a stop, no error
    unkinded = [cls for cls in classes if cls not in (UserMistake, RunFailure, StorageError,
                                                      Stopped)
                and issubclass(cls, UserMistake) == issubclass(cls, RunFailure)]
    assert not unkinded, unkinded


def test_the_table_decides_by_kind_alone():
    class NewMistake(UserMistake):
        pass

    class NewFailure(RunFailure):
        def explain(self) -> str:
            return f"the cause: {self}"

    assert describe(NewMistake("a\n  b")) == (2, "a b")
    assert describe(NewFailure("x")) == (1, "the cause: x")


def _imported_after(code: str) -> list[str]:
    """Which of HEAVY a fresh interpreter has imported after running `code`."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_importing_the_exit_table_imports_no_torch():
    assert _imported_after("import core.engine.exits") == []


def test_plotting_a_metrics_file_imports_no_torch(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(json.dumps({"iteration": it, "loss": 1.0 / it, "focal": 0.5,
                                             "terms": ["focal"], "lr": 0.001})
                                 for it in range(1, 5)) + "\n")
    out = tmp_path / "m.png"
    code = (f"from cornernet.commands import plot as plot_metrics; "
            f"assert plot_metrics.main([{str(metrics)!r}, '--out', {str(out)!r}]) == 0")
    assert _imported_after(code) == []
    assert out.stat().st_size > 1000
