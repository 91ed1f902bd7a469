"""Hints that teach (issue 15): the first-level hint a learner sees in the student version names
what to compute, the shapes and the idea, never code; deeper levels come from
``dl.check.hint(name)``, and the reference solution only from ``dl.check.solution(name)``."""
from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

import dlcourse as dl  # noqa: E402
from dlcourse.check import hints as hints_module  # noqa: E402
from dlcourse.student import _block, exercises, make_student_notebook  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
EXERCISES = [(path, ex) for path in sorted(NOTEBOOKS.glob("*.ipynb"))
             for ex in exercises(nbformat.read(path, as_version=4))]
# Expression kinds that are code when they appear in a hint (a name alone or a number is not).
CODE = (ast.BinOp, ast.Call, ast.Subscript, ast.Compare, ast.BoolOp, ast.Attribute, ast.UnaryOp)


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _solution_code(source: str) -> tuple[list[str], list[str]]:
    """(the solution's lines, the source text of every expression in it), whitespace removed."""
    lines = _block(source)[1]
    code = textwrap.dedent("\n".join(lines))
    statements = [_squash(line) for line in code.splitlines()
                  if line.strip() and not line.strip().startswith("#")]
    expressions = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, CODE):
            text = _squash(ast.unparse(node))
            if len(text) >= 4:
                expressions.append(text)
    return statements, expressions


@pytest.mark.parametrize("path, ex", EXERCISES, ids=[f"{p.stem}-{e.name}" for p, e in EXERCISES])
def test_first_level_hint_holds_no_solution_code(path, ex):
    nb = nbformat.read(path, as_version=4)
    assert ex.hint, f"{path.name}: {ex.name} has no `# HINT:` line in its solution block"
    student = make_student_notebook(nb, path.name).cells[ex.cell].source
    shown = _squash(student)
    statements, expressions = _solution_code(nb.cells[ex.cell].source)
    for line in statements:
        assert line not in shown, f"{path.name}: {ex.name}'s student version shows a solution line"
    hint = _squash(ex.hint)
    leaked = [e for e in expressions if e in hint]
    assert not leaked, (f"{path.name}: the first-level hint of {ex.name} contains solution code "
                        f"{leaked}; say the idea and the shapes, and move code-like text to "
                        f"dl.check.hints.HINTS")


@pytest.mark.parametrize("path, ex", EXERCISES, ids=[f"{p.stem}-{e.name}" for p, e in EXERCISES])
def test_every_exercise_has_a_deeper_hint_and_the_last_is_not_the_solution(path, ex):
    levels = hints_module.HINTS.get(ex.name)
    assert levels, f"{ex.name} has no deeper hint in dlcourse/check/hints.py HINTS"
    statements, _ = _solution_code(nbformat.read(path, as_version=4).cells[ex.cell].source)
    assert _squash(" ".join(levels[-1:])) != _squash(" ".join(statements))


def test_hint_goes_one_level_at_a_time_and_solution_only_on_request(capsys, monkeypatch):
    monkeypatch.setattr(hints_module, "_shown", {})
    first = dl.check.hint("conv2d_backward", 1)
    assert "Hint 1 of" in first
    second = dl.check.hint("conv2d_backward")
    assert "Hint 2 of" in second and "dl.check.hint('conv2d_backward') again" in second
    n = len(hints_module.HINTS["conv2d_backward"]) + 1
    for _ in range(n):
        last = dl.check.hint("conv2d_backward")
    assert f"Hint {n} of {n}" in last and "dl.check.solution('conv2d_backward')" in last
    assert "dW[f] +=" not in first + second
    code = dl.check.solution("relu_backward")
    assert code.strip() == "dx = dout * (x > 0)"
    with pytest.raises(KeyError, match="No exercise is called 'nope'"):
        dl.check.hint("nope")
    with pytest.raises(ValueError, match="has hints 1 to"):
        dl.check.hint("relu_backward", 99)


def test_a_hint_and_a_solution_show_once_in_a_notebook(tmp_path):
    """Issue 29: printed once, as text, not echoed again as ``Out[n]`` with literal ``\\n``."""
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell('import dlcourse as dl\ndl.check.hint("relu_backward", 1)'),
        nbformat.v4.new_code_cell('dl.check.solution("relu_backward")')])
    nbclient.NotebookClient(nb, timeout=120,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell, words in zip(nb.cells, ("Hint 1 of", "Reference solution of relu_backward")):
        assert [out.output_type for out in cell.outputs] == ["stream"], cell.outputs
        assert cell.outputs[0].text.count(words) == 1 and "\\n" not in cell.outputs[0].text
    assert isinstance(dl.check.solution("relu_backward"), str)      # still text for code


# --------------------------------------------------------------------------------------
# Checks never show their own answers
# --------------------------------------------------------------------------------------
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_a_failing_check_shows_the_learners_cell_and_the_message_not_the_check(tmp_path):
    """A student notebook (03) with the exercises solved, one of them wrong, executed by a real
    kernel: the error shows the message, and no frame or source line of the check."""
    nbclient = pytest.importorskip("nbclient")
    source = nbformat.read(NOTEBOOKS / "03_backpropagation.ipynb", as_version=4)
    relu = next(ex for ex in exercises(source) if ex.name == "relu_backward")
    nb = nbformat.read(NOTEBOOKS / "03_backpropagation.ipynb", as_version=4)
    nb.cells = nb.cells[:relu.check + 1]
    nb.cells[relu.cell].source = nb.cells[relu.cell].source.replace(
        "dx = dout * (x > 0)", "dx = dout * (x >= 0)")            # the learner's mistake
    client = nbclient.NotebookClient(nb, timeout=120, allow_errors=True,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [out for out in nb.cells[relu.check].outputs if out.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == "ExerciseError"
    shown = ANSI.sub("", "\n".join(errors[0].traceback))
    assert "relu_backward is not right yet" in shown and "use x > 0, not x >= 0" in shown
    for internal in ("dlcourse/check", "harness.py", "backprop.py", "expect_close(", "fail(fn",
                     "expected = dout * (x > 0)", "__tracebackhide__"):
        assert internal not in shown, f"the traceback shows the check's {internal!r}:\n{shown}"
    # Every check frame is hidden: each function in dlcourse/check/ sets __tracebackhide__.
    for path in (NOTEBOOKS.parent / "dlcourse" / "check").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and path.name not in ("hints.py", "__init__.py"):
                assert any(isinstance(s, ast.Assign) and getattr(s.targets[0], "id", "") ==
                           "__tracebackhide__" for s in node.body[:2]), (path.name, node.name)


# -- Issue 26: every level teaches, no message hands over the fix's code -----------------------
def _all_solution_code():
    """(statements, expressions) of every reference solution of every notebook, squashed."""
    statements, expressions = set(), set()
    for path, ex in EXERCISES:
        s, e = _solution_code(nbformat.read(path, as_version=4).cells[ex.cell].source)
        statements.update(s)
        expressions.update(e)
    return statements, expressions


@pytest.mark.parametrize("path, ex", EXERCISES, ids=[f"{p.stem}-{e.name}" for p, e in EXERCISES])
def test_no_hint_level_holds_solution_code(path, ex):
    """Every level of the ladder is words, shapes, a question or pseudo-code with blanks
    (``dx = ___ / sqrt(var + eps)``): never a line or an expression of the reference."""
    statements, expressions = _solution_code(nbformat.read(path, as_version=4).cells[ex.cell].source)
    for level, text in enumerate(hints_module.HINTS.get(ex.name, []), start=2):
        shown = _squash(text)
        leaked = [c for c in statements + expressions if c in shown]
        assert not leaked, (f"{ex.name}: hint level {level} contains solution code {leaked}; say "
                            f"it in words, or as pseudo-code with blanks")


def _message_strings(module):
    """Every string constant (and every constant part of an f-string) in a check module."""
    tree = ast.parse(Path(module.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


# Every module of dl.check but the package itself and the hint machinery (a new lesson's module
# is held to this without anyone remembering to list it).
CHECK_MODULES = sorted(p.stem for p in (NOTEBOOKS.parent / "dlcourse" / "check").glob("*.py")
                       if p.stem not in ("__init__", "hints"))


@pytest.mark.parametrize("name", CHECK_MODULES)
def test_no_check_message_holds_a_line_of_a_reference_solution(name):
    """A check names the mistake; its "likely fix" says the idea in words, never the reference's
    code (a line of any solution, or one of its longer expressions)."""
    import importlib
    module = importlib.import_module(f"dlcourse.check.{name}")
    statements, expressions = _all_solution_code()
    code = statements | {e for e in expressions if len(e) >= 10}
    leaks = [(line, c) for line, text in _message_strings(module) for c in code
             if c in _squash(text)]
    assert not leaks, (f"dlcourse/check/{name}.py: messages quote solution code "
                       f"(line, code): {leaks[:8]}{' ...' if len(leaks) > 8 else ''}")
