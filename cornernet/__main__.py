"""`python -m cornernet <command> ...`: the `cornernet` command."""

from .cli import entry

entry()
