"""The project's commands: the one table of them.

Each row is one command as the user types it: its words after `cornernet` ("export", "analyze
results"), its module of `cornernet.commands`, its line in `cornernet --help`, and the script of
a checkout that runs it (train.py, test.py, demo.py, tools/*.py). `cornernet`'s dispatch and its
help, analyze's kinds, the messages that name a command (core/utils/hints.py), the checkout's
scripts and the tests' in-process runner are all read from here; test_commands.py holds
the modules and scripts of the checkout to it.

A command of two words is one command of the first word (`analyze`), whose module of that name
runs the second word's row. Core imports no `cornernet`: this table names modules, it does not
import them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import lookup


@dataclass(frozen=True)
class Command:
    """One command: `cornernet <words>`, run by `cornernet.commands.<module>.main`."""

    words: str
    module: str
    help: str
    script: str  # the checkout's file that runs it, from the checkout's root

    @property
    def name(self) -> str:
        """The first word: what `cornernet` dispatches on."""
        return self.words.split()[0]


COMMANDS: tuple[Command, ...] = (
    Command("train", "train", "train a detector", "train.py"),
    Command("test", "test", "evaluate a snapshot on a split: COCO AP", "test.py"),
    Command("predict", "predict", "detect in pictures, folders, videos, cameras, streams",
            "demo.py"),
    Command("export", "export", "write a snapshot as ONNX, checked against torch",
            "tools/export.py"),
    Command("analyze results", "analyze_results", "what limits AP: errors by kind, per class",
            "tools/analyze_results.py"),
    Command("analyze model", "analyze_model",
            "parameters, FLOPs and activation memory of a model", "tools/analyze_model.py"),
    Command("check", "check", "counts, problems and what the network is shown",
            "tools/check_data.py"),
    Command("convert", "convert", "YOLO or VOC to COCO json, COCO to YOLO", "tools/convert.py"),
    Command("benchmark", "benchmark", "AP, speed and size in every runtime and precision",
            "tools/benchmark.py"),
    Command("submit", "submit", "submit a training run to SLURM (submitit)", "tools/submit.py"),
    Command("plot", "plot", "a run's curves from its metrics file", "tools/plot_metrics.py"),
)


def command(words: str) -> Command:
    """The row of `words` ("export", "analyze results"); an unknown one lists the valid ones."""
    return lookup({row.words: row for row in COMMANDS}, words, "command")


def dispatch() -> dict[str, str]:
    """`cornernet`'s first word -> the module of cornernet.commands that runs it: a row's own,
    or for a command of two words the module named after its first word."""
    return {row.name: row.module if row.words == row.name else row.name for row in COMMANDS}


def kinds(name: str) -> dict[str, str]:
    """The second words of command `name` (`analyze`) -> the module that runs each."""
    return {row.words.split()[1]: row.module for row in COMMANDS
            if row.name == name and row.words != name}


def help_rows() -> list[tuple[str, str]]:
    """The rows of `cornernet --help`: (the words, what it does); the scripts at the checkout's
    root, those of the original project, are named beside what they do."""
    return [(row.words, f"{row.help} ({row.script})" if "/" not in row.script else row.help)
            for row in COMMANDS]
