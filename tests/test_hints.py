"""Hints that teach (issue 15): the first-level hint a learner sees in the student version names
what to compute, the shapes and the idea, never code; deeper levels come from
``dl.check.hint(name)``, and the reference solution only from ``dl.check.solution(name)``."""
from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import numpy as np
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


def _plain(text: str) -> str:
    """Lower case, no whitespace: ``1 / (1 - p)`` and ``1/(1-p)`` read the same."""
    return re.sub(r"\s+", "", text).lower()


def _raise_text(source: str) -> str | None:
    """The text of the ``raise NotImplementedError("...")`` in a learner's cell."""
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                and getattr(node.exc.func, "id", "") == "NotImplementedError" and node.exc.args):
            return node.exc.args[0].value
    return None


@pytest.mark.parametrize("path, ex", EXERCISES, ids=[f"{p.stem}-{e.name}" for p, e in EXERCISES])
def test_the_learners_stub_asks_and_never_gives_the_answer(path, ex):
    """Issue 37: the raise text of the learner's copy (the first-level hint) is a question or a
    pointer; it holds none of its exercise's answer tokens (``ANSWER_TOKENS`` beside each
    lesson's ``HINTS``: ``1/(1-p)``, ``127``, ``unbiased``, ...)."""
    tokens = hints_module.ANSWER_TOKENS.get(ex.name)
    assert tokens, (f"{ex.name} has no ANSWER_TOKENS beside its lesson's HINTS (the words and "
                    f"expressions that would give its answer away)")
    nb = nbformat.read(path, as_version=4)
    student = make_student_notebook(nb, path.name).cells[ex.cell]
    shown = _raise_text(student.source) if student.cell_type == "code" else ex.hint
    assert shown == ex.hint, f"{ex.name}: the learner's raise text is not its # HINT: line"
    given = [t for t in tokens if _plain(t) in _plain(shown)]
    assert not given, (f"{path.name}: the first-level hint of {ex.name} gives the answer away "
                       f"({given}): ask a question or point at the section instead, and keep "
                       f"the answer for a deeper level (HINTS) or the derivation")


def _stub_leaks(nb, student, name, earlier):
    """The answer tokens of exercise ``earlier`` that the learner's cell of ``name`` shows."""
    cell = next(ex.cell for ex in exercises(nb) if ex.name == name)
    shown = _plain(student.cells[cell].source)
    return [t for t in hints_module.ANSWER_TOKENS[earlier] if _plain(t) in shown]


def test_the_conv2d_naive_stub_does_not_show_the_output_size_formula():
    """Issue 37: the code around a learner's box is on screen; 06a's conv2d_naive once computed
    OH with the formula that exercise 1 (conv_output_size) asks for."""
    nb = nbformat.read(NOTEBOOKS / "06a_convolution_and_im2col.ipynb", as_version=4)
    student = make_student_notebook(nb, "06a")
    assert _stub_leaks(nb, student, "conv2d_naive", "conv_output_size") == []
    cell = next(ex.cell for ex in exercises(nb) if ex.name == "conv2d_naive")
    assert "//" not in student.cells[cell].source
    student.cells[cell].source = student.cells[cell].source.replace(     # the old stub
        "    x_pad =", "    OH = (H + 2 * padding - KH) // stride + 1\n    x_pad =")
    assert "// stride" in _stub_leaks(nb, student, "conv2d_naive", "conv_output_size")


def test_answer_tokens_name_only_exercises():
    assert set(hints_module.ANSWER_TOKENS) <= {ex.name for _, ex in EXERCISES}
    assert all(isinstance(t, str) and t.strip() for tokens in hints_module.ANSWER_TOKENS.values()
               for t in tokens)


@pytest.mark.parametrize("path, ex", EXERCISES, ids=[f"{p.stem}-{e.name}" for p, e in EXERCISES])
def test_every_exercise_has_a_deeper_hint_and_the_last_is_not_the_solution(path, ex):
    levels = hints_module.HINTS.get(ex.name)
    assert levels, f"{ex.name} has no deeper hint in dlcourse/check/hints.py HINTS"
    statements, _ = _solution_code(nbformat.read(path, as_version=4).cells[ex.cell].source)
    assert _squash(" ".join(levels[-1:])) != _squash(" ".join(statements))


@pytest.fixture
def record(tmp_path, monkeypatch):
    """A fresh learner's record in a workspace of its own (solutions not turned off)."""
    from dlcourse.check import learner_record
    monkeypatch.setenv(learner_record.ENV, str(tmp_path))
    monkeypatch.delenv(learner_record.SOLUTIONS_ENV, raising=False)
    learner_record.forget()
    yield learner_record
    learner_record.forget()


def _wrong_relu_backward(dout, cache):
    return dout * (cache >= 0)                       # the classic mistake: >= instead of >


def test_hint_goes_one_level_at_a_time_from_level_1(record):
    first = dl.check.hint("conv2d_backward")          # never seen: level 1, not 2 (issue 37)
    assert first.startswith("Hint 1 of")
    second = dl.check.hint("conv2d_backward")
    assert "Hint 2 of" in second and "dl.check.hint('conv2d_backward') again" in second
    n = len(hints_module.HINTS["conv2d_backward"]) + 1
    for _ in range(n):
        last = dl.check.hint("conv2d_backward")
    assert f"Hint {n} of {n}" in last and "dl.check.solution('conv2d_backward')" in last
    assert "dW[f] +=" not in first + second
    assert dl.check.hint("conv2d_backward", 1).startswith("Hint 1 of")   # a level on request
    assert record.entry("conv2d_backward")["hint"] == n                 # the deepest one seen
    with pytest.raises(KeyError, match="No exercise is called 'nope'"):
        dl.check.hint("nope")
    with pytest.raises(ValueError, match="has hints 1 to"):
        dl.check.hint("relu_backward", 99)


def test_solution_waits_for_an_attempt_and_the_last_hint(record, capsys):
    reference = "dx = dout * (x > 0)"
    before = dl.check.solution("relu_backward")          # a fresh start: no reference line
    shown = capsys.readouterr().out
    assert reference not in shown and reference not in before
    assert "run its check on an answer of your own" in shown and "last one" in shown
    with pytest.raises(dl.check.ExerciseError):
        dl.check.relu_backward(_wrong_relu_backward)      # a failed attempt ...
    assert record.entry("relu_backward")["fails"] == 1
    capsys.readouterr()
    assert reference not in dl.check.solution("relu_backward")   # ... but the hints unread
    assert "run its check" not in capsys.readouterr().out
    for _ in range(len(hints_module.HINTS["relu_backward"]) + 1):
        dl.check.hint("relu_backward")
    code = dl.check.solution("relu_backward")            # now it shows
    assert code.strip() == reference and reference in capsys.readouterr().out
    assert record.entry("relu_backward")["solutions"] == 1


def test_an_unchanged_stub_is_not_an_attempt(record):
    def relu_backward(dout, cache):
        raise NotImplementedError("which inputs did max(x, 0) let through?")
    with pytest.raises(dl.check.ExerciseError, match="not implemented yet"):
        dl.check.relu_backward(relu_backward)
    assert record.entry("relu_backward")["fails"] == 0


def test_an_instructor_turns_solutions_off(record, monkeypatch, tmp_path, capsys):
    with pytest.raises(dl.check.ExerciseError):
        dl.check.relu_backward(_wrong_relu_backward)
    for _ in range(len(hints_module.HINTS["relu_backward"]) + 1):
        dl.check.hint("relu_backward")
    monkeypatch.setenv(record.SOLUTIONS_ENV, "off")
    assert "dx = dout" not in dl.check.solution("relu_backward")
    assert "turned off" in capsys.readouterr().out
    monkeypatch.delenv(record.SOLUTIONS_ENV)
    (tmp_path / record.SETTINGS).write_text('{"solutions": "off"}\n')   # the course's setting
    assert "turned off" in dl.check.solution("relu_backward")
    (tmp_path / record.SETTINGS).unlink()
    assert "dx = dout" in dl.check.solution("relu_backward")


def test_derivation_waits_for_a_pass(record, monkeypatch):
    from dlcourse.check import harness
    monkeypatch.setattr(harness, "_passed", set())       # no pass in this session either
    with pytest.raises(dl.check.ExerciseError, match="shown once your answer passes"):
        dl.check.derivation("softmax_ce_grad")


def test_a_hint_and_a_solution_show_once_in_a_notebook(tmp_path):
    """Issue 29: printed once, as text, not echoed again as ``Out[n]`` with literal ``\\n``;
    issue 37: a fresh kernel's solution() says what is still to do, and shows no reference."""
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell('import dlcourse as dl\ndl.check.hint("relu_backward")'),
        nbformat.v4.new_code_cell('dl.check.solution("relu_backward")'),
        nbformat.v4.new_code_cell(
            'def relu_backward(dout, cache):\n    return dout * (cache >= 0)\n'
            'try:\n    dl.check.relu_backward(relu_backward)\nexcept dl.check.ExerciseError:\n'
            '    pass\n_ = [dl.check.hint("relu_backward") for _ in range(5)]'),
        nbformat.v4.new_code_cell('dl.check.solution("relu_backward")')])
    nbclient.NotebookClient(nb, timeout=120,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell, words in zip([nb.cells[i] for i in (0, 1, 3)],
                           ("Hint 1 of", "is shown after you have tried it yourself",
                            "Reference solution of relu_backward")):
        assert [out.output_type for out in cell.outputs] == ["stream"], cell.outputs
        assert cell.outputs[0].text.count(words) == 1 and "\\n" not in cell.outputs[0].text
    assert "dx = dout" not in nb.cells[1].outputs[0].text
    assert not (tmp_path / ".dlcourse-progress.json").exists()    # no workspace: in memory
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
    """Every string constant (and every constant part of an f-string) in a check module, but
    its ANSWER_TOKENS (what a first-level hint must not say; never shown to the learner)."""
    tree = ast.parse(Path(module.__file__).read_text())
    for top in tree.body:
        if isinstance(top, ast.AnnAssign) and getattr(top.target, "id", "") == "ANSWER_TOKENS":
            top.value = ast.Constant(None)
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


# -- Issue 37: a check never prints the answer of the lesson's own by-hand example ----------------
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:e-?\d+)?")


def _prints(message: str, values) -> bool:
    """Whether ``message`` shows ``values`` (flattened) as a run of numbers, to 3 digits."""
    shown = [float(n) for n in _NUMBER.findall(message.replace("(", " ").replace(")", " "))]
    want = [float(v) for v in np.ravel(values)]
    return any(np.allclose(shown[i:i + len(want)], want, rtol=2e-3, atol=1e-6)
               for i in range(len(shown) - len(want) + 1))


def _hinge_example():
    scores = np.array([[3.2, 5.1, -1.7], [1.3, 4.9, 2.0], [2.2, 2.5, -3.1]])
    y, rows = np.array([0, 1, 2]), np.arange(3)
    terms = np.maximum(0, scores - scores[rows, y][:, None] + 1)
    terms[rows, y] = 0
    dscores = (terms > 0).astype(float)
    dscores[rows, y] = -dscores.sum(axis=1)
    return dscores / 3


def _hinge_with(grad):
    def hinge_grad(scores, y, margin):
        rows = np.arange(scores.shape[0])
        terms = np.maximum(0, scores - scores[rows, y][:, None] + margin)
        terms[rows, y] = 0
        return terms.sum() / scores.shape[0], grad(scores, terms)
    return hinge_grad


def _quantize_with(q, scale):
    def quantize_symmetric(x):
        return q(x), scale(x)
    return quantize_symmetric


def _first_max_last(window):
    out = np.zeros_like(window)
    flat = window.ravel()
    out.flat[flat.size - 1 - int(np.argmax(flat[::-1]))] = 1.0
    return out


BY_HAND = [   # (check, a wrong answer, what that answer must not be shown)
    ("hinge_grad", _hinge_with(lambda s, t: np.zeros_like(s)), _hinge_example()),
    ("hinge_grad", _hinge_with(lambda s, t: -_hinge_example()), _hinge_example()),
    ("max_window_grad", lambda window: np.zeros_like(window), [[0, 1], [0, 0]]),
    ("max_window_grad", lambda window: (window == window.max()) * 1.0, [[0, 1], [0, 0]]),
    ("quantize_symmetric", _quantize_with(lambda x: np.zeros(x.shape, np.int8),
                                          lambda x: float(np.abs(x).max()) / 127),
     [-127, -64, 0, 33, 64]),
    ("quantize_symmetric", _quantize_with(lambda x: np.zeros(x.shape, np.int8),
                                          lambda x: float(np.abs(x).max()) / 255), [1 / 127]),
]


@pytest.mark.parametrize("check, answer, hidden", BY_HAND,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(BY_HAND)])
def test_no_check_message_prints_a_by_hand_examples_answer(check, answer, hidden):
    """The lesson works these examples by hand: a failing check says what came back and names
    the mistake, but never prints the example's expected values (issue 37)."""
    with pytest.raises(dl.check.ExerciseError) as info:
        getattr(dl.check, check)(answer)
    message = str(info.value)
    assert "by-hand example" in message, message
    assert not _prints(message, hidden), f"{check}'s message prints the by-hand answer:\n{message}"


def test_the_by_hand_test_sees_a_printed_array():
    assert _prints("    expected: [[0., 1.],\n               [0., 0.]]", [[0, 1], [0, 0]])
    assert _prints("scale is 0.5, expected 0.00787402.", [1 / 127])
    assert not _prints("got: [[0., 0.], [0., 0.]]", [[0, 1], [0, 0]])
