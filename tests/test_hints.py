"""core/utils/hints.py: a hint names the checkout's forms in a checkout and the installed
command's forms elsewhere, and no message of the code writes a checkout's form by hand."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.utils import hints
from cornernet.cli import COMMANDS as SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[1]


def test_this_repository_is_a_checkout():
    assert hints.is_checkout() is True
    assert hints.install("plot") == 'pip install -e ".[plot]"'
    assert hints.command("tools/export.py", "CornerNet_Tiny") == \
        "python tools/export.py CornerNet_Tiny"
    assert hints.tolerance_doc() == "tests/data/reference/README.md section 6"
    assert (ROOT / hints.TOLERANCE_DOC.split()[0]).is_file()


@pytest.mark.parametrize("pyproject", [None, 'name = "someone-else"\n'])
def test_a_folder_without_this_project_is_not_a_checkout(tmp_path, pyproject):
    other, ours = tmp_path / "other", tmp_path / "ours"  # two folders: the answer is cached
    for root in (other, ours):
        (root / "core").mkdir(parents=True)
    if pyproject is not None:
        (other / "pyproject.toml").write_text(pyproject)
    assert hints.is_checkout(other) is False
    (ours / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    assert hints.is_checkout(ours) is True


def test_installed_forms_name_the_distribution_and_the_command():
    assert hints.install("onnx", checkout=False) == 'pip install "cornernet-lite-modern[onnx]"'
    assert hints.command("test.py", "Cfg --testiter 5", checkout=False) == \
        "cornernet test Cfg --testiter 5"
    assert hints.command("tools/analyze_results.py", checkout=False) == \
        "cornernet analyze results"
    assert hints.command("tools/plot_metrics.py", checkout=False) == "cornernet plot"
    assert "README" not in hints.tolerance_doc(checkout=False)


def test_every_script_exists_and_every_command_is_the_cli_s():
    for script, name in hints.COMMANDS.items():
        assert (ROOT / script).is_file(), script
        assert name.split()[0] in SUBCOMMANDS, name
        # the checkout's entry point runs that very command (cornernet/commands/<module>.py)
        module = SUBCOMMANDS[name.split()[0]] if " " not in name else name.replace(" ", "_")
        assert f"cornernet.commands.{module}" in (ROOT / script).read_text(), (script, name)


def _message_strings(path: Path) -> list[str]:
    """The string constants of a file that are not docstrings or comments."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and node.body and isinstance(node.body[0], ast.Expr)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def test_no_message_writes_a_checkout_form_by_hand():
    files = [*ROOT.glob("core/**/*.py"), *ROOT.glob("cornernet/**/*.py"),
             *ROOT.glob("tools/*.py")]
    found = [(path.relative_to(ROOT), text) for path in files if path.name != "hints.py"
             for text in _message_strings(path)
             if "pip install -e" in text or "shared/reference" in text
             or "python tools/" in text or "python test.py" in text]
    assert found == []
