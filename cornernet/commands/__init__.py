"""The commands of `cornernet`, one module each, with one contract:

- `parse_args(argv, prog)`: the command line (argparse), cheap: no torch is imported for it;
- `run(options, log) -> value`: the work, returning what it produced (metrics, files, rows),
  leaving the process as it found it (`core.engine.process.keeps_process`);
- `main(argv, prog) -> int`: the exit status through the one table (core/engine/exits.py).

Which commands there are, and which module and script runs each, is the one table
core/utils/command_table.py: train.py, test.py, demo.py and tools/*.py at the checkout's root call
their row's `main`; `cornernet` (cli.py) dispatches by it; the API (cornernet/api.py) calls `run`.
"""
