"""The package is the program: the checkout's entry scripts are the command table's, each only
calls its row's command, no module imports a script, and nothing runs a file by path or reaches
into sys.path."""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

from core.utils.command_table import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
# The checkout's entry scripts: its root's Python files but the build's, and tools/*.py.
SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for p in [*ROOT.glob("*.py"),
                                                          *(ROOT / "tools").glob("*.py")]
                 if p.name != "setup.py")
SCRIPT_NAMES = {"train", "test", "demo", *(Path(s).stem for s in SCRIPTS)}
PRODUCT = [p for folder in ("core", "cornernet") for p in (ROOT / folder).rglob("*.py")]


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module)
    return found


def test_the_entry_scripts_are_the_command_table_s():
    """A script added without its row, or a row whose script is missing, fails here."""
    assert sorted(SCRIPTS) == sorted(row.script for row in COMMANDS)


def test_every_entry_script_imports_only_its_row_s_command():
    module_of = {row.script: f"cornernet.commands.{row.module}" for row in COMMANDS}
    for script in SCRIPTS:
        ours = {name for name in imports(ROOT / script) if name not in ("sys", "pathlib")}
        called = {name for name in ours if name.startswith("cornernet.commands.")}
        assert called == {module_of.get(script)}, (script, ours)
        # train.py's early catch; OpenMP's passive wait, set before torch is imported
        assert ours - called <= {"core.engine.stop", "core.utils.threads"}, (script, ours)
        assert f'main(prog="{script}")' in (ROOT / script).read_text(), script


def test_no_module_of_the_package_imports_a_script():
    for path in PRODUCT:
        tops = {name.split(".")[0] for name in imports(path)}
        assert not tops & (SCRIPT_NAMES | {"tools", "_scripts", "_tools"}), path


def test_nothing_runs_a_file_by_path_or_changes_sys_path():
    for path in PRODUCT:
        text = path.read_text()
        assert "runpy" not in text and "sys.path.insert" not in text, path


def test_no_command_starts_another_as_a_process():
    """One command needing another (benchmark exporting) calls its `run` in-process."""
    for path in [*(ROOT / "cornernet").rglob("*.py")]:
        assert "subprocess" not in imports(path), path


def test_the_wheel_maps_no_folder_of_the_checkout_onto_the_package_but_the_configs():
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setup.get("package-dir", {}) == {"cornernet.configs": "configs"}
    assert not [name for name in setup["packages"] if name.split(".")[0] not in ("core",
                                                                                "cornernet")]
