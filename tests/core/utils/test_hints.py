"""core/utils/hints.py and core/utils/layout.py: one rule says whether this is a checkout and
where configs and data live; a hint names a command by its words in the one table and renders it
in the checkout's form in a checkout and the installed command's form elsewhere; no message of
the code writes a checkout's form, or a script, by hand."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import core.config
from core.errors import ConfigError
from core.utils import hints, layout
from core.utils.command_table import COMMANDS

ROOT = Path(__file__).resolve().parents[3]


def test_this_repository_is_a_checkout_with_its_configs_and_data_here():
    assert layout.is_checkout() is True and layout.CHECKOUT is True
    assert layout.PROJECT_ROOT == ROOT and layout.CONFIG_DIR == ROOT / "configs"
    assert core.config.PROJECT_ROOT is layout.PROJECT_ROOT  # one rule, imported
    assert core.config.CONFIG_DIR is layout.CONFIG_DIR
    assert hints.install("plot") == 'pip install -e ".[plot]"'
    assert hints.command("export", "CornerNet_Tiny") == "python tools/export.py CornerNet_Tiny"
    assert hints.command("analyze results") == "python tools/analyze_results.py"
    assert hints.tolerance_doc() == "tests/data/reference/README.md section 6"
    assert (ROOT / hints.TOLERANCE_DOC.split()[0]).is_file()


@pytest.mark.parametrize("pyproject", [None, 'name = "someone-else"\n'])
def test_a_folder_without_this_project_is_not_a_checkout(tmp_path, pyproject):
    other, ours = tmp_path / "other", tmp_path / "ours"  # two folders: the answer is cached
    for root in (other, ours):
        (root / "core").mkdir(parents=True)
    if pyproject is not None:
        (other / "pyproject.toml").write_text(pyproject)
    assert layout.is_checkout(other) is False
    (ours / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    assert layout.is_checkout(ours) is True


def test_installed_forms_name_the_distribution_and_the_command():
    assert hints.install("onnx", checkout=False) == 'pip install "cornernet-lite-modern[onnx]"'
    assert hints.command("test", "Cfg --testiter 5", checkout=False) == \
        "cornernet test Cfg --testiter 5"
    assert hints.command("analyze results", checkout=False) == "cornernet analyze results"
    assert hints.command("plot", checkout=False) == "cornernet plot"
    assert hints.command("predict", checkout=True) == "python demo.py"
    assert "README" not in hints.tolerance_doc(checkout=False)


def test_a_command_is_named_by_its_words_never_by_a_script():
    with pytest.raises(ConfigError, match="unknown command 'tools/export.py'; valid command "
                                          "names: analyze model, analyze results, benchmark"):
        hints.command("tools/export.py")


def test_only_the_layout_decides_what_a_checkout_is():
    deciders = [path.relative_to(ROOT).as_posix()
                for path in [*ROOT.glob("core/**/*.py"), *ROOT.glob("cornernet/**/*.py")]
                if "pyproject.toml" in path.read_text() or "parents[2]" in path.read_text()]
    assert deciders == ["core/utils/layout.py"]


def _message_strings(path: Path) -> list[str]:
    """The string constants of a file that are not docstrings or comments."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and node.body and isinstance(node.body[0], ast.Expr)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


# A script of the table named in a message, e.g. "run test.py again", "(tools/export.py)".
SCRIPT = re.compile(r"(?<![\w/.])(?:" + "|".join(re.escape(row.script) for row in COMMANDS)
                    + r")(?![\w])")


def test_no_message_writes_a_checkout_form_or_a_script_by_hand():
    """Messages ask hints.command("export") for the user's form. The command modules' help texts
    (cornernet/commands/, being rewritten with their options in issue 45) are left out."""
    files = [*ROOT.glob("core/**/*.py"), *ROOT.glob("cornernet/*.py"), *ROOT.glob("tools/*.py")]
    found = [(path.relative_to(ROOT), text) for path in files if path.name != "hints.py"
             for text in _message_strings(path)
             if "pip install -e" in text or "shared/reference" in text
             or "python tools/" in text or "python test.py" in text
             or (path.name != "command_table.py" and path.parent.name != "tools"  # its prog
                 and SCRIPT.search(text))]
    assert found == []
