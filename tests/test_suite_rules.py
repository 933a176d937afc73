"""The test suite's own rules: a test module imports no other test module (what tests share is
in a helper, tests/_*.py), and conftest.py imports nothing of bench/ (the tests' data rule is
tests/_data.py)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported(path: Path) -> set[str]:
    """The modules `path` imports, anywhere in it (a function's late import too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_no_test_module_imports_another():
    found = {f"{path.name} imports {name}" for path in sorted(TESTS.rglob("*.py"))
             for name in imported(path)
             if name.split(".")[-1].startswith("test_") and name.split(".")[0] in
             ("tests", name.split(".")[-1])}
    assert not found, sorted(found)


def test_conftest_imports_nothing_of_bench():
    found = {name for path in TESTS.rglob("conftest.py") for name in imported(path)
             if name == "bench" or name.startswith("bench.")}
    assert not found, sorted(found)


# The suite is laid out like the code: tests/core/<package>/ for each package of core/ (its
# floors), tests/commands/, tests/api/, tests/process/ (the processes, launchers and clusters,
# where most of the slow tests live) and tests/bench/; only the suite-wide rules at the top.
SURFACES = {"commands", "api", "process", "bench"}
TOP = {"test_contracts.py", "test_suite_rules.py"}


def test_every_test_module_is_in_the_folder_of_what_it_tests():
    packages = {path.name for path in (TESTS.parent / "core").iterdir()
                if (path / "__init__.py").is_file()}
    misplaced = []
    for path in sorted(TESTS.rglob("test_*.py")):
        parts = path.relative_to(TESTS).parts
        placed = (len(parts) == 1 and parts[0] in TOP
                  or len(parts) == 2 and parts[0] in SURFACES | {"core"}
                  or len(parts) == 3 and parts[0] == "core" and parts[1] in packages)
        if not placed:
            misplaced.append("/".join(parts))
    assert not misplaced, misplaced
    folders = {path.name for path in (TESTS / "core").iterdir() if path.is_dir()
               and path.name != "__pycache__"}
    assert folders <= packages, folders - packages
