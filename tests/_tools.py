"""A command of cornernet.commands by the name of its file in tools/, so that tests call its
functions in-process."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
# tools/<name>.py: the command module it calls
MODULES = {"check_data": "check", "plot_metrics": "plot", "analyze_results": "analyze_results",
           "analyze_model": "analyze_model", "benchmark": "benchmark", "convert": "convert",
           "export": "export", "submit": "submit"}


def load_tool(name: str) -> ModuleType:
    """cornernet.commands' module of tools/<name>.py."""
    return importlib.import_module(f"cornernet.commands.{MODULES.get(name, name)}")
